"""The last-head pin: a ledger's entry count and head hash, signed, kept beside the signing key.

Why: everything else the ledger rests on lives in the ledger folder and the releases folder, so whoever can
write both can put back an older copy of the ledger (entries.jsonl and HEAD from before the last release)
and hide the releases published since (e.g. renamed to their `.<period>.publishing` staging name); the
older ledger verifies and the remaining folders match it. The pin lives where a copy of the ledger folder
does not reach: `<signing key>.pins/`, one file per ledger (several ledgers may share one key).

A pin is keyed by the ledger's identity that travels with every copy of it: its genesis, the hash of its
first entry. Keyed by the folder's path (as it was), a copy of the ledger and releases folders at another
path started with no pin: publishing into the copy re-published a period with a cumulative risk that left
out the releases made since the copy, and the copy verified. The pin also records every path it was written
at (the last as information), to find the pin of a ledger that was deleted or replaced at one of them (an
empty or other ledger has no genesis of the pinned one): keeping only the last would leave the original
path unpinned once a copy moved ahead elsewhere. Each append writes it after HEAD, and every read compares
the ledger, wherever it lives, with the pin of its genesis and with every pin written at its path:

- fewer entries than pinned, or another entry at the pinned index: the ledger was rolled back, cut, copied
  before a later release, or replaced (PinMismatch, which blocks);
- more entries than pinned, with the pinned head in place: an append whose pin write was lost to a crash
  (or a ledger extended with the same key elsewhere); accepted, and the next locked operation re-pins;
- no pin: first use; the next locked operation pins what is there. A pin written before pins were keyed
  by genesis (named by the path's hash, without `genesis`) is compared as the ledger's own and replaced by
  the genesis-keyed pin at the next locked operation.

The pin is signed with the ledger's Ed25519 key, so it verifies under the same trusted public key as the
entries. It protects against someone who can write the ledger and releases folders, not against someone
who can also write the key's folder (they can delete the pin, as they could take the key).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from spatial_release.fileio import TEMPORARY, atomic_path
from spatial_release.ledger.errors import ENTRIES, LedgerKeyError, PinMismatch
from spatial_release.ledger.keys import key_id, load_signing_key, signing_key_path

PINS_SUFFIX = ".pins"
_HASH = re.compile(r"[0-9a-f]{64}")
_FIRST_LINE_LIMIT = 2**20  # an entry is a few kB; the first line is read only to name the pin file


@dataclass(frozen=True)
class Pin:
    """What a pin records: the path it was written at (information), how many entries the ledger had, the
    last one's hash, and the ledger's genesis (its first entry's hash; None in a pin written before pins
    were keyed by it)."""

    ledger: str
    entries: int
    head: str
    genesis: str | None = None
    # every path the ledger was pinned at, `ledger` last: a copy that moved ahead elsewhere must not free
    # the path it came from (a ledger deleted there read as first use)
    paths: tuple[str, ...] = ()

    def written_at(self) -> tuple[str, ...]:
        return self.paths or (self.ledger,)


def ledger_identity(folder: Path) -> str:
    """The absolute, resolved path of the ledger folder, which a pin records as information and to find
    the pin of a ledger deleted or replaced there; the pin itself is keyed by the ledger's genesis."""
    return str(folder.resolve())


def pins_folder(signing_key: Path | None = None) -> Path:
    """`<signing key>.pins/` beside the private key (default `signing_key_path()`): outside any ledger
    folder, and one folder per key, so a pin is always signed by the key it sits beside."""
    key = signing_key or signing_key_path()
    return key.with_name(key.name + PINS_SUFFIX)


def _genesis_pin_path(genesis: str, signing_key: Path | None = None) -> Path:
    # named by a hash of the genesis: the name is an index only, the pin records the genesis itself
    return pins_folder(signing_key) / f"{hashlib.sha256(genesis.encode()).hexdigest()[:32]}.json"


def _path_pin_path(folder: Path, signing_key: Path | None = None) -> Path:
    """Where a pin written before pins were keyed by genesis lives: named by the hash of the path."""
    digest = hashlib.sha256(ledger_identity(folder).encode()).hexdigest()[:32]
    return pins_folder(signing_key) / f"{digest}.json"


def genesis_of(folder: Path) -> str | None:
    """The hash of the first entry of the ledger in `folder`, read from its first line without verifying it
    (only to name the pin file: the pin is compared with the verified entries), or None when there is none."""
    try:
        with (folder / ENTRIES).open("rb") as file:
            first = json.loads(file.readline(_FIRST_LINE_LIMIT))
    except (OSError, ValueError):
        return None
    value = first.get("hash") if isinstance(first, dict) else None
    return value if isinstance(value, str) and _HASH.fullmatch(value) else None


def pin_path(folder: Path, signing_key: Path | None = None) -> Path:
    """The pin file of the ledger in `folder`: keyed by its genesis, so every copy of the ledger finds the
    same pin; for a folder without entries, where a path-keyed pin of it would be."""
    genesis = genesis_of(folder)
    return _genesis_pin_path(genesis, signing_key) if genesis else _path_pin_path(folder, signing_key)


def _recorded_paths(body: object) -> list[str]:
    """The paths an unverified pin body says its ledger was pinned at (`paths`, or `ledger` in a pin written
    before pins kept every path)."""
    if not isinstance(body, dict):
        return []
    paths = body.get("paths")
    if isinstance(paths, list) and paths:
        return [str(p) for p in paths]
    return [str(body["ledger"])] if "ledger" in body else []


def _pins_written_at(folder: Path, signing_key: Path | None = None) -> list[Path]:
    """The pin files that record `folder`'s path among the paths their ledger was pinned at, unverified
    (whoever verifies one reads it again): a pin that does not parse names no ledger and is its own
    ledger's error, found by that ledger's genesis."""
    identity, found = ledger_identity(folder), []
    for path in sorted(pins_folder(signing_key).glob("*.json")):
        try:
            body = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if identity in _recorded_paths(body):
            found.append(path)
    return found


def _signed_bytes(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _entries_word(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _parse_pin(path: Path, public_key: Ed25519PublicKey) -> Pin:
    """The pin in `path`, its signature checked under `public_key`; PinMismatch when it is malformed or
    not signed by that key (whoever cannot sign cannot move a pin back either)."""
    try:
        body = json.loads(path.read_text())
        signature = base64.b64decode(str(body.pop("signature")), validate=True)
        genesis = body.get("genesis")
        paths = body.get("paths") or []
        if not isinstance(paths, list):
            raise TypeError("paths")
        pin = Pin(
            str(body["ledger"]),
            int(body["entries"]),
            str(body["head"]),
            None if genesis is None else str(genesis),
            tuple(str(p) for p in paths),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise PinMismatch(
            f"the ledger pin {path} is malformed; it was edited (delete it only if the ledger "
            "is known to be complete: the next run pins the ledger as it is)"
        ) from None
    if body.get("signer") != key_id(public_key):
        raise PinMismatch(
            f"the ledger pin {path} is signed by key {str(body.get('signer'))[:12]}..., not by "
            "the trusted key: it was replaced, or the ledger is verified with the wrong key"
        )
    try:
        public_key.verify(signature, _signed_bytes(body))
    except InvalidSignature:
        raise PinMismatch(f"the ledger pin {path}: signature does not verify (the pin was edited)") from None
    return pin


def _compare(pin: Pin, path: Path, hashes: list[str]) -> bool:
    """Raise PinMismatch when the ledger (its entries' hashes) is behind the pin or diverges from it;
    True when it is ahead of the pin (the pin needs rewriting), False when it is exactly the pinned one."""
    if len(hashes) < pin.entries:
        missing = pin.entries - len(hashes)
        raise PinMismatch(
            f"the ledger holds {_entries_word(len(hashes))} but its pin {path} (last written for the ledger at "
            f"{pin.ledger}) records {pin.entries} ending {pin.head[:12]}...: {_entries_word(missing)} missing. "
            f"An older copy of the ledger was put back or used elsewhere (or its end cut off, or it was "
            f"deleted): releases published since may have been hidden, e.g. "
            f"renamed to .<period>.publishing under releases/. Put the newer ledger back; delete the pin only "
            f"if this ledger was deliberately started over"
        )
    if pin.entries and hashes[pin.entries - 1] != pin.head:
        raise PinMismatch(
            f"ledger entry {pin.entries - 1} is not the head its pin {path} records ({pin.head[:12]}...): the "
            "ledger was replaced by another one signed with the same key. Put the pinned ledger back"
        )
    return len(hashes) > pin.entries


def check_pin(
    folder: Path, hashes: list[str], trusted: Callable[[], Ed25519PublicKey | None], signing_key: Path | None = None
) -> bool:
    """Compare the ledger in `folder` (its entries' hashes, already verified as a chain) with the pin of its
    genesis and with every pin written at its path, beside `signing_key`. True when the pin should be
    (re)written: there is none yet, the ledger is ahead of it or has moved, or it is a path-keyed pin to
    migrate. Raises PinMismatch (behind, diverged, or a pin that does not verify), or LedgerKeyError when a
    pin exists but no trusted key can verify it."""
    own = _genesis_pin_path(hashes[0], signing_key) if hashes else None
    if own is not None and not own.exists():
        own = None
    others = [path for path in _pins_written_at(folder, signing_key) if path != own]
    if own is None and not others:
        return True  # first use
    public_key = _trusted_key(trusted, own or others[0])
    stale = own is None or _compare_own(folder, own, hashes, public_key)
    for path in others:
        # a pin written here for another genesis: this ledger was deleted or replaced (it raises); one
        # without a genesis is this ledger's path-keyed pin from before (it compares, then is migrated)
        _compare(_parse_pin(path, public_key), path, hashes)
        stale = True
    return stale


def _compare_own(folder: Path, path: Path, hashes: list[str], public_key: Ed25519PublicKey) -> bool:
    """Compare the ledger with the pin of its genesis at `path`; True when it should be re-pinned (ahead of
    it, or found at another path than the pin records: the path is information, the pin follows it)."""
    pin = _parse_pin(path, public_key)
    if pin.genesis != hashes[0]:
        raise PinMismatch(
            f"the ledger pin {path} belongs to another ledger (genesis {str(pin.genesis)[:12]}...), "
            f"not to this one ({hashes[0][:12]}...): it was copied or renamed by hand"
        )
    return _compare(pin, path, hashes) or pin.ledger != ledger_identity(folder)


def _trusted_key(trusted: Callable[[], Ed25519PublicKey | None], path: Path) -> Ed25519PublicKey:
    public_key = trusted()
    if public_key is None:
        raise LedgerKeyError(f"the ledger pin {path} exists but no trusted public key can verify it")
    return public_key


def _remove_stale_pin_temporaries(path: Path) -> None:
    # only this ledger's: the pins folder is shared by ledgers whose locks we do not hold
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        if TEMPORARY.match(tmp.name) and tmp.is_file():
            tmp.unlink(missing_ok=True)


def write_pin(folder: Path, hashes: list[str], key: Ed25519PrivateKey, signing_key: Path | None = None) -> Path:
    """Pin the ledger in `folder` at its last entry (temp file, fsync, rename), keyed by its genesis and
    signed by `key`, the private key at `signing_key` (default `signing_key_path()`); a path-keyed pin of
    the folder from before is then removed. Call under the ledger lock, with entries that verify (at least
    one). Returns the pin file."""
    path = _genesis_pin_path(hashes[0], signing_key)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _remove_stale_pin_temporaries(path)
    here = ledger_identity(folder)
    _write_signed(path, Pin(here, len(hashes), hashes[-1], hashes[0], (*_earlier_paths(path, hashes[0], here), here)), key)
    # after the new pin's rename: a crash between the two leaves both, which compare alike
    _path_pin_path(folder, signing_key).unlink(missing_ok=True)
    return path


def _write_signed(path: Path, pin: Pin, key: Ed25519PrivateKey) -> None:
    body = {**asdict(pin), "pinned_at": datetime.now(UTC).isoformat(), "signer": key_id(key.public_key())}
    body["signature"] = base64.b64encode(key.sign(_signed_bytes(body))).decode()
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def _unpin_path(path: Path, here: str, signing_key: Path | None) -> bool:
    """Take the path `here` out of the pin at `path` when the pin records other paths of its ledger too,
    re-signed (after verifying it: an edited pin is never signed again); False when `here` is its only
    path (the caller deletes it)."""
    try:
        rest = [p for p in dict.fromkeys(_recorded_paths(json.loads(path.read_text()))) if p != here]
    except (OSError, ValueError):
        return False
    if not rest:
        return False
    key = load_signing_key(signing_key or signing_key_path(), create=False)
    pin = _parse_pin(path, key.public_key())
    _write_signed(path, Pin(rest[-1], pin.entries, pin.head, pin.genesis, tuple(rest)), key)
    return True


def _earlier_paths(path: Path, genesis: str, here: str) -> list[str]:
    """The other paths the pin at `path` (of `genesis`) records, as the check under the same lock just
    verified it; none when there is no such pin (first use, or a path-keyed pin from before)."""
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(body, dict) or body.get("genesis") != genesis:
        return []
    return [p for p in dict.fromkeys(_recorded_paths(body)) if p != here]


def forget_pin(folder: Path, signing_key: Path | None = None) -> None:
    """Drop the pins of the ledger in `folder`: the one of its genesis (when it still has entries) and every
    one written at its path. For a ledger deliberately deleted to start over (the demo replacing its output
    folder), whose empty successor would otherwise read as a rollback. Copies of that ledger elsewhere lose
    their pin too: they share its genesis. A pin of another genesis that was also written at other paths
    (its ledger moved on elsewhere) keeps pinning those: only this path is taken out of it, re-signed with
    the key at `signing_key`."""
    genesis = genesis_of(folder)
    own = _genesis_pin_path(genesis, signing_key) if genesis else None
    here = ledger_identity(folder)
    for path in {*_pins_written_at(folder, signing_key), _path_pin_path(folder, signing_key)} - {own}:
        if not _unpin_path(path, here, signing_key):
            path.unlink(missing_ok=True)
    if own is not None:
        own.unlink(missing_ok=True)
