"""Entries, the hash chain and HEAD: parse, verify, lock, append. See the package docstring for what each
property rests on."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from spatial_release.fileio import atomic_path, folder_lock, remove_stale_temporaries, restrict_umask
from spatial_release.ledger.entries import find_release
from spatial_release.ledger.errors import ENTRIES, AlreadyRecorded, LedgerCorrupt, LedgerKeyError
from spatial_release.ledger.keys import PUBLIC_KEY_ENV, key_id, load_signing_key, signing_key_path, trusted_public_key
from spatial_release.ledger.pin import check_pin, write_pin

HEAD = "HEAD"
LOCK = ".lock"
GENESIS = "0" * 64
# Fields the ledger sets itself; a payload cannot choose them.
RESERVED = ("seq", "prev_hash", "hash", "signer", "signature")
_HASH = re.compile(r"^[0-9a-f]{64}$")


def canonical(entry: dict) -> bytes:
    """An entry's canonical JSON (sorted keys, no spaces, UTF-8): the bytes hashed and the line written."""
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str).encode()


def entry_hash(entry: dict) -> str:
    """sha256 (hex) of the entry's canonical JSON without its own `hash` and `signature`; it covers
    `prev_hash`, so each entry's hash commits to the whole chain before it."""
    return hashlib.sha256(canonical({k: v for k, v in entry.items() if k not in ("hash", "signature")})).hexdigest()


def _sign(entry: dict, key: Ed25519PrivateKey) -> str:
    return base64.b64encode(key.sign(entry["hash"].encode())).decode()


def _signature_ok(entry: dict, key: Ed25519PublicKey) -> bool:
    try:
        key.verify(base64.b64decode(str(entry.get("signature", "")), validate=True), str(entry["hash"]).encode())
    except (InvalidSignature, ValueError):
        return False
    return True


def _parse(folder: Path) -> list[dict]:
    path = folder / ENTRIES
    if not path.exists():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        at = path.read_bytes()[: exc.start].count(b"\n")
        raise LedgerCorrupt(at, "not UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last entry
    entries = []
    for number, line in enumerate(lines):
        if not line.strip():
            raise LedgerCorrupt(number, "empty line inside the ledger")
        try:
            entry = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise LedgerCorrupt(number, f"not valid JSON ({getattr(exc, 'msg', exc)})") from None
        if not isinstance(entry, dict):
            raise LedgerCorrupt(number, "not a JSON object")
        entries.append(entry)
    return entries


def verify_chain(entries: list[dict], public_key: Ed25519PublicKey | None) -> None:
    """Check `entries` (in file order) as a chain: seq 0, 1, ...; each prev_hash is the previous entry's
    hash (GENESIS for the first); each hash matches the content; each entry is signed by `public_key`
    (its `signer` is that key and its signature verifies). Raises LedgerCorrupt at the first bad entry, or
    LedgerKeyError when there are entries and `public_key` is None."""
    if not entries:
        return
    if public_key is None:
        raise LedgerKeyError(
            f"no trusted public key to verify the ledger's signatures: pass --public-key, set "
            f"{PUBLIC_KEY_ENV}, or keep the signing key's .pub at {signing_key_path()}.pub"
        )
    previous = GENESIS
    trusted = key_id(public_key)
    for index, entry in enumerate(entries):
        if entry.get("seq") != index:
            raise LedgerCorrupt(
                index,
                f"sequence number {entry.get('seq')!r} where {index} was expected (an entry was deleted, inserted or moved)",
            )
        if entry.get("prev_hash") != previous:
            raise LedgerCorrupt(index, "prev_hash does not match the previous entry (deleted or reordered)")
        if entry.get("hash") != entry_hash(entry):
            raise LedgerCorrupt(index, "hash does not match the entry's content (the entry was edited)")
        if "kind" not in entry:
            raise LedgerCorrupt(index, "no 'kind'")
        if entry.get("signer") != trusted:
            raise LedgerCorrupt(
                index,
                f"signed by key {str(entry.get('signer'))[:12]}..., not by the trusted "
                f"key {trusted[:12]}... (forged, or verified with the wrong public key)",
            )
        if not _signature_ok(entry, public_key):
            raise LedgerCorrupt(index, "signature does not verify (the entry was forged or edited)")
        previous = entry["hash"]


def _read_head(folder: Path) -> tuple[int, str] | None:
    path = folder / HEAD
    if not path.exists():
        return None
    try:
        count_text, last = path.read_text().split()
        count = int(count_text)
    except (ValueError, UnicodeDecodeError):
        raise LedgerCorrupt(None, "malformed (expected '<number of entries> <hash of the last entry>')") from None
    if count < 0 or not (_HASH.match(last)):
        raise LedgerCorrupt(None, "malformed (expected '<number of entries> <hash of the last entry>')")
    return count, last


def _head_behind(folder: Path, entries: list[dict]) -> bool:
    """Check HEAD against the entries; True when it is exactly one entry behind (a crash between the two
    renames of an append, or HEAD missing after the first). Raises LedgerCorrupt otherwise."""
    count, last = _read_head(folder) or (0, GENESIS)
    if not (folder / HEAD).exists() and len(entries) > 1:
        raise LedgerCorrupt(None, f"HEAD is missing while the ledger holds {len(entries)} entries")
    tip = entries[-1]["hash"] if entries else GENESIS
    if count == len(entries) and last == tip:
        return False
    if count == len(entries) - 1 and last == (entries[-2]["hash"] if len(entries) > 1 else GENESIS):
        return True  # the last entry is complete, chained and signed; only HEAD's rename was lost
    if count > len(entries):
        raise LedgerCorrupt(None, f"records {count} entries but only {len(entries)} remain (entries were cut off the end)")
    raise LedgerCorrupt(
        None,
        f"does not match the last entry (HEAD says {count} entries ending {last[:12]}..., "
        f"the ledger holds {len(entries)} ending {tip[:12]}...)",
    )


def _read_checked(
    folder: Path, trusted: Callable[[], Ed25519PublicKey | None], signing_key: Path | None = None
) -> tuple[list[dict], bool]:
    """The verified entries, and whether the pin should be (re)written (none yet, or the ledger ahead)."""
    trusted = functools.cache(trusted)  # the chain and the pin verify under one key, read from disk once
    entries = _parse(folder)
    verify_chain(entries, trusted() if entries else None)  # an empty ledger needs no key
    _head_behind(folder, entries)
    # last: a ledger that is corrupt in itself is reported as such, before any comparison with its pin
    return entries, check_pin(folder, [e["hash"] for e in entries], trusted, signing_key)


def _read(folder: Path, trusted: Callable[[], Ed25519PublicKey | None], signing_key: Path | None = None) -> list[dict]:
    return _read_checked(folder, trusted, signing_key)[0]


def read_ledger(folder: Path, public_key: Ed25519PublicKey | None = None, signing_key: Path | None = None) -> list[dict]:
    """All entries of the ledger in `folder`, verified (chain, signatures, HEAD, and the last-head pin
    beside the signing key, see `ledger.pin`); [] for a ledger not yet written. `public_key`: the key to
    verify under (default `trusted_public_key()`, never one from the folder). `signing_key`: the private
    key whose `.pins/` folder holds the pin (default `signing_key_path()`; it need not exist, only the pin
    is read). Raises LedgerCorrupt naming the first bad entry or HEAD, PinMismatch when the ledger is
    behind its pin (an older copy put back) or diverges from it, or LedgerKeyError when there are entries
    but no trusted key. HEAD one entry behind (a crash between the two renames of an append) reads as
    valid, and so does a ledger ahead of its pin (a crash before the pin's rename); the next locked
    operation repairs both."""
    return _read(folder, lambda: public_key if public_key is not None else trusted_public_key(), signing_key)


# ----------------------------------------------------------------------------------------- lock, append

_held = threading.local()


@contextmanager
def ledger_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock over the ledger folder, re-entrant within a thread (the release gate holds it across
    its read, assessment and append, and the append takes it again). On entry, it rolls a crashed append
    forward (HEAD one behind) and removes temporaries that killed writers left."""
    restrict_umask()  # the ledger may be the first thing a process writes (the command line's pre-flight)
    folder.mkdir(parents=True, exist_ok=True)
    key = str(folder.resolve())
    held: set[str] = getattr(_held, "folders", set())
    _held.folders = held
    if key in held:
        yield
        return
    with folder_lock(folder / LOCK):
        held.add(key)
        try:
            remove_stale_temporaries(folder)  # safe: every writer of this folder holds this lock
            yield
        finally:
            held.discard(key)


def _repair_head(folder: Path, entries: list[dict]) -> None:
    if entries and _head_behind(folder, entries):
        _write_head(folder, entries)


def _repair_pin(folder: Path, entries: list[dict], stale: bool, signing_key: Path | None = None) -> None:
    """Pin the ledger when `stale` (no pin yet, or the ledger ahead of it) and the private key is here to
    sign it: an auditor's process, which holds only the public key, reads and compares but never pins.
    An empty ledger is not pinned: there is nothing a rollback could remove."""
    path = signing_key or signing_key_path()
    if stale and entries and path.exists():
        write_pin(folder, [e["hash"] for e in entries], load_signing_key(path, create=False), path)


def _write_head(folder: Path, entries: list[dict]) -> None:
    with atomic_path(folder / HEAD) as tmp:
        tmp.write_text(f"{len(entries)} {entries[-1]['hash']}\n")


def append_entry(folder: Path, payload: dict, signing_key: Path | None = None) -> dict:
    """Append one signed entry to the ledger in `folder`, under the lock, atomically; return the entry.

    payload: the entry's fields; it must carry `kind` ("release" or "review"); the ledger sets `seq`,
    `prev_hash`, `hash`, `signer` and `signature` itself (RESERVED) and `recorded_at` unless given.
    signing_key: the private key file (default `signing_key_path()`, created on first use). The appender
    verifies the existing entries under its own key only. Refuses (AlreadyRecorded) a second release entry
    for the same (dataset, period), and a ledger that does not verify (LedgerCorrupt)."""
    if "kind" not in payload:
        raise ValueError("a ledger entry needs a 'kind' (release or review)")
    with ledger_lock(folder):
        key = load_signing_key(signing_key)
        # the appender trusts its own key only, and compares with the pin beside it
        entries = read_ledger(folder, key.public_key(), signing_key)
        _repair_head(folder, entries)
        if payload["kind"] == "release":
            earlier = find_release(entries, payload.get("dataset"), payload.get("period"))
            if earlier is not None:
                raise AlreadyRecorded(
                    f"the ledger already records {payload.get('dataset')} {payload.get('period')} "
                    f"(entry {earlier.seq}); a (dataset, period) is recorded once"
                )
        entry = {k: v for k, v in payload.items() if k not in RESERVED}
        entry.update(
            seq=len(entries),
            prev_hash=entries[-1]["hash"] if entries else GENESIS,
            recorded_at=payload.get("recorded_at") or datetime.now(UTC).isoformat(),
            signer=key_id(key.public_key()),
        )
        entry["hash"] = entry_hash(entry)
        entry["signature"] = _sign(entry, key)
        text = "".join(canonical(e).decode() + "\n" for e in [*entries, entry])
        with atomic_path(folder / ENTRIES) as tmp:
            tmp.write_text(text)
        _write_head(folder, [*entries, entry])
        # after HEAD: a crash before this rename leaves the ledger one entry ahead of its pin, which reads
        # as valid (the pinned head is still in the chain) and is re-pinned by the next locked operation
        write_pin(folder, [e["hash"] for e in (*entries, entry)], key, signing_key or signing_key_path())
        return entry
