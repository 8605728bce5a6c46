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
- **Putting back an older copy of the ledger folder** (and hiding the releases published since): the
  last-head pin, signed and kept beside the signing key, outside the ledger folder, keyed by the ledger's
  genesis so that a copy at another path finds it too (`ledger.pin`); a ledger behind its pin, or
  diverging from it, does not verify, wherever it lives.
- **Crashes**: an append replaces entries.jsonl, then HEAD, then the pin, each in one rename. A crash
  between the first two leaves HEAD exactly one entry behind (or missing after the first append), which
  reads as valid only because the extra entry is signed; one before the pin's rename leaves the ledger
  ahead of its pin, which reads as valid because the pinned head is still in the chain. The next locked
  operation repairs both. Temporaries that a killed writer left in the ledger folder are removed under
  the lock, so a live writer's temporary is never touched.
"""

from spatial_release.ledger.chain import (
    GENESIS,
    HEAD,
    LOCK,
    RESERVED,
    append_entry,
    canonical,
    entry_hash,
    ledger_lock,
    read_ledger,
    verify_chain,
)
from spatial_release.ledger.crosscheck import check_releases
from spatial_release.ledger.entries import ReleaseEntry, ReleaseEntryBody, ReviewEntry, find_release, release_entries
from spatial_release.ledger.errors import (
    ENTRIES,
    AlreadyRecorded,
    LedgerCorrupt,
    LedgerError,
    LedgerKeyError,
    PinMismatch,
    ReleasesMismatch,
)
from spatial_release.ledger.handle import Ledger
from spatial_release.ledger.keys import (
    DEFAULT_SIGNING_KEY,
    PUBLIC_KEY_ENV,
    SIGNING_KEY_ENV,
    key_id,
    load_public_key,
    load_signing_key,
    public_key_path_for,
    signing_key_path,
    trusted_public_key,
)
from spatial_release.ledger.pin import PINS_SUFFIX, forget_pin, ledger_identity, pin_path, pins_folder

__all__ = [
    "DEFAULT_SIGNING_KEY",
    "ENTRIES",
    "GENESIS",
    "HEAD",
    "LOCK",
    "PINS_SUFFIX",
    "PUBLIC_KEY_ENV",
    "RESERVED",
    "SIGNING_KEY_ENV",
    "AlreadyRecorded",
    "Ledger",
    "LedgerCorrupt",
    "LedgerError",
    "LedgerKeyError",
    "PinMismatch",
    "ReleaseEntry",
    "ReleaseEntryBody",
    "ReviewEntry",
    "ReleasesMismatch",
    "append_entry",
    "canonical",
    "check_releases",
    "entry_hash",
    "find_release",
    "forget_pin",
    "key_id",
    "ledger_identity",
    "ledger_lock",
    "load_public_key",
    "load_signing_key",
    "pin_path",
    "pins_folder",
    "public_key_path_for",
    "read_ledger",
    "release_entries",
    "signing_key_path",
    "trusted_public_key",
    "verify_chain",
]
