"""releases/ against the ledger: what detects a ledger deleted, truncated or re-made by someone who can
write its folder (each release.json carries its entry's hash)."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from spatial_release.fileio import sha256_file
from spatial_release.ledger.errors import ReleasesMismatch


def _record_of(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / "release.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


# Fields of release.json that the signed ledger entry also holds: an edit of either shows as a mismatch.
SIGNED_RECORD_FIELDS = ("dataset", "period", "policy", "risk")


def _check_record_fields(folder: Path, record: dict, entry: dict) -> None:
    for field in SIGNED_RECORD_FIELDS:
        if field in entry and record.get(field) != entry[field]:
            raise ReleasesMismatch(
                f"{folder}/release.json field '{field}' differs from ledger entry "
                f"{entry['seq']}: the published record was edited"
            )
    if "record_sha256" in entry and record_hash(record) != entry["record_sha256"]:
        raise ReleasesMismatch(
            f"{folder}/release.json differs from the record ledger entry {entry['seq']} "
            "signed: the published record was edited"
        )


def record_hash(record: dict) -> str:
    """sha256 of the release record as signed: its canonical JSON without `ledger_entry` (written after)."""
    body = {k: v for k, v in record.items() if k != "ledger_entry"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _check_file_hashes(folder: Path, entry: dict) -> None:
    """The published files themselves, re-hashed: an edit of cells.parquet after publication (a figure set
    below k) must not pass because release.json still names the old hash."""
    for name, digest in (entry.get("files") or {}).items():
        path = folder / name
        if not path.is_file() or sha256_file(path) != digest:
            raise ReleasesMismatch(
                f"{path} does not match the sha256 its ledger entry {entry['seq']} "
                "records: the published file was altered or removed"
            )


def _hidden_folders(releases_root: Path) -> Iterator[Path]:
    """Folders where a release folder would be, but hidden (a hidden period or dataset folder): staging
    folders, publications kept aside, or a release renamed out of sight."""
    for folder in sorted(releases_root.glob("*/*")):
        if folder.is_dir() and (folder.name.startswith(".") or folder.parent.name.startswith(".")):
            yield folder


def _check_hidden(entries: list[dict], releases_root: Path) -> None:
    """A hidden folder holding a release.json whose ledger entry this ledger does not have is a published
    release hidden after the ledger was rolled back or edited: ReleasesMismatch. The others are reported
    on stderr (kept for someone to look at), not checked."""
    hashes = {e.get("hash") for e in entries if e.get("kind") == "release"}
    for folder in _hidden_folders(releases_root):
        record = _record_of(folder)
        if record is not None and record.get("ledger_entry") not in hashes:
            raise ReleasesMismatch(
                f"{folder} holds a published release (release.json names ledger entry "
                f"{str(record.get('ledger_entry'))[:12]}...) that the ledger does not record: "
                "the ledger was rolled back or edited and the release hidden"
            )
        print(
            f"spatial-release: {folder} is not a release (a publication interrupted, or in progress, or "
            "kept aside); not checked",
            file=sys.stderr,
        )


def check_releases(entries: list[dict], releases_root: Path) -> None:
    """Every release entry has its folder, whose release.json names that entry and its file hashes, and
    every release folder under `releases_root` has its entry; no hidden folder there holds a release the
    ledger does not record (other hidden folders are reported on stderr). Raises ReleasesMismatch naming
    the first disagreement: the ledger was edited, truncated or deleted, or a folder was added, removed or
    hidden by hand."""
    known = {(e.get("dataset"), e.get("period")): e for e in entries if e.get("kind") == "release"}
    for (dataset, period), entry in known.items():
        folder = releases_root / str(dataset) / str(period)
        record = _record_of(folder)
        if record is None:
            raise ReleasesMismatch(
                f"ledger entry {entry['seq']} records {dataset} {period} but {folder} "
                "has no readable release.json (the release folder was removed or the entry "
                "was forged; an interrupted publication is finished by re-running it)"
            )
        if record.get("ledger_entry") != entry["hash"] or record.get("files") != entry.get("files"):
            raise ReleasesMismatch(
                f"{folder}/release.json does not match ledger entry {entry['seq']} (its ledger_entry or file hashes differ)"
            )
        _check_record_fields(folder, record, entry)
        _check_file_hashes(folder, entry)
    if not releases_root.is_dir():
        return
    _check_hidden(entries, releases_root)
    for dataset_dir in sorted(p for p in releases_root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for folder in sorted(p for p in dataset_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if (dataset_dir.name, folder.name) not in known:
                raise ReleasesMismatch(
                    f"{folder} is a published release the ledger does not record (the ledger "
                    "was edited, truncated or deleted): no risk is assessed against it"
                )
