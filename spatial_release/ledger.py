"""The release ledger: an append-only, hash-chained, signed record of every published release and review.

`ledger/entries.jsonl` holds one JSON entry per line; each carries the hash of the previous entry, its own
hash over its canonical JSON, and an Ed25519 signature of that hash. `ledger/HEAD` holds the number of
entries and the last hash, so that cutting entries off the end is detected too.

What each property rests on:
- **Edits, deletions, reordering**: the chain (seq, prev_hash, hash) breaks where it happened.
- **Consistent re-hashing and forged appends** by someone who can write the ledger folder: every entry's
  signature must verify under the *trusted* public key, which is never read from the ledger folder (see
  `trusted_public_key`); the private key lives outside the repository, owner-only (`signing_key_path`).
- **Deleting or truncating the ledger**: each release record carries its entry's hash, and
  `check_releases` cross-checks `releases/` against the ledger (a folder the ledger does not know, or an
  entry without its folder, is a mismatch). The release gate runs it before every risk assessment.
- **Concurrency**: `Ledger.locked()` is one exclusive, re-entrant (per thread) lock over the ledger folder;
  the release gate holds it across "already published?", the risk assessment and the append, and
  `append_entry` refuses a second release entry for a (dataset, period) whatever the caller did.
- **Crashes**: an append replaces entries.jsonl then HEAD, each in one rename. A crash between them leaves
  HEAD exactly one entry behind (or missing after the first append), which reads as valid only because
  the extra entry is signed, and which the next locked operation repairs. Temporaries that a killed writer
  left in the ledger folder are removed under the lock, so a live writer's temporary is never touched.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from spatial_release.errors import Blocked
from spatial_release.fileio import atomic_path, folder_lock, remove_stale_temporaries

ENTRIES = "entries.jsonl"
HEAD = "HEAD"
LOCK = ".lock"
GENESIS = "0" * 64
SIGNING_KEY_ENV = "SPATIAL_RELEASE_SIGNING_KEY"
PUBLIC_KEY_ENV = "SPATIAL_RELEASE_PUBLIC_KEY"
DEFAULT_SIGNING_KEY = "~/.config/spatial-release/ledger-ed25519.key"
# Fields the ledger sets itself; a payload cannot choose them.
RESERVED = ("seq", "prev_hash", "hash", "signer", "signature")
_HASH = re.compile(r"^[0-9a-f]{64}$")


class LedgerError(Blocked, RuntimeError):
    """The ledger cannot be trusted or used as it is; the message says why and what to do."""


class LedgerCorrupt(LedgerError):
    """The ledger does not verify; the message names the first bad entry and its line (or HEAD)."""

    def __init__(self, index: int | None, reason: str):
        where = "ledger HEAD" if index is None else f"ledger entry {index} (line {index + 1} of {ENTRIES})"
        super().__init__(f"{where}: {reason}")
        self.index = index
        self.reason = reason


class LedgerKeyError(LedgerError):
    """No usable key: the signing key is missing or not owner-only, or no trusted public key is known."""


class ReleasesMismatch(LedgerError):
    """releases/ and the ledger disagree: a folder the ledger does not know, or an entry without its folder."""


class AlreadyRecorded(Blocked, FileExistsError):
    """The ledger already records a release of this (dataset, period); releases are immutable."""


# ---------------------------------------------------------------------------------------------- keys


def signing_key_path() -> Path:
    return Path(os.environ.get(SIGNING_KEY_ENV) or DEFAULT_SIGNING_KEY).expanduser()


def public_key_path_for(private: Path) -> Path:
    return private.with_name(private.name + ".pub")


def _check_owner_only(path: Path) -> None:
    # like ssh: a private key others can read (or that another user owns) is not trusted to sign
    info = path.stat()
    if info.st_mode & 0o077 or info.st_uid != os.getuid():
        raise LedgerKeyError(f"{path}: the ledger signing key must be owned by you and owner-only "
                             f"(mode is {oct(info.st_mode & 0o777)}); run: chmod 600 {path}")


def _create_signing_key(path: Path) -> None:
    """Write a new key owner-only from the first byte; two processes racing here end with one key."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)  # fails if another process created the key meanwhile: theirs wins
    except FileExistsError:
        return
    finally:
        tmp.unlink()
    public = public_key_path_for(path)
    with atomic_path(public) as tmp_pub:
        tmp_pub.write_bytes(_public_pem(key.public_key()))
    os.chmod(public, 0o644)
    print(f"spatial-release: created the ledger signing key {path} (owner-only; keep it outside the "
          f"repository and back it up). Auditors verify with its public key {public}.", file=sys.stderr)


def load_signing_key(path: Path | None = None, create: bool = True) -> Ed25519PrivateKey:
    """The private key that signs ledger entries, created on first use when `create`."""
    path = path or signing_key_path()
    if not path.exists():
        if not create:
            raise LedgerKeyError(f"no ledger signing key at {path} (set {SIGNING_KEY_ENV})")
        _create_signing_key(path)
    _check_owner_only(path)
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise LedgerKeyError(f"{path} is not an Ed25519 private key")
    return key


def _public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise LedgerKeyError(f"{path}: cannot read the ledger public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise LedgerKeyError(f"{path} is not an Ed25519 public key")
    return key


def trusted_public_key(explicit: Path | None = None) -> Ed25519PublicKey | None:
    """The public key the ledger must verify under. Never read from the ledger folder (whoever can write
    that folder could swap it): `explicit` (--public-key), else $SPATIAL_RELEASE_PUBLIC_KEY, else the
    `.pub` beside the signing key (or the signing key itself). None when none of them exists."""
    if explicit is not None:
        return load_public_key(explicit)
    if os.environ.get(PUBLIC_KEY_ENV):
        return load_public_key(Path(os.environ[PUBLIC_KEY_ENV]).expanduser())
    private = signing_key_path()
    if public_key_path_for(private).exists():
        return load_public_key(public_key_path_for(private))
    if private.exists():
        return load_signing_key(private, create=False).public_key()
    return None


def key_id(key: Ed25519PublicKey) -> str:
    """The raw public key, base64: what each entry's `signer` holds."""
    return base64.b64encode(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)).decode()


# ------------------------------------------------------------------------------------ entries and chain


def canonical(entry: dict) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str).encode()


def entry_hash(entry: dict) -> str:
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
        line = path.read_bytes()[:exc.start].count(b"\n")
        raise LedgerCorrupt(line, "not UTF-8 text") from None
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
    """Chain, hashes and signatures; raises LedgerCorrupt at the first bad entry."""
    if entries and public_key is None:
        raise LedgerKeyError(f"no trusted public key to verify the ledger's signatures: pass --public-key, set "
                             f"{PUBLIC_KEY_ENV}, or keep the signing key's .pub at {signing_key_path()}.pub")
    previous = GENESIS
    trusted = key_id(public_key) if public_key is not None else None
    for index, entry in enumerate(entries):
        if entry.get("seq") != index:
            raise LedgerCorrupt(index, f"sequence number {entry.get('seq')!r} where {index} was expected "
                                       "(an entry was deleted, inserted or moved)")
        if entry.get("prev_hash") != previous:
            raise LedgerCorrupt(index, "prev_hash does not match the previous entry (deleted or reordered)")
        if entry.get("hash") != entry_hash(entry):
            raise LedgerCorrupt(index, "hash does not match the entry's content (the entry was edited)")
        if "kind" not in entry:
            raise LedgerCorrupt(index, "no 'kind'")
        if entry.get("signer") != trusted:
            raise LedgerCorrupt(index, f"signed by key {str(entry.get('signer'))[:12]}..., not by the trusted "
                                       f"key {trusted[:12]}... (forged, or verified with the wrong public key)")
        if not _signature_ok(entry, public_key):
            raise LedgerCorrupt(index, "signature does not verify (the entry was forged or edited)")
        previous = entry["hash"]


def _read_head(folder: Path) -> tuple[int, str] | None:
    path = folder / HEAD
    if not path.exists():
        return None
    try:
        count, last = path.read_text().split()
        count = int(count)
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
        raise LedgerCorrupt(None, f"records {count} entries but only {len(entries)} remain "
                                  "(entries were cut off the end)")
    raise LedgerCorrupt(None, f"does not match the last entry (HEAD says {count} entries ending {last[:12]}..., "
                              f"the ledger holds {len(entries)} ending {tip[:12]}...)")


def _read(folder: Path, trusted: Callable[[], Ed25519PublicKey | None]) -> list[dict]:
    entries = _parse(folder)
    verify_chain(entries, trusted() if entries else None)  # an empty ledger needs no key
    _head_behind(folder, entries)
    return entries


def read_ledger(folder: Path, public_key: Ed25519PublicKey | None = None) -> list[dict]:
    """All entries, verified (chain, signatures under the trusted key, HEAD); raises LedgerCorrupt naming
    the first bad entry, or LedgerKeyError when there are entries but no trusted key."""
    return _read(folder, lambda: public_key if public_key is not None else trusted_public_key())


# ----------------------------------------------------------------------------------------- lock, append

_held = threading.local()


@contextmanager
def ledger_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock over the ledger folder, re-entrant within a thread (the release gate holds it across
    its read, assessment and append, and the append takes it again). On entry, it rolls a crashed append
    forward (HEAD one behind) and removes temporaries that killed writers left."""
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


def _write_head(folder: Path, entries: list[dict]) -> None:
    with atomic_path(folder / HEAD) as tmp:
        tmp.write_text(f"{len(entries)} {entries[-1]['hash']}\n")


def find_release(entries: list[dict], dataset: str, period: str) -> dict | None:
    return next((e for e in entries if e.get("kind") == "release" and e.get("dataset") == dataset
                 and e.get("period") == period), None)


def append_entry(folder: Path, payload: dict, signing_key: Path | None = None) -> dict:
    """Append one signed entry (payload must carry `kind`), under the lock, atomically; returns it.
    Refuses (AlreadyRecorded) a second release entry for the same (dataset, period)."""
    if "kind" not in payload:
        raise ValueError("a ledger entry needs a 'kind' (release or review)")
    with ledger_lock(folder):
        key = load_signing_key(signing_key)
        entries = read_ledger(folder, key.public_key())  # the appender trusts its own key only
        _repair_head(folder, entries)
        if payload["kind"] == "release":
            earlier = find_release(entries, payload.get("dataset"), payload.get("period"))
            if earlier is not None:
                raise AlreadyRecorded(f"the ledger already records {payload.get('dataset')} {payload.get('period')} "
                                      f"(entry {earlier['seq']}); a (dataset, period) is recorded once")
        entry = {k: v for k, v in payload.items() if k not in RESERVED}
        entry.update(seq=len(entries), prev_hash=entries[-1]["hash"] if entries else GENESIS,
                     recorded_at=payload.get("recorded_at") or datetime.now(timezone.utc).isoformat(),
                     signer=key_id(key.public_key()))
        entry["hash"] = entry_hash(entry)
        entry["signature"] = _sign(entry, key)
        text = "".join(canonical(e).decode() + "\n" for e in [*entries, entry])
        with atomic_path(folder / ENTRIES) as tmp:
            tmp.write_text(text)
        _write_head(folder, [*entries, entry])
        return entry


# ------------------------------------------------------------------------- releases/ against the ledger


def _record_of(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / "release.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def check_releases(entries: list[dict], releases_root: Path) -> None:
    """Every release entry has its folder, whose release.json names that entry and its file hashes, and
    every release folder under `releases_root` has its entry. Raises ReleasesMismatch naming the first
    disagreement: the ledger was edited, truncated or deleted, or a folder was added or removed by hand."""
    known = {(e.get("dataset"), e.get("period")): e for e in entries if e.get("kind") == "release"}
    for (dataset, period), entry in known.items():
        folder = releases_root / str(dataset) / str(period)
        record = _record_of(folder)
        if record is None:
            raise ReleasesMismatch(f"ledger entry {entry['seq']} records {dataset} {period} but {folder} "
                                   "has no readable release.json (the release folder was removed or the entry "
                                   "was forged; an interrupted publication is finished by re-running it)")
        if record.get("ledger_entry") != entry["hash"] or record.get("files") != entry.get("files"):
            raise ReleasesMismatch(f"{folder}/release.json does not match ledger entry {entry['seq']} "
                                   "(its ledger_entry or file hashes differ)")
    if not releases_root.is_dir():
        return
    for dataset_dir in sorted(p for p in releases_root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for folder in sorted(p for p in dataset_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if (dataset_dir.name, folder.name) not in known:
                raise ReleasesMismatch(f"{folder} is a published release the ledger does not record (the ledger "
                                       "was edited, truncated or deleted): no risk is assessed against it")


# ------------------------------------------------------------------------------------------- the handle


@dataclass(frozen=True)
class Ledger:
    """A ledger folder, the releases folder it is cross-checked against (None: no cross-check), and the
    keys (None: the defaults of `signing_key_path` and `trusted_public_key`)."""

    folder: Path
    releases_root: Path | None = None
    public_key: Path | None = None
    signing_key: Path | None = None

    def with_releases(self, releases_root: Path) -> "Ledger":
        return replace(self, releases_root=releases_root)

    def _trusted(self) -> Ed25519PublicKey | None:
        if self.public_key is not None or self.signing_key is None:
            return trusted_public_key(self.public_key)
        return load_signing_key(self.signing_key, create=False).public_key()

    def read(self) -> list[dict]:
        return _read(self.folder, self._trusted)

    def append(self, payload: dict) -> dict:
        return append_entry(self.folder, payload, self.signing_key)

    def releases(self, dataset: str | None = None) -> list[dict]:
        return [e for e in self.read() if e["kind"] == "release" and (dataset is None or e["dataset"] == dataset)]

    def recorded(self, dataset: str, period: str) -> dict | None:
        return find_release(self.read(), dataset, period)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the ledger lock; a crashed append is rolled forward on entry."""
        with ledger_lock(self.folder):
            _repair_head(self.folder, self.read())
            yield

    def checked_releases(self, dataset: str | None = None) -> list[dict]:
        """Release entries after the cross-check with releases/ (when this handle knows where it is), read
        under the lock so a publication between its append and its rename is never half seen."""
        with self.locked():
            entries = self.read()
            if self.releases_root is not None:
                check_releases(entries, self.releases_root)
        return [e for e in entries if e["kind"] == "release" and (dataset is None or e["dataset"] == dataset)]
