"""Delivering an alert: the alert file first, then every channel, each channel's outcome recorded.

`deliver` never raises for a channel: a server that is down, a webhook that answers 500 or a misconfigured
variable is a `failed` delivery (with the error, secrets masked) in the report and in the alert file, and
the other channels are still tried. A channel recorded as sent in the alert file is not sent again when the
same alert (same content, so the same file) is delivered again; a failed one is retried.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from spatial_release.alerts.alert import Alert, one_line
from spatial_release.alerts.channels import send_email, send_slack
from spatial_release.alerts.records import read_alert_record, record_deliveries, write_alert
from spatial_release.alerts.routing import EMAIL_CHANNEL, SLACK_CHANNEL, AlertRouting
from spatial_release.fileio import folder_lock

Status = Literal["sent", "failed", "not configured", "already sent"]
LOCK_NAME = ".deliveries.lock"


@dataclass(frozen=True)
class ChannelResult:
    """What one channel did with an alert: sent (to whom, or through which variable), failed (the error),
    not configured (what is missing), or already sent by an earlier delivery (when)."""

    channel: str
    status: Status
    detail: str | None = None
    error: str | None = None
    at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (("status", self.status), ("detail", self.detail), ("error", self.error), ("at", self.at))
            if v is not None
        }


@dataclass(frozen=True)
class DeliveryReport:
    """The alert, its file (None only if it could not be written: `file_error`), and one result per
    channel."""

    alert: Alert
    path: Path | None
    channels: tuple[ChannelResult, ...]
    file_error: str | None = None

    def result(self, channel: str) -> ChannelResult:
        return next(r for r in self.channels if r.channel == channel)

    @property
    def failed(self) -> list[str]:
        return [r.channel for r in self.channels if r.status == "failed"]

    @property
    def sent(self) -> list[str]:
        return [r.channel for r in self.channels if r.status == "sent"]

    def summary(self) -> str:
        parts = [
            f"{r.channel}: {r.status}" + (f" ({r.error or r.detail})" if (r.error or r.detail) else "")
            for r in self.channels
        ]
        if self.file_error:
            parts.insert(0, f"alert file: not written ({self.file_error})")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out = {
            "alert": None if self.path is None else str(self.path),
            "subject": self.alert.subject,
            "channels": {r.channel: r.to_json() for r in self.channels},
        }
        return out if self.file_error is None else {**out, "file_error": self.file_error}


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _error_text(exc: BaseException, secrets: list[str]) -> str:
    text = f"{type(exc).__name__}: {exc}"
    for secret in secrets:
        text = text.replace(secret, "[secret]")
    return one_line(text, 300)


def _send_email(alert: Alert, routing: AlertRouting, alert_id: str | None) -> str:
    assert routing.smtp is not None
    send_email(alert, routing.smtp, routing.email_to, alert_id)
    return f"to {', '.join(routing.email_to)} via {routing.smtp.host}:{routing.smtp.port}"


def _send_slack(alert: Alert, routing: AlertRouting, alert_id: str | None) -> str:
    assert routing.slack_webhook_url is not None
    send_slack(alert, routing.slack_webhook_url.get_secret_value(), timeout=routing.slack_timeout)
    return f"webhook from {routing.slack_webhook_variable}"


CHANNELS: tuple[tuple[str, Callable[[Alert, AlertRouting, str | None], str]], ...] = (
    (EMAIL_CHANNEL, _send_email),
    (SLACK_CHANNEL, _send_slack),
)


def _attempt(channel: str, send: Callable, alert: Alert, routing: AlertRouting, alert_id: str | None) -> ChannelResult:
    if channel in routing.problems:
        return ChannelResult(channel, "failed", error=f"misconfigured: {routing.problems[channel]}", at=_now())
    missing = routing.unconfigured(channel)
    if missing:
        return ChannelResult(channel, "not configured", detail=missing)
    try:
        return ChannelResult(channel, "sent", detail=send(alert, routing, alert_id), at=_now())
    except Exception as exc:  # noqa: BLE001 - any failure of a channel is recorded, never raised
        return ChannelResult(channel, "failed", error=_error_text(exc, routing.secrets()), at=_now())


def deliver(alert: Alert, routing: AlertRouting, folder: Path) -> DeliveryReport:
    """Write the alert file (`write_alert`: atomic, named by its content, written once), then send the
    alert on every channel of `routing` not yet recorded as sent for it, recording each outcome in the file
    (atomically, after each channel, under a lock of the folder so that two deliveries of one alert never
    both send). Never raises: a channel's failure is a `failed` result; a file that cannot be written is
    `file_error`, and the channels are still tried."""
    folder = Path(folder)
    try:
        path = write_alert(folder, alert)
    except OSError as exc:
        results = tuple(_attempt(name, send, alert, routing, None) for name, send in CHANNELS)
        return DeliveryReport(alert, None, results, _error_text(exc, []))
    try:
        with folder_lock(folder / LOCK_NAME):
            return _deliver_recorded(alert, routing, path)
    except OSError as exc:  # the lock itself: send without the guard against a concurrent delivery
        results = tuple(_attempt(name, send, alert, routing, path.stem) for name, send in CHANNELS)
        return DeliveryReport(alert, path, results, _error_text(exc, []))


def _deliver_recorded(alert: Alert, routing: AlertRouting, path: Path) -> DeliveryReport:
    """Send on each channel not recorded as sent in the alert file, recording each outcome there."""
    results: list[ChannelResult] = []
    file_error = None
    try:
        deliveries: dict[str, dict] = dict(read_alert_record(path).get("deliveries", {}))
    except (OSError, ValueError) as exc:
        deliveries, file_error = {}, _error_text(exc, [])
    for name, send in CHANNELS:
        previous = deliveries.get(name, {})
        if previous.get("status") == "sent":
            results.append(ChannelResult(name, "already sent", previous.get("detail"), at=previous.get("at")))
            continue
        result = _attempt(name, send, alert, routing, path.stem)
        results.append(result)
        deliveries[name] = result.to_json()
        try:
            record_deliveries(path, deliveries)
        except (OSError, ValueError) as exc:
            file_error = _error_text(exc, [])
    return DeliveryReport(alert, path, tuple(results), file_error)
