"""The code digest of a package imported from a zip (spark-submit --py-files, a zipapp) is the digest of its
files, as for a folder: a stale zip on a Spark executor differs from the driver's code, and so is refused by
the Spark runner (`tasks.SparkTasks`) and never reused by `stages.reuse`."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spatial_release import codeversion


def _zip_package(path: Path, edit: tuple[str, bytes] | None = None) -> Path:
    """The running package's Python files in a zip, optionally with one file's bytes replaced."""
    source = Path(str(codeversion.PACKAGE))
    with zipfile.ZipFile(path, "w") as archive:
        for file in sorted(source.rglob("*.py")):
            name = file.relative_to(source).as_posix()
            data = edit[1] if edit and edit[0] == name else file.read_bytes()
            archive.writestr(f"spatial_release/{name}", data)
    return path


def _digest_imported_from(archive: Path) -> str:
    """CODE_DIGEST in a fresh interpreter that imports the package from `archive` (first on its path)."""
    env = {**os.environ, "PYTHONPATH": str(archive)}
    script = "import spatial_release.codeversion as c; assert '.zip' in c.__file__, c.__file__; print(c.digest_of_files())"
    # from the zip's folder: `python -c` puts its working directory first on the path
    run = [sys.executable, "-c", script]
    done = subprocess.run(run, env=env, cwd=archive.parent, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_zipped_package_has_its_files_digest_and_a_stale_zip_another(tmp_path):
    same = _zip_package(tmp_path / "same.zip")
    blocks = Path(str(codeversion.PACKAGE)) / "suppression" / "blocks.py"
    stale = _zip_package(tmp_path / "stale.zip", ("suppression/blocks.py", blocks.read_bytes() + b"\nSTALE = 1\n"))
    folder = codeversion.digest_of_files()
    assert _digest_imported_from(same) == folder
    assert _digest_imported_from(stale) != folder


def test_a_package_without_python_files_cannot_be_digested(tmp_path):
    """The digest of no files would be one value for every version of the code (a reader that cannot list
    the package's files made a stale zip match a driver that also ran from a zip)."""
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as archive:
        archive.writestr("spatial_release/README.txt", "no code here")
    with pytest.raises(codeversion.CodeUnreadable, match="no Python file"):
        codeversion.digest_of_files(zipfile.Path(tmp_path / "empty.zip", "spatial_release/"))
    (tmp_path / "folder").mkdir()
    with pytest.raises(codeversion.CodeUnreadable):
        codeversion.digest_of_files(tmp_path / "folder")
