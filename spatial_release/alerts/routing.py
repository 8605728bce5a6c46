"""Where alerts go: the deployment's channels, from environment variables, merged with a policy's `alerts:`
section (its recipients, the name of its own webhook variable).

A variable with a bad value never raises here: it becomes a problem of its channel (`problems`), which
`deliver` records as a failed delivery naming the variable, so a misconfigured deployment never loses an
alert (the alert file is written whatever the channels do). Secrets (the SMTP password, webhook URLs) are
SecretStr and never appear in a report or an alert file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from spatial_release.policy.model import AlertsSpec

PREFIX = "SPATIAL_RELEASE_"
SMTP_HOST, SMTP_PORT, SMTP_FROM, SMTP_TO = (f"{PREFIX}SMTP_{n}" for n in ("HOST", "PORT", "FROM", "TO"))
SMTP_USER, SMTP_PASSWORD, SMTP_STARTTLS = (f"{PREFIX}SMTP_{n}" for n in ("USER", "PASSWORD", "STARTTLS"))
SLACK_WEBHOOK_URL = f"{PREFIX}SLACK_WEBHOOK_URL"
ENV_VARS = (SMTP_HOST, SMTP_PORT, SMTP_FROM, SMTP_TO, SMTP_USER, SMTP_PASSWORD, SMTP_STARTTLS, SLACK_WEBHOOK_URL)

EMAIL = re.compile(r"^[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+$")
TRUE, FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}
EMAIL_CHANNEL, SLACK_CHANNEL = "email", "slack"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SmtpSettings(_Frozen):
    """An SMTP server: plain SMTP, or upgraded with STARTTLS; a login when user and password are set."""

    host: str
    port: int = Field(ge=1, le=65535)
    sender: str
    user: str | None = None
    password: SecretStr | None = None
    starttls: bool = False
    timeout: float = Field(default=10.0, gt=0, description="seconds for the connection and each command")


def _addresses(text: str, variable: str, problems: list[str]) -> tuple[str, ...]:
    found = tuple(a.strip() for a in text.split(",") if a.strip())
    bad = [a for a in found if not EMAIL.match(a)]
    if bad:
        problems.append(f"{variable}: {bad} is not an e-mail address")
    return tuple(a for a in found if EMAIL.match(a))


def _unique(*groups: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(a for group in groups for a in group))


def _webhook(value: str, variable: str) -> tuple[SecretStr | None, str | None]:
    value = value.strip()
    if re.match(r"^https?://\S+$", value):
        return SecretStr(value), None
    return None, f"{variable} is not an http(s) URL (its value is not shown: a webhook URL is a secret)"


def _smtp(env: Mapping[str, str], problems: list[str]) -> SmtpSettings | None:
    host = env.get(SMTP_HOST, "").strip()
    if not host:
        return None
    starttls = env.get(SMTP_STARTTLS, "").strip().lower()
    if starttls not in TRUE | FALSE:
        problems.append(f"{SMTP_STARTTLS}={starttls!r} is not one of true/false, yes/no, on/off, 1/0")
    port_text = env.get(SMTP_PORT, "").strip() or ("587" if starttls in TRUE else "25")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        problems.append(f"{SMTP_PORT}={port_text!r} is not a port number")
    sender = env.get(SMTP_FROM, "").strip()
    if not EMAIL.match(sender):
        problems.append(
            f"{SMTP_FROM} is not set to an e-mail address"
            if not sender
            else f"{SMTP_FROM}={sender!r} is not an e-mail address"
        )
    user, password = env.get(SMTP_USER, "").strip() or None, env.get(SMTP_PASSWORD) or None
    if (user is None) != (password is None):
        problems.append(f"{SMTP_USER} and {SMTP_PASSWORD} go together: set both or neither")
    if problems:
        return None
    return SmtpSettings(
        host=host,
        port=int(port_text),
        sender=sender,
        user=user,
        password=None if password is None else SecretStr(password),
        starttls=starttls in TRUE,
    )


class AlertRouting(_Frozen):
    """The channels an alert is sent on: e-mail (an SMTP server and recipients) and a Slack incoming
    webhook. `problems` holds, per channel, why its configuration cannot be used."""

    email_to: tuple[str, ...] = ()
    smtp: SmtpSettings | None = None
    slack_webhook_url: SecretStr | None = None
    slack_webhook_variable: str | None = None  # where the URL came from, for reports
    slack_timeout: int = Field(default=10, gt=0, description="seconds for the webhook call")
    problems: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AlertRouting:
        """The deployment's routing: SPATIAL_RELEASE_SMTP_HOST, _SMTP_PORT (default 25, or 587 with
        STARTTLS), _SMTP_FROM, _SMTP_TO (a comma list), _SMTP_USER and _SMTP_PASSWORD (both or neither),
        _SMTP_STARTTLS (true/false), SPATIAL_RELEASE_SLACK_WEBHOOK_URL. Never raises."""
        env = os.environ if environ is None else environ
        email_problems: list[str] = []
        to = _addresses(env.get(SMTP_TO, ""), SMTP_TO, email_problems)
        smtp = _smtp(env, email_problems)
        problems = {EMAIL_CHANNEL: "; ".join(email_problems)} if email_problems else {}
        url, variable = None, None
        if env.get(SLACK_WEBHOOK_URL, "").strip():
            url, problem = _webhook(env[SLACK_WEBHOOK_URL], SLACK_WEBHOOK_URL)
            variable = SLACK_WEBHOOK_URL
            if problem:
                problems[SLACK_CHANNEL] = problem
        return cls(email_to=to, smtp=smtp, slack_webhook_url=url, slack_webhook_variable=variable, problems=problems)

    def merged(self, spec: AlertsSpec | None, environ: Mapping[str, str] | None = None) -> AlertRouting:
        """This routing with a policy's `alerts:` section: its recipients are added to the deployment's, and
        the webhook variable it names (read from the environment) replaces the deployment's webhook."""
        if spec is None:
            return self
        update: dict = {"email_to": _unique(self.email_to, tuple(spec.email_to))}
        if spec.slack_webhook_env:
            env = os.environ if environ is None else environ
            problems = {k: v for k, v in self.problems.items() if k != SLACK_CHANNEL}
            url, problem = None, None
            if env.get(spec.slack_webhook_env, "").strip():
                url, problem = _webhook(env[spec.slack_webhook_env], spec.slack_webhook_env)
            else:
                problem = f"the policy's alerts.slack_webhook_env names {spec.slack_webhook_env}, which is not set"
            update |= {
                "slack_webhook_url": url,
                "slack_webhook_variable": spec.slack_webhook_env,
                "problems": problems | ({SLACK_CHANNEL: problem} if problem else {}),
            }
        return self.model_copy(update=update)

    @classmethod
    def for_policy(cls, policy, environ: Mapping[str, str] | None = None) -> AlertRouting:
        """The deployment's routing merged with `policy.alerts` (a Policy, or None for the deployment's
        alone)."""
        return cls.from_env(environ).merged(getattr(policy, "alerts", None), environ)

    def unconfigured(self, channel: str) -> str | None:
        """Why `channel` is not configured (None when it is, or when it is misconfigured: see problems)."""
        if channel in self.problems:
            return None
        if channel == EMAIL_CHANNEL:
            if self.smtp is None:
                return f"no SMTP server ({SMTP_HOST})"
            return None if self.email_to else f"no recipients ({SMTP_TO} or the policy's alerts.email_to)"
        return None if self.slack_webhook_url else f"no webhook ({SLACK_WEBHOOK_URL} or alerts.slack_webhook_env)"

    def secrets(self) -> list[str]:
        """The secret values, to mask in error messages."""
        values = [self.slack_webhook_url, self.smtp.password if self.smtp else None]
        return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]
