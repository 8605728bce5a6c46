"""Alerts people receive: a blocked release, a published release now over its risk budget, a failed review,
a run stopped by a full disk, a refused run (a notice), a materialisation of a published release that no
publish run logged (`unbacked_publication`: reported by hand in the Dagster UI).

- `alert`: the typed `Alert` (kind, dataset, period, check, reason, offending places, options, run id, UI
  link), its subject line, plain-text body and JSON; offending places are identifiers of cells and zones
  only, never a unit id or a raw row.
- `routing`: `AlertRouting`, the deployment's channels from SPATIAL_RELEASE_SMTP_* and
  SPATIAL_RELEASE_SLACK_WEBHOOK_URL, merged with a policy's `alerts:` section.
- `channels`: e-mail over SMTP, a Slack incoming webhook (Block Kit).
- `records`: the alert file, one per alert, named by its content (`write_alert`).
- `delivery`: `deliver(alert, routing, folder)`: the file first, then every channel, each outcome recorded.

No Dagster here: the sensors in `defs/alerts.py` build an Alert and call `deliver`.
"""

from spatial_release.alerts.alert import (
    ACCEPT,
    COARSER,
    FIX_INPUT,
    FREE_SPACE,
    KINDS,
    MAX_OFFENDING,
    OPTIONS,
    WITHDRAW,
    Alert,
    AlertKind,
    Place,
    mask_files,
    places,
)
from spatial_release.alerts.channels import ChannelError, email_message, send_email, send_slack, slack_blocks
from spatial_release.alerts.delivery import ChannelResult, DeliveryReport, deliver
from spatial_release.alerts.records import alert_path, read_alert_record, write_alert
from spatial_release.alerts.routing import ENV_VARS, AlertRouting, SmtpSettings

__all__ = [
    "ACCEPT",
    "COARSER",
    "ENV_VARS",
    "FIX_INPUT",
    "FREE_SPACE",
    "KINDS",
    "MAX_OFFENDING",
    "OPTIONS",
    "WITHDRAW",
    "Alert",
    "AlertKind",
    "AlertRouting",
    "ChannelError",
    "ChannelResult",
    "DeliveryReport",
    "Place",
    "SmtpSettings",
    "alert_path",
    "deliver",
    "email_message",
    "mask_files",
    "places",
    "read_alert_record",
    "send_email",
    "send_slack",
    "slack_blocks",
    "write_alert",
]
