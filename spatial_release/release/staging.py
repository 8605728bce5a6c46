"""Publication of a release folder `<releases>/<dataset>/<period>/`, all or nothing: the checked candidate
files (written into the work area first) and their rendered report are copied into a staging folder beside
the target with a pending record, the ledger entry is appended, release.json is written and one rename makes
the release visible. A crash leaves no release or the whole release (`recover_interrupted`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from spatial_release.fileio import sha256_file, write_json_atomic
from spatial_release.ledger import ReleasesMismatch, find_release
from spatial_release.release.files import RELEASE_FILES, file_hashes

# Renders the release's report files into a folder from the tables there and the (pending) record; returns
# the names of the files it wrote (e.g. `stages.publish.render_report`).
Renderer = Callable[[Path, dict], tuple[str, ...]]

PENDING = "record.pending.json"


STAGING_SUFFIX = ".publishing"
# `.<period>.publishing.abandoned-<UTC time>`: a publication that never reached the ledger, kept aside
ABANDONED = ".abandoned-"


def staging_dir(target: Path) -> Path:
    return target.with_name(f".{target.name}{STAGING_SUFFIX}")


def quarantine(staging: Path) -> Path:
    """Move a staging folder that no ledger entry will ever finish aside, owner-only, and say so; never
    delete it. Why kept: a publication that crashed before its ledger append leaves one, but so does a
    published release renamed to its staging name; deleting either destroys the evidence of the second.
    Returns the new folder, `.<period>.publishing.abandoned-<UTC time>`, which nothing finishes or checks."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    kept = staging.with_name(f"{staging.name}{ABANDONED}{stamp}")
    os.rename(staging, kept)
    os.chmod(kept, 0o700)  # it may hold unpublished tables: readable by the owner only
    print(
        f"spatial-release: {staging} is a publication interrupted before its ledger entry (nothing was "
        f"published); kept as {kept}. Look at it, then delete it",
        file=sys.stderr,
    )
    return kept


def publish(candidate: Path, target: Path, record: dict, register: Callable[[dict], str], render: Renderer) -> Path:
    """Publish the checked candidate files with their record and a ledger entry, all or nothing.

    Order: files, their report (report.png, report.html) and the pending record go into a staging folder
    beside the target, every file hashed into the record; `register(record)`
    appends the ledger entry and returns its hash; release.json (with that hash) is written; one rename
    makes the release visible. A crash before the ledger append leaves only the staging folder (kept
    aside by the next attempt, see `quarantine`); a crash after it leaves a staging folder that
    `finish_pending` completes (see `recover_interrupted`). Call under the ledger lock, so that no two
    publishers stage at once.

    candidate: the checked files' folder in the work area. target: the release folder (`release_dir`);
    FileExistsError if it exists. record: the release record without its file hashes (added here).
    register: appends the record's ledger entry (e.g. `Ledger.append`) and returns its hash. render: writes
    the report files into the staging folder from the staged tables and the pending record only (what the
    public will see) and returns their names; if it fails, the staging folder is removed and nothing is
    published. Returns target.
    """
    if target.exists():
        raise FileExistsError(f"{target} already exists; a published release is never overwritten")
    staging = staging_dir(target)
    if staging.exists():  # recover_interrupted ran first under the same lock: only a folder made by hand
        _refuse_if_published(staging, target)
        quarantine(staging)
    staging.mkdir(parents=True)
    for name in RELEASE_FILES:
        shutil.copyfile(candidate / name, staging / name)
    try:
        reports = render(staging, record)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    record = {**record, "files": file_hashes(staging, (*RELEASE_FILES, *reports))}
    write_json_atomic(staging / PENDING, record)
    entry_hash = register(record)
    return finish_pending(target, entry_hash)


def finish_pending(target: Path, entry_hash: str, entry_files: dict[str, str] | None = None) -> Path:
    """Complete a staged release whose ledger entry exists: write release.json and rename into place.
    Safe to call again after a crash at any point of it. `entry_files` (the file hashes the ledger entry
    records) must match the staged files, so a staging folder swapped by hand is never published."""
    staging = staging_dir(target)
    if (staging / PENDING).exists():
        record = json.loads((staging / PENDING).read_text())
        if entry_files is not None and record["files"] != entry_files:
            raise RuntimeError(f"{staging} does not hold the files its ledger entry records; not publishing")
        for name, digest in record["files"].items():
            if sha256_file(staging / name) != digest:
                raise RuntimeError(f"{staging / name} does not match its pending record; not publishing")
        write_json_atomic(staging / "release.json", {**record, "ledger_entry": entry_hash})
        (staging / PENDING).unlink()
    record = json.loads((staging / "release.json").read_text())
    if record.get("ledger_entry") != entry_hash:
        raise RuntimeError(f"{staging} belongs to another ledger entry; not publishing")
    os.rename(staging, target)
    return target


def _refuse_if_published(staging: Path, target: Path) -> None:
    """Raise ReleasesMismatch when a staging folder the ledger does not record holds a release.json: that
    file is written only after the ledger append, so this is a published release whose entry is gone (an
    older ledger put back, the release renamed out of sight), not a crashed publication."""
    if (staging / "release.json").exists():
        raise ReleasesMismatch(
            f"{staging} holds a published release (its release.json is written only after the ledger entry) "
            f"but the ledger does not record {target.parent.name} {target.name}: the ledger was rolled back "
            "or edited and the release hidden under its staging name. Kept as it is; nothing is published "
            "until the ledger that records it is put back"
        )


def recover_interrupted(releases_root: Path, entries: list[dict]) -> list[Path]:
    """Roll every interrupted publication under `releases_root` forward, or keep it aside; returns the
    releases it finished. A staging folder whose release the ledger records and whose release folder does
    not exist (a crash after the append) is finished. One the ledger does not record is a crash before the
    append (nothing published): it is moved aside, owner-only, and reported (`quarantine`), never deleted.
    Evidence of tampering blocks (ReleasesMismatch) and is left in place: a staging folder holding a
    release.json the ledger does not record, or one beside the release folder its ledger entry published.
    Call under the ledger lock: every publisher stages under it, so no staging folder seen here belongs to
    a live publisher."""
    finished = []
    for staging in sorted(releases_root.glob(f"*/.*{STAGING_SUFFIX}")):
        target = staging.parent / staging.name[1 : -len(STAGING_SUFFIX)]
        entry = find_release(entries, target.parent.name, target.name)
        if entry is None:
            _refuse_if_published(staging, target)
            quarantine(staging)
        elif target.exists():
            raise ReleasesMismatch(
                f"{staging} sits beside {target}, which ledger entry {entry.seq} published: a publication "
                "never leaves both (its last step renames one into the other), so one was copied or renamed "
                "by hand. Both are kept; compare them with the ledger entry"
            )
        else:
            finished.append(finish_pending(target, entry.hash, dict(entry.files) if entry.files is not None else None))
    return finished
