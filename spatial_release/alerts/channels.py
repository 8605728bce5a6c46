"""The channels: e-mail over SMTP (the standard library) and a Slack incoming webhook (slack_sdk, which
dagster-slack brings). Each sender raises on failure; `deliver` turns that into a recorded failed delivery."""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from slack_sdk.webhook import WebhookClient

from spatial_release.alerts.alert import Alert
from spatial_release.alerts.routing import SmtpSettings

HEADER_LIMIT = 150  # Slack: a header block's plain text
TEXT_LIMIT = 3000  # Slack: a section's text


class ChannelError(Exception):
    """A channel answered, but not with success (e.g. a webhook's HTTP 500)."""


def email_message(alert: Alert, sender: str, to: Sequence[str], alert_id: str | None = None) -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = alert.subject
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["Date"] = formatdate(localtime=False, usegmt=True)
    message["Message-ID"] = make_msgid(domain="spatial-release")
    if alert_id:
        message["X-Spatial-Release-Alert"] = alert_id
    message.set_content(alert.text)
    return message


def send_email(alert: Alert, smtp: SmtpSettings, to: Sequence[str], alert_id: str | None = None) -> None:
    """Send the alert as a plain-text e-mail; STARTTLS (verifying the server's certificate) and a login
    when configured. Every network step is bounded by smtp.timeout."""
    message = email_message(alert, smtp.sender, to, alert_id)
    with smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout) as server:
        if smtp.starttls:
            server.starttls(context=ssl.create_default_context())
        if smtp.user and smtp.password is not None:
            server.login(smtp.user, smtp.password.get_secret_value())
        refused = server.send_message(message)
    if refused:
        raise ChannelError(f"the server refused {sorted(refused)}")


def _escape(text: str) -> str:
    """Slack mrkdwn: &, < and > are control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _section(title: str, lines: Sequence[str]) -> dict:
    text = f"*{title}*\n" + "\n".join(f"• {_escape(line)}" for line in lines)
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:TEXT_LIMIT]}}


def slack_blocks(alert: Alert) -> list[dict]:
    """Block Kit: a header (the subject), then every field of the alert by name."""
    subject = alert.subject if len(alert.subject) <= HEADER_LIMIT else alert.subject[: HEADER_LIMIT - 1] + "…"
    fields = [
        ("Dataset", alert.dataset),
        ("Period", alert.period),
        ("Kind", alert.kind),
        ("Check", alert.check),
        ("Published", "yes" if alert.published else "no"),
        ("Run", alert.run_id or "(none)"),
    ]
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": subject}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{name}*\n{_escape(value)}"} for name, value in fields]},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Reason*\n{_escape(alert.reason)}"[:TEXT_LIMIT]}},
        _section("Offending", alert.offending_lines()),
        _section("Options", alert.options),
    ]
    if alert.ui_url:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"<{alert.ui_url}|Open the run in Dagster>"}})
    return blocks


def send_slack(alert: Alert, url: str, timeout: int = 10) -> None:
    """Post the alert to a Slack incoming webhook (text for notifications, blocks for the message)."""
    response = WebhookClient(url, timeout=timeout).send(text=f"{alert.subject}: {alert.reason}", blocks=slack_blocks(alert))
    if response.status_code != 200:
        raise ChannelError(f"the webhook answered HTTP {response.status_code}: {str(response.body)[:200]}")
