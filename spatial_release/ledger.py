"""The release ledger: an append-only, hash-chained record of every published release and risk review.

`ledger/entries.jsonl` holds one JSON entry per line; each carries the hash of the previous entry and its
own hash over its canonical JSON, so an edit, a deletion or a reordering breaks the chain where it happened.
`ledger/HEAD` holds the number of entries and the last hash, so that cutting entries off the end is
detected too. Appends take an exclusive lock, verify the chain, and replace the file in one rename (then
HEAD): a crash leaves the old ledger or the new one; a crash between the two renames leaves HEAD one entry
behind, which `read_ledger` accepts and reports (it is the only state that sequence can produce).
The ledger lives in the repository and is reviewed like code.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from spatial_release.fileio import atomic_path

ENTRIES = "entries.jsonl"
HEAD = "HEAD"
GENESIS = "0" * 64


class LedgerCorrupt(ValueError):
    """The ledger does not verify; the message names the first bad entry."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"ledger entry {index}: {reason}")
        self.index = index
        self.reason = reason


def canonical(entry: dict) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str).encode()


def entry_hash(entry: dict) -> str:
    return hashlib.sha256(canonical({k: v for k, v in entry.items() if k != "hash"})).hexdigest()


@dataclass(frozen=True)
class Ledger:
    folder: Path

    @property
    def entries_path(self) -> Path:
        return self.folder / ENTRIES

    @property
    def head_path(self) -> Path:
        return self.folder / HEAD

    def read(self) -> list[dict]:
        return read_ledger(self.folder)

    def append(self, payload: dict) -> dict:
        return append_entry(self.folder, payload)

    def releases(self, dataset: str | None = None) -> list[dict]:
        return [e for e in self.read() if e["kind"] == "release" and (dataset is None or e["dataset"] == dataset)]


def _parse(folder: Path) -> list[dict]:
    path = folder / ENTRIES
    if not path.exists():
        return []
    entries = []
    for number, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            raise LedgerCorrupt(number, "empty line inside the ledger")
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise LedgerCorrupt(number, f"not valid JSON ({exc.msg})") from None
    return entries


def verify_chain(entries: list[dict]) -> None:
    previous = GENESIS
    for index, entry in enumerate(entries):
        if entry.get("seq") != index:
            raise LedgerCorrupt(index, f"sequence number {entry.get('seq')} where {index} was expected "
                                       "(an entry was deleted, inserted or moved)")
        if entry.get("prev_hash") != previous:
            raise LedgerCorrupt(index, "prev_hash does not match the previous entry (deleted or reordered)")
        if entry.get("hash") != entry_hash(entry):
            raise LedgerCorrupt(index, "hash does not match the entry's content (the entry was edited)")
        previous = entry["hash"]


def _read_head(folder: Path) -> tuple[int, str] | None:
    path = folder / HEAD
    if not path.exists():
        return None
    count, last = path.read_text().split()
    return int(count), last


def read_ledger(folder: Path) -> list[dict]:
    """All entries, verified; raises LedgerCorrupt naming the first bad entry."""
    entries = _parse(folder)
    verify_chain(entries)
    head = _read_head(folder)
    if head is None:
        if entries:
            raise LedgerCorrupt(len(entries) - 1, "ledger/HEAD is missing")
        return entries
    count, last = head
    tip = entries[-1]["hash"] if entries else GENESIS
    if count == len(entries) and last == tip:
        return entries
    if count == len(entries) - 1 and last == (entries[-2]["hash"] if len(entries) > 1 else GENESIS):
        return entries  # a crash between the two renames of an append: the entry is complete and chained
    if count > len(entries):
        raise LedgerCorrupt(len(entries), f"HEAD records {count} entries but only {len(entries)} remain "
                                          "(entries were cut off the end)")
    raise LedgerCorrupt(len(entries) - 1, "HEAD does not match the last entry")


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def append_entry(folder: Path, payload: dict) -> dict:
    """Append one entry (payload must carry `kind`), under the lock, atomically; returns the stored entry."""
    if "kind" not in payload:
        raise ValueError("a ledger entry needs a 'kind' (release or review)")
    with _locked(folder):
        entries = read_ledger(folder)
        entry = {**payload, "seq": len(entries), "prev_hash": entries[-1]["hash"] if entries else GENESIS,
                 "recorded_at": payload.get("recorded_at") or datetime.now(timezone.utc).isoformat()}
        entry["hash"] = entry_hash(entry)
        text = "".join(canonical(e).decode() + "\n" for e in [*entries, entry])
        with atomic_path(folder / ENTRIES) as tmp:
            tmp.write_text(text)
        with atomic_path(folder / HEAD) as tmp:
            tmp.write_text(f"{len(entries) + 1} {entry['hash']}\n")
        return entry


def cumulative_risk(figures: list[float]) -> float:
    """1 - prod(1 - p_i): the probability that at least one release singles the target out."""
    remaining = 1.0
    for p in figures:
        remaining *= 1.0 - p
    return 1.0 - remaining


