"""Results a later step reuses instead of computing them again, only for byte-identical inputs: one memo per
work area, keyed by the candidate's digest.

A release computes expensive results more than once: the protection loop assesses its last candidate, the risk
step assesses it again, and the publish step re-evaluates every guarantee and the risk gate under the ledger
lock. Each result is a pure function of the candidate, files and settings. The work area keeps them in one
file, `memo.internal.json`, under the digest of the candidate they were computed for
(`CandidateTables.digest`, of its figures, whether the loop holds it or the files give it back); each named
result also carries the sha256 of everything else it depends on, including the code that computed it
(`code_digest`). A result is reused only when both digests are equal again: a new candidate empties the memo,
and any other changed byte, setting or line of code means computing that result afresh.

Trust: a saved result is trusted as the work area is. Whoever can write the work area can already change the
true counts the guarantees are checked against, so a saved verdict widens nothing; the release folder and
the ledger, which others read, are still written only by the publish step.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from spatial_release import codeversion
from spatial_release.fileio import folder_lock, write_json_atomic


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


MEMO = "memo.internal.json"  # the work area's root: every result reused, under the candidate's digest


class Memo:
    """The work area's memo (`MEMO`) as seen for one candidate (`candidate`: its digest; None, a candidate not
    known: nothing is reused or saved). Steps of one run may save at once (a check beside the risk step): each
    saving reads and rewrites the file under a lock, atomically."""

    def __init__(self, path: Path, candidate: str | None):
        self.path, self.candidate = path, candidate

    def _read(self) -> dict:
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(saved, dict) or saved.get("candidate") != self.candidate:
            return {}
        results = saved.get("results")
        return results if isinstance(results, dict) else {}

    def load(self, name: str, digest: str | None) -> dict | None:
        """The result saved as `name` for this candidate under `digest`, or None."""
        if self.candidate is None or digest is None:
            return None
        entry = self._read().get(name)
        if isinstance(entry, dict) and entry.get("digest") == digest and isinstance(entry.get("result"), dict):
            return entry["result"]
        return None

    def save(self, name: str, digest: str | None, result: dict) -> None:
        """Save `result` as `name` under `digest` for this candidate (the results of another candidate are
        dropped); with no digest, drop what `name` holds instead: it may describe other code."""
        if self.candidate is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with folder_lock(self.path.with_name(f".{self.path.name}.lock")):
            results = self._read()
            if digest is None:
                results.pop(name, None)
            else:
                results[name] = {"digest": digest, "result": result}
            write_json_atomic(self.path, {"candidate": self.candidate, "results": results})
