"""Files are replaced atomically: a crash leaves the old file or the new one (release folders and ledger
entries: tests/test_risk_pipeline.py, crash tests)."""

import pytest

from spatial_release.fileio import atomic_path


def test_crash_while_writing_a_file_keeps_the_old_one(tmp_path):
    target = tmp_path / "f.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("new but incomplete")
            raise RuntimeError("crash")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
