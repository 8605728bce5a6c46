"""Alerts people receive: an e-mail to a real SMTP server (aiosmtpd, started here) and a Slack webhook call
(a local HTTP server), each naming the dataset, period, check, reason, offending places and the options; a
channel that fails is recorded and the other still sends; a repeated delivery sends nothing again; no unit
id reaches an alert; the alert file is written atomically; a review breach is e-mailed."""

import json
import os
import re
import socket
import threading
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from support.fixture import CELL_A, CELL_B, cell_id, fixture_pings, uniqueness_policy_dict, write_policy
from support.spies import run_failure_context, stored_run

from spatial_release import stages
from spatial_release.alerts import OPTIONS, Alert, AlertRouting, Place, deliver, places, read_alert_record
from spatial_release.fileio import TEMPORARY
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import PolicyError, load_policy

SECRET_TOKEN = "XoXsEcReTtOkEn"
BUCKET = "2018-01-10T05:00:00+00:00"
UNIT_IDS = ["lonely", "b1"]  # devices of the fixture traces


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Inbox:
    def __init__(self):
        self.messages: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((list(envelope.rcpt_tos), message_from_bytes(envelope.original_content)))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server():
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=_free_port())
    controller.start()
    try:
        yield controller, inbox
    finally:
        controller.stop()


class _Receiver(ThreadingHTTPServer):
    """Keeps what was posted; answers with the queued statuses, then 200."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hook)
        self.received: list[tuple[str, Any]] = []
        self.statuses: list[int] = []


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        server = self.server
        assert isinstance(server, _Receiver)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server.received.append((self.path, json.loads(body)))
        status = server.statuses.pop(0) if server.statuses else 200
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"ok" if status == 200 else b"invalid_payload")

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    server = _Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_port}/services/T000/B000/{SECRET_TOKEN}"
    finally:
        server.shutdown()
        server.server_close()


def _env(smtp_port: int | None = None, url: str | None = None, **extra) -> dict[str, str]:
    env = {"SPATIAL_RELEASE_SMTP_FROM": "releases@example.org", "SPATIAL_RELEASE_SMTP_TO": "ops@example.org"}
    if smtp_port is not None:
        env |= {"SPATIAL_RELEASE_SMTP_HOST": "127.0.0.1", "SPATIAL_RELEASE_SMTP_PORT": str(smtp_port)}
    if url is not None:
        env["SPATIAL_RELEASE_SLACK_WEBHOOK_URL"] = url
    return env | extra


def _alert(**overrides) -> Alert:
    fields = {
        "kind": "risk_breach",
        "dataset": "jc-bikes",
        "period": "2018-Q1",
        "check": "within_risk_budget",
        "reason": "zone C: prosecutor release figure 0.099 over the per-release ceiling 0.05",
        "offending": (
            {"zone": "C", "units": 31, "prosecutor_mean": 0.099},
            {"cell_id": cell_id(CELL_A), "bucket_start": BUCKET, "n_devices": 3},
        ),
        "run_id": "0f3c1d2e-run",
    }
    return Alert(**(fields | overrides))


def _closed_port() -> int:
    return _free_port()  # bound and released: nothing listens there


def _body(message: Message) -> str:
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)  # a single-part message: its decoded body
    return payload.decode()


EXPECTED = [
    "jc-bikes",
    "2018-Q1",
    "within_risk_budget",
    "zone C: prosecutor release figure 0.099",
    f"cell {cell_id(CELL_A)}, bucket {BUCKET}",
    "zone C",
    *OPTIONS,
]


def test_an_alert_arrives_by_email_and_by_slack_webhook_naming_every_field(smtp_server, webhook, tmp_path):
    controller, inbox = smtp_server
    server, url = webhook
    alert = _alert(ui_url="http://dagster.example.org/runs/0f3c1d2e-run")
    report = deliver(alert, AlertRouting.from_env(_env(controller.port, url)), tmp_path / "alerts")

    assert report.sent == ["email", "slack"] and not report.failed and report.file_error is None
    assert report.path is not None
    [(recipients, message)] = inbox.messages
    assert recipients == ["ops@example.org"] and message["From"] == "releases@example.org"
    assert message["Subject"] == "[spatial_release] jc-bikes 2018-Q1: risk_breach by within_risk_budget"
    assert message["X-Spatial-Release-Alert"] == report.path.stem
    body = _body(message)
    for text in EXPECTED + ["0f3c1d2e-run", "http://dagster.example.org/runs/0f3c1d2e-run"]:
        assert text in body, text

    [(path, payload)] = server.received
    assert path.endswith(SECRET_TOKEN) and payload["text"].startswith(alert.subject)
    blocks = payload["blocks"]
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": alert.subject}}
    shown = json.dumps(blocks)
    for name in ("*Dataset*", "*Period*", "*Kind*", "*Check*", "*Run*", "*Reason*", "*Offending*", "*Options*"):
        assert name in shown, name
    for text in EXPECTED:
        assert text in shown, text

    record = read_alert_record(report.path)
    assert record["deliveries"]["email"]["status"] == "sent" and "ops@example.org" in record["deliveries"]["email"]["detail"]
    assert record["deliveries"]["slack"]["status"] == "sent"
    assert record["period"] == "2018-Q1" and record["options"] == list(OPTIONS)
    assert SECRET_TOKEN not in report.path.read_text() and SECRET_TOKEN not in json.dumps(report.to_json())


def test_a_down_smtp_server_is_recorded_as_failed_and_slack_still_sends(webhook, tmp_path):
    server, url = webhook
    report = deliver(_alert(), AlertRouting.from_env(_env(_closed_port(), url)), tmp_path)
    email = report.result("email")
    assert email.status == "failed" and email.error is not None and "Connection" in email.error
    assert report.path is not None
    assert report.result("slack").status == "sent" and len(server.received) == 1
    deliveries = read_alert_record(report.path)["deliveries"]
    assert deliveries["email"]["status"] == "failed" and deliveries["email"]["error"] == email.error
    assert deliveries["slack"]["status"] == "sent"


def test_a_webhook_500_is_recorded_as_failed_and_the_email_still_sends(smtp_server, webhook, tmp_path):
    controller, inbox = smtp_server
    server, url = webhook
    server.statuses = [500]
    report = deliver(_alert(), AlertRouting.from_env(_env(controller.port, url)), tmp_path)
    slack = report.result("slack")
    assert slack.status == "failed" and slack.error is not None
    assert "HTTP 500" in slack.error and SECRET_TOKEN not in slack.error
    assert report.result("email").status == "sent" and len(inbox.messages) == 1
    assert report.path is not None
    deliveries = read_alert_record(report.path)["deliveries"]
    assert deliveries["slack"] == {"status": "failed", "error": slack.error, "at": slack.at}
    assert SECRET_TOKEN not in report.path.read_text()


def test_a_repeated_delivery_sends_nothing_again_and_retries_only_what_failed(smtp_server, webhook, tmp_path):
    controller, inbox = smtp_server
    server, url = webhook
    server.statuses = [500]
    routing = AlertRouting.from_env(_env(controller.port, url))
    first = deliver(_alert(), routing, tmp_path)
    assert first.sent == ["email"] and first.failed == ["slack"]
    second = deliver(_alert(), routing, tmp_path)  # the same alert again (e.g. the sensor re-evaluates)
    assert second.path == first.path
    assert second.result("email").status == "already sent" and second.result("slack").status == "sent"
    third = deliver(_alert(), routing, tmp_path)
    assert [r.status for r in third.channels] == ["already sent", "already sent"]
    assert len(inbox.messages) == 1 and len(server.received) == 2  # one e-mail; the failed call, then one post
    assert first.path is not None
    assert [p.name for p in tmp_path.glob("*.json")] == [first.path.name]
    # another alert (another run) is another file and is sent
    other = deliver(_alert(run_id="another-run"), routing, tmp_path)
    assert other.path != first.path and other.sent == ["email", "slack"] and len(inbox.messages) == 2


def test_no_channel_configured_still_writes_the_alert(tmp_path):
    report = deliver(_alert(), AlertRouting.from_env({}), tmp_path)
    assert [r.status for r in report.channels] == ["not configured", "not configured"]
    detail = report.result("email").detail
    assert detail is not None and "SPATIAL_RELEASE_SMTP_HOST" in detail
    assert report.path is not None
    deliveries = read_alert_record(report.path)["deliveries"]
    assert deliveries["slack"]["status"] == "not configured"


def test_misconfigured_variables_fail_their_channel_by_name_without_showing_secrets(webhook, tmp_path):
    _, url = webhook
    env = _env(2525, "not-a-url-" + SECRET_TOKEN, SPATIAL_RELEASE_SMTP_STARTTLS="maybe", SPATIAL_RELEASE_SMTP_USER="relay")
    routing = AlertRouting.from_env(env)
    report = deliver(_alert(), routing, tmp_path)
    email, slack = report.result("email"), report.result("slack")
    assert email.status == "failed" and email.error is not None and "SPATIAL_RELEASE_SMTP_STARTTLS" in email.error
    assert "SPATIAL_RELEASE_SMTP_USER and SPATIAL_RELEASE_SMTP_PASSWORD" in email.error
    assert slack.status == "failed" and slack.error is not None and "SPATIAL_RELEASE_SLACK_WEBHOOK_URL" in slack.error
    assert report.path is not None
    assert SECRET_TOKEN not in report.path.read_text()


def test_starttls_is_required_when_configured_and_a_login_is_used(tmp_path):
    seen = []

    def authenticator(server, session, envelope, mechanism, auth_data):
        seen.append((auth_data.login, auth_data.password))
        return AuthResult(success=True)

    inbox = _Inbox()
    controller = Controller(
        inbox, hostname="127.0.0.1", port=_free_port(), authenticator=authenticator, auth_require_tls=False
    )
    controller.start()
    try:
        login = {"SPATIAL_RELEASE_SMTP_USER": "relay", "SPATIAL_RELEASE_SMTP_PASSWORD": "pw-" + SECRET_TOKEN}
        plain = deliver(_alert(), AlertRouting.from_env(_env(controller.port, **login)), tmp_path / "a")
        assert plain.sent == ["email"] and seen == [(b"relay", ("pw-" + SECRET_TOKEN).encode())]
        tls = AlertRouting.from_env(_env(controller.port, SPATIAL_RELEASE_SMTP_STARTTLS="true", **login))
        refused = deliver(_alert(), tls, tmp_path / "b")  # no STARTTLS offered: never sent in clear
        error = refused.result("email").error
        assert refused.result("email").status == "failed" and error is not None and "STARTTLS" in error
        assert len(inbox.messages) == 1 and plain.path is not None
        assert SECRET_TOKEN not in (tmp_path / "a").joinpath(plain.path.name).read_text()
    finally:
        controller.stop()


# --------------------------------------------------------------------------------- no unit id in an alert


def test_offending_places_keep_identifier_fields_only():
    rows: list[dict[str, Any] | str] = [
        {"file": "cells.parquet", "value": "lonely", "problem": "value equal to a unit id"},  # no_identifiers
        {"cell_id": cell_id(CELL_B), "bucket_start": BUCKET, "device": "b1", "gender": "m", "n_devices": 2},
        {"level": "grid_2000m", "area_id": "2000mE582000N4508000", "bucket_start": BUCKET, "n_devices": 8},
        {"zone": "C", "units": 31, "prosecutor_mean": 0.099},
        "b1,2018-01-10 08:00:00,-74.05,40.71",  # a raw CSV row
        "{'device': 'lonely'}",  # a repr
        {"error": "solver time-out"},
    ]
    found = places(rows)
    assert [str(p) for p in found] == [
        f"cell {cell_id(CELL_B)}, bucket {BUCKET}",
        f"grid_2000m 2000mE582000N4508000, bucket {BUCKET}",
        "zone C",
    ]
    alert = Alert.build(
        "blocked_release",
        "fixture",
        "2018-Q1",
        "no_identifiers",
        "1 problem(s); first: {'value': 'lonely', 'problem': 'value equal to a unit id'}",
        rows + ["lonely", "b1"],
        never=UNIT_IDS,
        run_id="r1",
    )
    shown = json.dumps(alert.to_json()) + alert.text
    assert "lonely" not in shown and "b1" not in shown and "gender" not in shown and "74.05" not in shown
    assert alert.reason == "1 problem(s); first: (row)" and len(alert.offending) == 3
    # without the unit ids at hand, the rows' identifier fields and a reason cut of its quoted rows still
    # leave none of them; a unit id given as a bare place string is what `never` is for
    plain = Alert(
        "blocked_release",
        "fixture",
        "2018-Q1",
        "k_floor",
        "1 published cell(s) hold fewer than 3 units; first: [{'cell_id': 'x', 'device': 'lonely', 'true_n': 1}]",
        # rows, as the constructor accepts them: its field is typed as what __post_init__ makes of them
        tuple(rows[:4]),  # type: ignore[arg-type]
    )
    shown = json.dumps(plain.to_json()) + plain.text
    assert "lonely" not in shown and "b1" not in shown and "true_n" not in shown and len(plain.offending) == 3
    masked = Alert.build(
        "blocked_release", "fixture", "2018-Q1", "k_floor", "device lonely alone", ["lonely"], never=UNIT_IDS
    )
    assert masked.reason == "device [unit id] alone" and masked.offending == ()
    with pytest.raises(ValueError, match="not an identifier"):
        Place("b1,2018-01-10 08:00:00,-74.05,40.71")
    with pytest.raises(ValueError, match="not one of"):
        _alert(kind="something_else")


def test_offending_is_capped_at_twenty_and_says_how_many_more():
    rows = [{"cell_id": f"1000mE{580_000 + 1000 * i}N4508000", "bucket_start": BUCKET} for i in range(25)]
    alert = _alert(offending=tuple(rows))
    assert len(alert.offending) == 20 and alert.more_offending == 5
    assert "... and 5 more" in alert.text and alert.to_json()["more_offending"] == 5


def test_options_say_which_apply_to_a_release_never_published():
    published = _alert()
    assert published.options == OPTIONS and published.published
    blocked = _alert(kind="blocked_release", check="k_floor")
    assert not blocked.published and blocked.options[0].startswith("fix the input")
    assert any(o.startswith("re-publish it coarser") for o in blocked.options)
    assert any("withdraw the release: does not apply" in o for o in blocked.options)
    assert any("does not apply, k_floor is a guarantee" in o for o in blocked.options)
    gate = _alert(kind="blocked_release", check="risk_budget")
    assert any("accept the risk in review" in o and "risk gate only" in o for o in gate.options)
    assert Alert.from_json(gate.to_json()) == gate
    # a failure of the input: coarser figures would not help, so that option is not offered
    for check in ("rejected_share", "outside_share", "validated_pings"):
        bad_input = _alert(kind="blocked_release", check=check)
        assert bad_input.options[0].startswith("fix the input"), bad_input.options
        assert not any("coarser" in o for o in bad_input.options), bad_input.options
        # nor for a published period: its figures are not what the input check found wrong
        published_input = _alert(kind="blocked_release", check=check, published=True)
        assert published_input.options == tuple(o for o in OPTIONS if "coarser" not in o), published_input.options


# --------------------------------------------------------------------------------------- the alert file


def test_the_alert_file_is_complete_before_its_name_exists(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def watching(src, dst):
        dst = Path(dst)
        if dst.suffix == ".json":
            assert TEMPORARY.match(Path(src).name)
            seen.append((json.loads(Path(src).read_text()), dst.exists()))  # whole JSON, before the rename
        return real_replace(src, dst)

    monkeypatch.setattr("spatial_release.fileio.os.replace", watching)
    report = deliver(_alert(), AlertRouting.from_env({}), tmp_path)
    assert seen[0][1] is False and seen[0][0]["dataset"] == "jc-bikes"  # first write: the name did not exist
    assert all(s[1] for s in seen[1:])  # the deliveries replace the whole file, never append to it
    assert report.path is not None
    assert [p.name for p in tmp_path.iterdir() if p.suffix in (".json", ".tmp")] == [report.path.name]


def test_a_crash_while_writing_leaves_no_partial_alert_and_still_sends(smtp_server, tmp_path, monkeypatch):
    controller, inbox = smtp_server

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("spatial_release.fileio.os.replace", crash)
    report = deliver(_alert(), AlertRouting.from_env(_env(controller.port)), tmp_path)
    assert report.path is None and report.file_error is not None and "No space left" in report.file_error
    assert report.sent == ["email"] and len(inbox.messages) == 1
    assert list(tmp_path.glob("*.json")) == [] and list(tmp_path.glob(".*.tmp")) == []


# ------------------------------------------------------------------------------------------------ routing


def test_routing_merges_the_policy_section_with_the_environment(tmp_path, fixture_traces, webhook):
    _, url = webhook
    data = uniqueness_policy_dict(
        str(fixture_traces),
        alerts={"email_to": ["fixture-owner@example.org", "ops@example.org"], "slack_webhook_env": "FIXTURE_SLACK_WEBHOOK"},
    )
    policy = load_policy(write_policy(tmp_path, data))
    routing = AlertRouting.for_policy(policy, _env(2525) | {"FIXTURE_SLACK_WEBHOOK": url})
    assert routing.email_to == ("ops@example.org", "fixture-owner@example.org")
    assert routing.smtp is not None and routing.slack_webhook_url is not None
    assert routing.smtp.port == 2525 and routing.smtp.host == "127.0.0.1" and not routing.smtp.starttls
    assert routing.slack_webhook_url.get_secret_value() == url and SECRET_TOKEN not in repr(routing)
    missing = AlertRouting.for_policy(policy, _env(2525, url))  # the programme's own webhook is not set
    assert "FIXTURE_SLACK_WEBHOOK" in missing.problems["slack"]
    starttls = AlertRouting.from_env(
        {
            "SPATIAL_RELEASE_SMTP_HOST": "mx",
            "SPATIAL_RELEASE_SMTP_FROM": "a@b.org",
            "SPATIAL_RELEASE_SMTP_STARTTLS": "yes",
        }
    ).smtp
    assert starttls is not None and starttls.port == 587


def test_a_policy_never_holds_a_webhook_url(tmp_path, fixture_traces):
    for alerts in (
        {"slack_webhook_env": f"https://hooks.slack.com/services/T0/B0/{SECRET_TOKEN}"},
        {"email_to": ["not an address"]},
        {"smtp_password": "x"},
    ):
        data = uniqueness_policy_dict(str(fixture_traces), alerts=alerts)
        with pytest.raises(PolicyError, match="alerts"):
            load_policy(write_policy(tmp_path, data))


# ------------------------------------------------------------------------------ a review breach is e-mailed


@pytest.mark.slow
def test_a_review_breach_is_emailed(smtp_server, tmp_path, monkeypatch):
    controller, inbox = smtp_server
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    data = uniqueness_policy_dict(str(traces), alerts={"email_to": ["fixture-owner@example.org"]})
    policy_path = write_policy(tmp_path, data)
    policy, period = load_policy(policy_path), Period.parse("2018-Q1")
    ledger = Ledger(tmp_path / "ledger", tmp_path / "releases")
    ctx = stages.ReleaseContext(policy, period, tmp_path / "work")
    stages.run_ingest(ctx, [traces])
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    stages.run_risk(ctx, ledger)
    stages.run_publish(ctx, tmp_path / "releases", ledger)
    # the landscape changes: the public population per cell is now tiny, so the release is over budget
    population = tmp_path / "population.csv"
    population.write_text(population.read_text().replace("10000", "5"))
    for name, value in _env(controller.port).items():
        monkeypatch.setenv(name, value)

    done = stages.run_review(policy, ledger, tmp_path / "work", tmp_path / "alerts", run_id="review-run-1")
    [report] = done.deliveries
    assert report.sent == ["email"] and report.result("slack").status == "not configured"
    [(recipients, message)] = inbox.messages
    assert recipients == ["ops@example.org", "fixture-owner@example.org"]
    assert message["Subject"] == "[spatial_release] fixture 2018-Q1: risk_breach by within_risk_budget"
    body = _body(message)
    worst = done.review.breaches[0].release.worst_zone
    assert f"zone {worst}:" in body and f"cell {worst}" in body and "journalist release figure" in body
    assert "over the per-release ceiling 0.05" in body and "review-run-1" in body
    assert all(option in body for option in OPTIONS)
    assert not any(unit in body for unit in ("lonely", "a0", "b1", "d0", "e0"))
    assert done.alerts == [str(report.path)]
    # the same review outcome delivered again (a retried run) sends nothing more
    again = stages.run_review(policy, ledger, tmp_path / "work", tmp_path / "alerts", run_id="review-run-1")
    assert again.deliveries[0].result("email").status == "already sent" and len(inbox.messages) == 1


@pytest.mark.slow
def test_a_blocked_release_reaches_people_through_the_dagster_alert_sensor(smtp_server, webhook, tmp_path, monkeypatch):
    """End to end: the risk gate blocks a release run; the run-failure sensor e-mails and posts the alert
    with dataset, period, check, reason, offending zone and options, and tags the failed run with it."""
    import dagster as dg
    from dagster._core.events import EngineEventData

    from spatial_release.defs.catalogue import programme_for
    from spatial_release.defs.partitions import add_partition

    controller, inbox = smtp_server
    server, url = webhook
    for name, value in _env(controller.port, url).items():
        monkeypatch.setenv(name, value)
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    policy = write_policy(tmp_path, uniqueness_policy_dict(str(traces)), population=5)  # the risk gate blocks
    programme = programme_for(policy)
    settings = {
        "releases_dir": str(tmp_path / "releases"),
        "work_dir": str(tmp_path / "work"),
        "ledger_dir": str(tmp_path / "ledger"),
        "alerts_dir": str(tmp_path / "alerts"),
    }
    with dg.instance_for_test() as instance:
        add_partition(instance, programme.programme, Period.parse("2018-Q1"))  # as the period sensor does
        # as the UI or a schedule launches it (execute_release, the command line's path, alerts by itself)
        run = (
            programme.runnable()
            .resolve_job_def("fixture_release_job")
            .execute_in_process(
                partition_key="2018-Q1",
                instance=instance,
                raise_on_error=False,
                run_config={"resources": {"settings": {"config": settings}}},
            )
        )
        assert not run.success and inbox.messages == []
        programme.alert_sensor()(run_failure_context(instance, run.run_id))
        tags = stored_run(instance, run.run_id).tags
        # the run's own page says it where it opens its log (the last line): what blocked, what to do, why
        last = instance.all_logs(run.run_id)[-1]
        data = last.dagster_event.event_specific_data if last.dagster_event else None
        notice = data.metadata if isinstance(data, EngineEventData) else {}
    assert last.dagster_event is not None and last.dagster_event.event_type_value == "ENGINE_EVENT", last
    assert last.message.startswith("BLOCKED by risk_budget (fixture 2018-Q1). WHAT TO DO: (1) fix the input"), last
    assert all(option in last.message for option in OPTIONS[1:]) and "RiskBudgetExceeded" in last.message.split(". WHY: ")[1]
    alert_file = notice["alert_file"].value
    assert notice["stopped_by"].value == "risk_budget"
    assert isinstance(alert_file, str) and alert_file.startswith("blocked_release-")
    [(recipients, message)] = inbox.messages
    assert recipients == ["ops@example.org"]
    assert message["Subject"] == "[spatial_release] fixture 2018-Q1: blocked_release by risk_budget"
    body = _body(message)
    worst = next(e for e in run.get_asset_check_evaluations() if e.check_name == "risk_budget")
    offending = worst.metadata["offending"]
    assert isinstance(offending, dg.JsonMetadataValue) and isinstance(offending.value, list)
    zone = offending.value[0]["zone"]
    assert "RiskBudgetExceeded" in body and run.run_id in body and f"- zone {zone}" in body
    # unit ids as whole words (a run id's hex may contain "a0")
    assert "re-publish" in body and not any(re.search(rf"\b{unit}\b", body) for unit in ("lonely", "a0", "b1", "d0", "e0"))
    [(path, payload)] = server.received
    posted = json.dumps(payload)
    assert path.endswith(SECRET_TOKEN) and "fixture" in posted and "2018-Q1" in posted and "risk_budget" in posted
    assert tags["spatial_release/blocked_by"] == "risk_budget"
    assert tags["spatial_release/alert"].startswith("blocked_release-")
    assert (tmp_path / "alerts" / tags["spatial_release/alert"]).is_file()
    assert "email: sent" in tags["spatial_release/alert_delivery"]
    assert "slack: sent" in tags["spatial_release/alert_delivery"]
    # the run itself says why and what can be done, as the alert does
    alert = json.loads((tmp_path / "alerts" / tags["spatial_release/alert"]).read_text())
    assert tags["spatial_release/why"] == alert["reason"][:1000] and "RiskBudgetExceeded" in tags["spatial_release/why"]
    assert tags["spatial_release/what_to_do"].split(" | ") == alert["options"]


@pytest.mark.slow
def test_a_release_blocked_on_the_command_line_alerts_by_itself_once(smtp_server, tmp_path, monkeypatch):
    """A run executed in process (the command line) has no code-location origin, so the daemon's sensor
    never sees it: the command line delivers its alert; the sensor, if it saw the run, would send nothing
    again."""
    from spatial_release import cli

    controller, inbox = smtp_server
    for name, value in _env(controller.port).items():
        monkeypatch.setenv(name, value)
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    policy = write_policy(tmp_path, uniqueness_policy_dict(str(traces)), population=5)  # the risk gate blocks
    outcome = cli.run_release(str(policy), "2018-Q1", out=str(tmp_path / "out"), ledger=str(tmp_path / "ledger"))
    assert not outcome.published and outcome.exit_code == 1
    [(_, message)] = inbox.messages
    assert message["Subject"] == "[spatial_release] fixture 2018-Q1: blocked_release by risk_budget"
    [line] = outcome.alerts
    assert "email: sent" in line and any(m.startswith("alert: ") for m in outcome.messages)
    assert len(list((tmp_path / "out" / "alerts").glob("blocked_release-*.json"))) == 1


@pytest.mark.slow
def test_a_step_failure_reason_is_the_message_without_the_class_path():
    """A ReleasesMismatch blocking a step must not reach the alert as
    `spatial_release.ledger.errors.ReleasesMismatch: releases/ ...`; the reason is the message alone."""
    import dagster as dg

    from spatial_release.defs.alerts import block_of, message_only
    from spatial_release.ledger import ReleasesMismatch

    reason = "releases/ holds fixture/2018-Q2, which the ledger does not record: put it back"

    @dg.op(name="fixture__risk_assessment")
    def failing_step() -> None:
        raise ReleasesMismatch(reason)

    @dg.job
    def blocked() -> None:
        failing_step()

    with dg.instance_for_test() as instance:
        run = blocked.execute_in_process(instance=instance, raise_on_error=False)
        block = block_of(instance, run.run_id)
    assert (block.check, block.reason) == ("risk_assessment", reason)
    # only the class's own prefix goes: a message that starts like "field 'k': ..." is left alone
    assert message_only("field 'k': not a number\n", "PolicyError") == "field 'k': not a number"
    assert message_only("ReleasesMismatch: x", "ReleasesMismatch") == "x"


@pytest.mark.slow
def test_a_materialize_all_run_is_alerted_with_its_period_and_a_link_to_the_run(smtp_server, webhook, tmp_path, monkeypatch):
    """A run of Dagster's implicit asset job ("Materialize all" on the programme's group, or a backfill from
    the asset graph) carries neither the programme's job name nor its period tag: it is matched to the
    programme by the assets it selected, its period read from its partition key, and the alert links to
    the run in the UI ($SPATIAL_RELEASE_UI_URL). A run that selects no programme's asset alerts nothing."""
    import dagster as dg

    from spatial_release.defs.alerts import UI_URL_ENV, programmes_of_run
    from spatial_release.defs.catalogue import programme_for
    from spatial_release.defs.partitions import add_partition

    controller, inbox = smtp_server
    server, url = webhook
    for name, value in _env(controller.port, url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(UI_URL_ENV, "http://127.0.0.1:3000/")
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    policy = write_policy(tmp_path, uniqueness_policy_dict(str(traces)), population=5)  # the risk gate blocks
    programme = programme_for(policy)
    settings = {name: str(tmp_path / name.replace("_dir", "")) for name in ("releases_dir", "work_dir", "ledger_dir")}
    settings["alerts_dir"] = str(tmp_path / "alerts")
    definitions = programme.runnable()
    candidate = [
        dg.AssetKey(["fixture", name]) for name in ("validated_pings", "cell_counts", "protected_table", "risk_assessment")
    ]
    with dg.instance_for_test() as instance:
        add_partition(instance, programme.programme, Period.parse("2018-Q1"))  # as the period sensor does
        run = definitions.resolve_implicit_global_asset_job_def().execute_in_process(
            partition_key="2018-Q1",
            instance=instance,
            raise_on_error=False,
            asset_selection=candidate,
            run_config={"resources": {"settings": {"config": settings}}},
        )
        assert not run.success
        stored = stored_run(instance, run.run_id)
        assert stored.job_name.startswith("__") and "spatial_release/period" not in stored.tags
        assert programmes_of_run(stored, {"other_job": programme.programme}) == [programme.programme]
        programme.alert_sensor()(run_failure_context(instance, run.run_id))
        # control: a run of another group's assets is no programme's
        other = stored._replace(
            asset_selection=frozenset({dg.AssetKey(["elsewhere", "table"])}),
            job_name="__ASSET_JOB",
            asset_check_selection=None,
        )
        assert programmes_of_run(other, {"fixture_release_job": programme.programme}) == []
    [(_, message)] = inbox.messages
    assert message["Subject"] == "[spatial_release] fixture 2018-Q1: blocked_release by risk_budget"
    assert f"Open in Dagster: http://127.0.0.1:3000/runs/{run.run_id}" in _body(message)
    [(_, payload)] = server.received
    assert f"http://127.0.0.1:3000/runs/{run.run_id}" in json.dumps(payload)


def test_a_malformed_ui_url_setting_is_named(monkeypatch):
    from spatial_release.defs.alerts import UI_URL_ENV, run_link
    from spatial_release.errors import UserError

    monkeypatch.delenv(UI_URL_ENV, raising=False)
    assert run_link("abc") is None
    monkeypatch.setenv(UI_URL_ENV, "https://dagster.example.org/base/")
    assert run_link("abc") == "https://dagster.example.org/base/runs/abc"
    for bad in ("dagster.example.org", "javascript:alert(1)", "http://host/with space"):
        monkeypatch.setenv(UI_URL_ENV, bad)
        with pytest.raises(UserError, match=UI_URL_ENV):
            run_link("abc")
