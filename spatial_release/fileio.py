"""Atomic file and folder writes: a crash leaves the old state or the new one, never half of each."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

# The temporaries atomic_path names: `.<target name>.<32 hex digits>.tmp`.
TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")
# The folders scratch_folder makes: `.<purpose>.<8 of tempfile's name characters>.scratch`.
SCRATCH = re.compile(r"^\..+\.[a-z0-9_]{8}\.scratch$")


OWNER_ONLY = 0o077


def restrict_umask() -> None:
    """Add owner-only to the process umask, so every file and folder the pipeline creates (DuckDB's and
    Spark's included) is 0600 / 0700 from the moment it exists: the work area holds per-unit data
    (validated pings, memberships, key sets, quarantined raw rows) that another user of the machine must
    never read. A chmod after the write would leave a window; the umask leaves none."""
    current = os.umask(OWNER_ONLY)
    os.umask(current | OWNER_ONLY)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary sibling path to write; on success it replaces `target` in one rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def remove_stale_temporaries(folder: Path, recursive: bool = False) -> list[Path]:
    """Delete the temporaries that atomic_path left when its process was killed (a crash between writing
    the temporary and renaming it), and the scratch folders (`scratch_folder`) a killed run left. Call only
    while holding the lock that every writer of `folder` holds: a live writer's temporary looks the same."""
    if not folder.is_dir():
        return []
    candidates = list(folder.rglob(".*") if recursive else folder.glob(".*"))
    removed = []
    for path in candidates:
        if TEMPORARY.match(path.name) and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
        elif SCRATCH.match(path.name) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def scratch_folder(parent: Path | None, purpose: str) -> tempfile.TemporaryDirectory:
    """A private folder (0700) for per-unit intermediates (DuckDB's spill files, key ranges), deleted by its
    cleanup. In `parent`, a work-area folder whose step lock removes what a killed run left there
    (`remove_stale_temporaries`); in the system's temporary folder when None, where nothing would."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=f".{purpose}.", suffix=".scratch", dir=parent)


@contextmanager
def folder_lock(lock_file: Path) -> Iterator[IO[str]]:
    """An exclusive flock on `lock_file` (created if needed), held until the block ends; yields the open
    file, which callers may read and rewrite (e.g. to record who holds a claim). The kernel releases the
    lock when the process dies, so a killed holder never leaves it taken."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield handle
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_json_atomic(target: Path, payload: object) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
