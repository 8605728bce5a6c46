"""The digest of this process's code: the package's files and the versions of the libraries that compute.

Saved results are reused only when the code that computed them is the code running now (`stages.reuse`).
The digest is taken when the package is imported. A long-running process (a Dagster code server, a
benchmark) keeps running what it imported after the files are upgraded, and most modules are imported
lazily, after the package: so the digest is valid only while the files and libraries on disk still hash to
it. Once they differ, `current_digest` is None and nothing is reused or saved (an old process never labels
its results with the new code's digest, nor a module imported after an upgrade with the old one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from importlib import metadata, resources
from importlib.resources.abc import Traversable

# The package as its importer sees it: a folder, or a folder inside a zip (spark-submit --py-files, a zipapp),
# whose files a filesystem walk would not find.
PACKAGE: Traversable = resources.files(__package__)
# whose results a saved estimate or verdict depends on: random streams, solvers, readers and writers
LIBRARIES = ("numpy", "pandas", "pyarrow", "duckdb", "highspy", "numba", "shapely", "pyproj", "geopandas")


class CodeUnreadable(RuntimeError):
    """The package's Python files cannot be read where it was imported from."""


def _python_files(folder: Traversable, parts: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Traversable]]:
    for entry in folder.iterdir():
        if entry.is_dir():
            yield from _python_files(entry, (*parts, entry.name))
        elif entry.name.endswith(".py"):
            yield (*parts, entry.name), entry


def digest_of_files(package: Traversable = PACKAGE) -> str:
    """sha256 of every Python file under `package` (relative path and bytes), in a folder or a zip. A package
    without one is refused: the digest of no files would be the same for every version of the code."""
    files = sorted(_python_files(package))
    if not files:
        raise CodeUnreadable(f"no Python file of spatial_release found under {package}: its code cannot be digested")
    digest = hashlib.sha256()
    for parts, entry in files:
        digest.update("/".join(parts).encode() + b"\0")
        digest.update(entry.read_bytes())
    return digest.hexdigest()


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def digest_on_disk() -> str:
    text = digest_of_files() + repr(sorted(library_versions().items()))
    return hashlib.sha256(text.encode()).hexdigest()


CODE_DIGEST = digest_on_disk()


def current_digest() -> str | None:
    """The digest taken at import while the code on disk is unchanged since; None once it changed."""
    return CODE_DIGEST if digest_on_disk() == CODE_DIGEST else None
