"""What can be wrong with a ledger. Every kind blocks publication (exit 1): a ledger that does not verify
is not a usage error."""

from __future__ import annotations

from spatial_release.errors import Blocked

ENTRIES = "entries.jsonl"


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


class PinMismatch(LedgerError):
    """The ledger is behind or diverges from its last-head pin (kept beside the signing key): an older copy
    of the ledger was put back, or it was cut or replaced; or the pin itself does not verify."""


class AlreadyRecorded(Blocked, FileExistsError):
    """The ledger already records a release of this (dataset, period); releases are immutable."""
