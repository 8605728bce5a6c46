"""Releases and their files are written atomically: a crash leaves the old state or the new one."""

import pytest

from spatial_release.fileio import atomic_directory, atomic_path


def test_crash_while_filling_a_release_leaves_nothing(tmp_path):
    target = tmp_path / "ds" / "2018-Q1"
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as staging:
            (staging / "cells.parquet").write_bytes(b"half")
            raise RuntimeError("crash")
    assert not target.exists()
    assert list((tmp_path / "ds").iterdir()) == []  # no staging debris either


def test_existing_release_is_never_replaced(tmp_path):
    target = tmp_path / "2018-Q1"
    target.mkdir()
    (target / "release.json").write_text("old")
    with pytest.raises(FileExistsError):
        with atomic_directory(target):
            pass
    assert (target / "release.json").read_text() == "old"


def test_crash_while_writing_a_file_keeps_the_old_one(tmp_path):
    target = tmp_path / "f.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("new but incomplete")
            raise RuntimeError("crash")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
