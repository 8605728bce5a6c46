"""The last-head pin: a ledger's entry count and head hash, signed, kept beside the signing key.

Why: everything else the ledger rests on lives in the ledger folder and the releases folder, so whoever can
write both can put back an older copy of the ledger (entries.jsonl and HEAD from before the last release)
and hide the releases published since (e.g. renamed to their `.<period>.publishing` staging name); the
older ledger verifies and the remaining folders match it. The pin lives where a copy of the ledger folder
does not reach: `<signing key>.pins/`, one file per ledger, named by the ledger's identity (its absolute,
resolved path; several ledgers may share one key). Each append writes it after HEAD, and every read
compares the ledger with it:

- fewer entries than pinned, or another entry at the pinned index: the ledger was rolled back, cut or
  replaced (PinMismatch, which blocks);
- more entries than pinned, with the pinned head in place: an append whose pin write was lost to a crash
  (or a ledger extended with the same key elsewhere); accepted, and the next locked operation re-pins;
- no pin: first use; the next locked operation pins what is there.

The pin is signed with the ledger's Ed25519 key, so it verifies under the same trusted public key as the
entries. It protects against someone who can write the ledger and releases folders, not against someone
who can also write the key's folder (they can delete the pin, as they could take the key).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from spatial_release.fileio import TEMPORARY, atomic_path
from spatial_release.ledger.errors import LedgerKeyError, PinMismatch
from spatial_release.ledger.keys import key_id, signing_key_path

PINS_SUFFIX = ".pins"


@dataclass(frozen=True)
class Pin:
    """What a pin records: the ledger it belongs to, how many entries it had and the last one's hash."""

    ledger: str
    entries: int
    head: str


def ledger_identity(folder: Path) -> str:
    """The absolute, resolved path of the ledger folder: a copy elsewhere is another ledger with its own
    pin (a copy cannot be told from a rollback by its content), the same folder always finds its pin."""
    return str(folder.resolve())


def pins_folder(signing_key: Path | None = None) -> Path:
    """`<signing key>.pins/` beside the private key (default `signing_key_path()`): outside any ledger
    folder, and one folder per key, so a pin is always signed by the key it sits beside."""
    key = signing_key or signing_key_path()
    return key.with_name(key.name + PINS_SUFFIX)


def pin_path(folder: Path, signing_key: Path | None = None) -> Path:
    """The pin file of the ledger in `folder`: named by the sha256 of its identity (a path may hold any
    character; the file keeps the identity itself, so the name is only an index)."""
    digest = hashlib.sha256(ledger_identity(folder).encode()).hexdigest()[:32]
    return pins_folder(signing_key) / f"{digest}.json"


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
        pin = Pin(str(body["ledger"]), int(body["entries"]), str(body["head"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise PinMismatch(f"the ledger pin {path} is malformed; it was edited (delete it only if the ledger "
                          "is known to be complete: the next run pins the ledger as it is)") from None
    if body.get("signer") != key_id(public_key):
        raise PinMismatch(f"the ledger pin {path} is signed by key {str(body.get('signer'))[:12]}..., not by "
                          "the trusted key: it was replaced, or the ledger is verified with the wrong key")
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
            f"the ledger holds {_entries_word(len(hashes))} but its pin {path} records {pin.entries} ending "
            f"{pin.head[:12]}...: {_entries_word(missing)} missing. An older copy of the ledger was put back "
            f"(or its end cut off, or it was deleted): releases published since may have been hidden, e.g. "
            f"renamed to .<period>.publishing under releases/. Put the newer ledger back; delete the pin only "
            f"if this ledger was deliberately started over")
    if pin.entries and hashes[pin.entries - 1] != pin.head:
        raise PinMismatch(
            f"ledger entry {pin.entries - 1} is not the head its pin {path} records ({pin.head[:12]}...): the "
            "ledger was replaced by another one signed with the same key. Put the pinned ledger back")
    return len(hashes) > pin.entries


def check_pin(folder: Path, hashes: list[str], trusted: Callable[[], Ed25519PublicKey | None],
              signing_key: Path | None = None) -> bool:
    """Compare the ledger in `folder` (its entries' hashes, already verified as a chain) with its pin
    beside `signing_key`. True when the pin should be (re)written: there is none yet, or the ledger is
    ahead of it. Raises PinMismatch (behind, diverged, or a pin that does not verify), or LedgerKeyError
    when a pin exists but no trusted key can verify it."""
    path = pin_path(folder, signing_key)
    if not path.exists():
        return True
    public_key = trusted()
    if public_key is None:
        raise LedgerKeyError(f"the ledger pin {path} exists but no trusted public key can verify it")
    pin = _parse_pin(path, public_key)
    if pin.ledger != ledger_identity(folder):
        raise PinMismatch(f"the ledger pin {path} belongs to {pin.ledger}, not to {ledger_identity(folder)}: "
                          "it was copied or renamed by hand")
    return _compare(pin, path, hashes)


def _remove_stale_pin_temporaries(path: Path) -> None:
    # only this ledger's: the pins folder is shared by ledgers whose locks we do not hold
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        if TEMPORARY.match(tmp.name) and tmp.is_file():
            tmp.unlink(missing_ok=True)


def write_pin(folder: Path, hashes: list[str], key: Ed25519PrivateKey, signing_key: Path | None = None) -> Path:
    """Pin the ledger in `folder` at its last entry (temp file, fsync, rename), signed by `key`, the
    private key at `signing_key` (default `signing_key_path()`). Call under the ledger lock, with entries
    that verify. Returns the pin file."""
    path = pin_path(folder, signing_key)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _remove_stale_pin_temporaries(path)
    pin = Pin(ledger_identity(folder), len(hashes), hashes[-1] if hashes else "0" * 64)
    body = {**asdict(pin), "pinned_at": datetime.now(timezone.utc).isoformat(), "signer": key_id(key.public_key())}
    body["signature"] = base64.b64encode(key.sign(_signed_bytes(body))).decode()
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return path


def forget_pin(folder: Path, signing_key: Path | None = None) -> None:
    """Drop the pin of the ledger in `folder`: for a ledger deliberately deleted to start over (the demo
    replacing its output folder), whose empty successor would otherwise read as a rollback."""
    pin_path(folder, signing_key).unlink(missing_ok=True)
