"""The Ed25519 keys that sign ledger entries: where the private key lives (outside the repository,
owner-only, created on first use) and which public key a ledger is verified under (never one read from the
ledger folder, which whoever can write that folder could swap)."""

from __future__ import annotations

import base64
import os
import sys
import threading
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from spatial_release.fileio import atomic_path
from spatial_release.ledger.errors import LedgerKeyError

SIGNING_KEY_ENV = "SPATIAL_RELEASE_SIGNING_KEY"
PUBLIC_KEY_ENV = "SPATIAL_RELEASE_PUBLIC_KEY"
DEFAULT_SIGNING_KEY = "~/.config/spatial-release/ledger-ed25519.key"


def signing_key_path() -> Path:
    """Where the private signing key is: $SPATIAL_RELEASE_SIGNING_KEY, else DEFAULT_SIGNING_KEY."""
    return Path(os.environ.get(SIGNING_KEY_ENV) or DEFAULT_SIGNING_KEY).expanduser()


def public_key_path_for(private: Path) -> Path:
    """The public key written beside a private key: `<private>.pub`."""
    return private.with_name(private.name + ".pub")


def _check_owner_only(path: Path) -> None:
    # like ssh: a private key others can read (or that another user owns) is not trusted to sign
    info = path.stat()
    if info.st_mode & 0o077 or info.st_uid != os.getuid():
        raise LedgerKeyError(
            f"{path}: the ledger signing key must be owned by you and owner-only "
            f"(mode is {oct(info.st_mode & 0o777)}); run: chmod 600 {path}"
        )


def _create_signing_key(path: Path) -> None:
    """Write a new key owner-only from the first byte; two processes racing here end with one key."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
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
    print(
        f"spatial-release: created the ledger signing key {path} (owner-only; keep it outside the "
        f"repository and back it up). Auditors verify with its public key {public}.",
        file=sys.stderr,
    )


def load_signing_key(path: Path | None = None, create: bool = True) -> Ed25519PrivateKey:
    """The private key that signs ledger entries. path: its file (default `signing_key_path()`); create:
    write a new key (owner-only, with its `.pub` beside it) when there is none, else LedgerKeyError.
    A key that others can read or that another user owns is refused (LedgerKeyError), as ssh does."""
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
    """An Ed25519 public key from a PEM file; LedgerKeyError when it cannot be read or is another kind."""
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
