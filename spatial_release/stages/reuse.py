"""Results a later step reuses instead of computing them again, only for byte-identical inputs.

A release computes two expensive results twice: the suppression audit (the check, then the publish step, which
re-evaluates every guarantee under the ledger lock) and the risk estimate (the risk step, then the publish
step). Each is a pure function of files and settings. It is saved with the sha256 of everything it depends on,
including the code that computed it (`code_digest`), and reused only when that digest is equal again; any
changed byte, setting or line of code means computing it afresh.

Trust: a saved result is trusted as the work area is. Whoever can write the work area can already change the
true counts the guarantees are checked against, so a saved verdict widens nothing; the release folder and
the ledger, which others read, are still written only by the publish step.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from spatial_release import codeversion
from spatial_release.fileio import write_json_atomic


def code_digest() -> str | None:
    """The digest of the code this process runs (`codeversion`), or None when the files or libraries on disk
    changed since the package was imported: then nothing is reused or saved."""
    return codeversion.current_digest()


def digest_of(payload: object) -> str | None:
    """sha256 of a JSON-able payload together with the code's digest; None when the code is not known."""
    code = code_digest()
    if code is None:
        return None
    text = json.dumps({"code": code, "payload": payload}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def load_saved(path: Path, digest: str | None) -> dict | None:
    """The result saved at `path` under `digest`, or None when there is none, it is unreadable, it was
    computed from other inputs, or `digest` is None."""
    if digest is None:
        return None
    try:
        saved = json.loads(path.read_text())
        if isinstance(saved, dict) and saved.get("digest") == digest and isinstance(saved.get("result"), dict):
            return saved["result"]
    except (OSError, ValueError):
        pass
    return None


def save(path: Path, digest: str | None, result: dict) -> None:
    """Save `result` under `digest`, atomically (a crash leaves the old file or the new one); with no digest
    (the code changed on disk), remove what is there instead: it may describe other code."""
    if digest is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"digest": digest, "result": result})
