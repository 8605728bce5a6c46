"""Alert records: one JSON file per alert, written atomically, for operators (and the Dagster UI's metadata)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from spatial_release.fileio import write_json_atomic

OPTIONS = ("withdraw the release", "re-publish it coarser (larger cells or buckets, higher k)",
           "accept the risk in review (a policy change with its reason)")


def write_alert(folder: Path, payload: dict) -> Path:
    """Write `payload` as a new alert; the name is deterministic in its content, so a re-run writes the same
    alert once."""
    body = {**payload, "options": list(OPTIONS) if payload.get("kind") == "risk_breach" else payload.get("options")}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = folder / f"{payload.get('kind', 'alert')}-{digest}.json"
    if not path.exists():
        write_json_atomic(path, {**body, "written_at": datetime.now(timezone.utc).isoformat()})
    return path


