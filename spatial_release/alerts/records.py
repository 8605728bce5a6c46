"""Alert records: one JSON file per alert in the alerts folder, written atomically, for operators (and the
Dagster UI's metadata). The name is deterministic in the alert's content, so the same alert is one file;
`deliver` adds to it, atomically, what each channel did (`deliveries`)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spatial_release.alerts.alert import OPTIONS, Alert
from spatial_release.fileio import write_json_atomic


def alert_body(payload: Alert | dict) -> dict[str, Any]:
    """What an alert file holds about the alert itself (its identity): an Alert's JSON, or a dict payload
    with the three options added to a risk breach."""
    if isinstance(payload, Alert):
        return payload.to_json()
    return {**payload, "options": list(OPTIONS) if payload.get("kind") == "risk_breach" else payload.get("options")}


def alert_path(folder: Path, payload: Alert | dict) -> Path:
    body = alert_body(payload)
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return folder / f"{body.get('kind', 'alert')}-{digest}.json"


def write_alert(folder: Path, payload: Alert | dict) -> Path:
    """Write `payload` (an Alert, or a dict) as a new alert; the name is deterministic in its content, so
    a re-run writes the same alert once."""
    path = alert_path(folder, payload)
    if not path.exists():
        write_json_atomic(path, {**alert_body(payload), "written_at": datetime.now(UTC).isoformat()})
    return path


def read_alert_record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def record_deliveries(path: Path, deliveries: dict[str, dict[str, Any]]) -> None:
    """Replace the alert file, atomically, with the same alert and `deliveries` (per channel: status,
    time, error or recipients)."""
    write_json_atomic(path, {**read_alert_record(path), "deliveries": deliveries})
