"""`Ledger`: one ledger folder with its releases folder and keys, the handle the stages pass around."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from spatial_release.ledger.chain import (
    _read,
    _read_checked,
    _repair_head,
    _repair_pin,
    append_entry,
    ledger_lock,
)
from spatial_release.ledger.crosscheck import check_releases
from spatial_release.ledger.entries import ReleaseEntry, find_release, release_entries
from spatial_release.ledger.keys import load_signing_key, trusted_public_key


@dataclass(frozen=True)
class Ledger:
    """A ledger folder, the releases folder it is cross-checked against (None: no cross-check), and the
    keys (None: the defaults of `signing_key_path` and `trusted_public_key`)."""

    folder: Path
    releases_root: Path | None = None
    public_key: Path | None = None
    signing_key: Path | None = None

    def with_releases(self, releases_root: Path) -> Ledger:
        """The same ledger, cross-checked against `releases_root`."""
        return replace(self, releases_root=releases_root)

    def _trusted(self) -> Ed25519PublicKey | None:
        if self.public_key is not None or self.signing_key is None:
            return trusted_public_key(self.public_key)
        return load_signing_key(self.signing_key, create=False).public_key()

    def read(self) -> list[dict]:
        """Every entry, verified under this handle's trusted key and compared with its pin (see
        `read_ledger`)."""
        return _read(self.folder, self._trusted, self.signing_key)

    def append(self, payload: dict) -> dict:
        """Append one signed entry with this handle's signing key (see `append_entry`)."""
        return append_entry(self.folder, payload, self.signing_key)

    def releases(self, dataset: str | None = None) -> list[ReleaseEntry]:
        """The release entries (of `dataset` only, when given), verified, without the cross-check."""
        return release_entries(self.read(), dataset)

    def recorded(self, dataset: str, period: str) -> ReleaseEntry | None:
        """The release entry of (dataset, period), or None."""
        return find_release(self.read(), dataset, period)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the ledger lock; on entry a crashed append is rolled forward (HEAD, then the pin), and a
        ledger not pinned yet is pinned as it is (first use)."""
        with ledger_lock(self.folder):
            entries, stale_pin = _read_checked(self.folder, self._trusted, self.signing_key)
            _repair_head(self.folder, entries)
            _repair_pin(self.folder, entries, stale_pin, self.signing_key)
            yield

    def checked_releases(self, dataset: str | None = None) -> list[ReleaseEntry]:
        """Release entries after the cross-check with releases/ (when this handle knows where it is), read
        under the lock so a publication between its append and its rename is never half seen."""
        with self.locked():
            entries = self.read()
            if self.releases_root is not None:
                check_releases(entries, self.releases_root)
        return release_entries(entries, dataset)
