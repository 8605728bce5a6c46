"""The digest of this process's code, taken when the package is imported.

Saved results are reused only when the code that computed them is the code running now (`stages.reuse`).
Hashing the files on disk at the moment of use would be wrong: a long-running process (a Dagster code
server, a benchmark) keeps running the code it imported after the files are upgraded, and would label its
results with the new code's digest. The package's import is when its modules are read, so the digest is
taken then (about 150 files, a few milliseconds).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def digest_of_files(package: Path = PACKAGE) -> str:
    """sha256 of every Python file under `package` (relative path and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


CODE_DIGEST = digest_of_files()
