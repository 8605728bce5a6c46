"""A throw-away Dagster deployment for the browser test: a fresh DAGSTER_HOME and output folder, the
`spatial-release` command line run into that instance, `dagster-webserver` and `dagster-daemon` as
subprocesses (each in its own process group, stopped by that group's id), the alert channels an operator
would receive from (a real SMTP server, aiosmtpd, and a webhook that records what is posted to it, both on
this machine), and the GraphQL queries the test uses to wait for state, to find run ids and to read the run
records' times. What the test checks it reads in the browser, not here."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spatial_release.alerts.routing import ENV_VARS, SLACK_WEBHOOK_URL, SMTP_FROM, SMTP_HOST, SMTP_PORT, SMTP_TO
from spatial_release.policy.model import DEFAULT_MISSING_UNIT_VALUES

if TYPE_CHECKING:
    from aiosmtpd.controller import Controller

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv running pytest holds spatial-release and the dagster commands
LOCATION = "spatial_release"
REPOSITORY = "__repository__"
TICK_DONE = {"SKIPPED", "SUCCESS", "FAILURE"}
RUN_DONE = {"SUCCESS", "FAILURE", "CANCELED"}


def missing_browser() -> str | None:
    """Why the browser test cannot run on this machine, or None: Chromium or Playwright is not installed."""
    missing = []
    if shutil.which("chromium") is None:
        missing.append("the chromium browser (Debian package `chromium`)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install playwright==1.65.2)")
    if not missing:
        return None
    return "not installed: " + " and ".join(missing) + "; .ci/run installs both, so CI runs this test"


UI_PROGRAMME = "demo-ui"
BLOCKED_PROGRAMME = "demo-blocked"
# Two devices of the demo's generator (present in every period) that demo-blocked reads as missing ids
BLOCKED_DEVICES = ("dev-000000", "dev-000001")
ALERTS_FROM, ALERTS_TO = "releases@example.org", "operators@example.org"
# The instance settings docs/deployment.md recommends for a release deployment: queued runs are picked up within a
# second, and sensors (the publish sensor among them) are evaluated in threads, not one after another.
INSTANCE_YAML = """telemetry:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
    dequeue_use_threads: true
sensors:
  use_threads: true
  num_workers: 4
"""


def _demo_files(folder: Path) -> str:
    """The project's demo policy's files (its zeros list and landscapes/) copied into `folder`; returns the
    policy's text."""
    source = PROJECT_ROOT / "policies"
    shutil.copytree(source / "landscapes", folder / "landscapes")
    for name in ("demo.yaml", "demo-structural-zeros.csv"):
        shutil.copy(source / name, folder / name)
    text = (source / "demo.yaml").read_text()
    assert "\nname: demo\n" in text, "the demo policy's name line moved"
    return text


def _renamed(text: str, name: str) -> str:
    return text.replace("\nname: demo\n", f"\nname: {name}\n")


def _ui_policies(folder: Path) -> Path:
    """The policies the deployment serves: the project's demo (its files beside it); `demo-ui`, the same
    programme under another name, which the test releases through the UI to time it against the command
    line (the demo's own period is published by the command line first); and `demo-blocked`, the demo
    accepting no quarantined ping over two periods (2018-Q1 and 2018-Q2), so every run of it is blocked by its
    first check."""
    text = _demo_files(folder)
    (folder / f"{UI_PROGRAMME}.yaml").write_text(_renamed(text, UI_PROGRAMME))
    # the demo again, blocked by its first check: it accepts no quarantined ping, and quarantines some in
    # every period. The generated pings of 2018-Q1 include local times the clocks skipped (2018-03-11), but
    # those of 2018-Q2 none: two generated devices' ids are read as spellings of a missing id (their pings are
    # quarantined as missing_unit_id), the default spellings kept. Two periods, so "Materialize all" is a
    # backfill of two partitions (the generator makes traces for any period). A tenth of the demo's persons:
    # the runs stop at their first check, after reading the pings, so fewer pings make them short.
    assert "\n  max_rejected_share: 0.01\n" in text, "the demo policy's rejected-share line moved"
    assert "synthetic: {persons: 5000, " in text, "the demo policy's synthetic line moved"
    assert "\nlast_period: 2018-Q1\n" in text, "the demo policy's last-period line moved"
    assert "missing_unit_values" not in text, "the demo policy names its own missing-id spellings now"
    spellings = json.dumps([*DEFAULT_MISSING_UNIT_VALUES, *BLOCKED_DEVICES])
    blocked = (
        _renamed(text, BLOCKED_PROGRAMME)
        .replace(
            "\n  max_rejected_share: 0.01\n",
            f"\n  max_rejected_share: 0.0\n  missing_unit_values: {spellings}\n",
        )
        .replace("\nlast_period: 2018-Q1\n", "\nlast_period: 2018-Q2\n")
        .replace("synthetic: {persons: 5000, ", "synthetic: {persons: 500, ")
    )
    (folder / f"{BLOCKED_PROGRAMME}.yaml").write_text(blocked)
    return folder


class Inbox:
    """What the SMTP server received: (recipients, message), in order of arrival (aiosmtpd's handler)."""

    def __init__(self) -> None:
        self.messages: list = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        self.messages.append((list(envelope.rcpt_tos), message_from_bytes(envelope.original_content)))
        return "250 Message accepted for delivery"


class _HookServer(ThreadingHTTPServer):
    """The webhook's server: what its handler (_Hook) received, (path, JSON body), in order of arrival."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Hook)
        self.received: list[tuple[str, Any]] = []


class _Hook(BaseHTTPRequestHandler):
    """A webhook that answers 200 and records each POST's path and JSON body (Slack's incoming webhook)."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {"text": body.decode(errors="replace")}
        assert isinstance(self.server, _HookServer)
        self.server.received.append((self.path, payload))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def mail_text(message) -> str:
    """A received e-mail as text: its Subject line, then its decoded body."""
    subject = " ".join(str(message["Subject"] or "").split())
    body = message.get_payload(decode=True)
    return f"Subject: {subject}\n\n" + (body.decode(errors="replace") if isinstance(body, bytes) else str(body))


def hook_strings(payload) -> list[str]:
    """Every string of a webhook's JSON body (Slack's text and its blocks' texts), in order."""
    if isinstance(payload, str):
        return [payload]
    if isinstance(payload, dict):
        return [t for v in payload.values() for t in hook_strings(v)]
    if isinstance(payload, list):
        return [t for v in payload for t in hook_strings(v)]
    return []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Deployment:
    root: Path
    env: dict
    port: int
    site_port: int = 0
    procs: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)  # each command line's wall time, by command
    inbox: Inbox = field(default_factory=Inbox)
    smtp: Controller | None = None
    hook: _HookServer | None = None

    @classmethod
    def create(cls, root: Path) -> Deployment:
        home = root / "dagster_home"
        home.mkdir(parents=True)
        (home / "dagster.yaml").write_text(INSTANCE_YAML)
        out = root / "out"  # made by `spatial-release demo`, which refuses a folder it did not make
        env = dict(
            os.environ,
            DAGSTER_HOME=str(home),
            SPATIAL_RELEASE_RELEASES=str(out / "releases"),
            SPATIAL_RELEASE_WORK=str(out / "work"),
            SPATIAL_RELEASE_LEDGER=str(out / "ledger"),
            SPATIAL_RELEASE_ALERTS=str(out / "alerts"),
            SPATIAL_RELEASE_SIGNING_KEY=str(root / "keys" / "ledger-ed25519.key"),
        )
        env.pop("SPATIAL_RELEASE_PUBLIC_KEY", None)  # the key made beside the signing key
        env["SPATIAL_RELEASE_POLICIES"] = str(_ui_policies(root / "policies"))
        port, site = free_port(), free_port()
        env["SPATIAL_RELEASE_UI_URL"] = f"http://127.0.0.1:{port}"  # the alerts link to their runs here
        env["SPATIAL_RELEASE_RELEASES_URL"] = f"http://127.0.0.1:{site}"  # releases/ as a site serves it
        for name in ENV_VARS:  # the alert channels are this deployment's only (see start_alert_channels)
            env.pop(name, None)
        d = cls(root, env, port, site_port=site)
        try:
            d.start_alert_channels()
        except BaseException:
            d.stop()  # what started of them
            raise
        return d

    def start_alert_channels(self) -> None:
        """A real SMTP server (aiosmtpd) and a webhook on this machine, and the environment that routes the
        deployment's alerts to them (every process started here, and the command line, get it): the daemon's
        sensors deliver each alert by e-mail and by webhook, as in a deployment."""
        from aiosmtpd.controller import Controller

        self.smtp = Controller(self.inbox, hostname="127.0.0.1", port=free_port())
        self.smtp.start()
        self.hook = _HookServer(("127.0.0.1", 0))
        threading.Thread(target=self.hook.serve_forever, name="alert-webhook", daemon=True).start()
        self.env |= {
            SMTP_HOST: "127.0.0.1",
            SMTP_PORT: str(self.smtp.port),
            SMTP_FROM: ALERTS_FROM,
            SMTP_TO: ALERTS_TO,
            SLACK_WEBHOOK_URL: f"http://127.0.0.1:{self.hook.server_port}/hook",
        }

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- processes -------------------------------------------------------------------------------------

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """`spatial-release ARGS` in the project folder, into this deployment's instance; its output is
        kept in cli-<command>.log."""
        started = time.monotonic()
        done = subprocess.run(
            [str(BIN / "spatial-release"), *args],
            cwd=PROJECT_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        self.seconds[args[0]] = time.monotonic() - started
        log = self.root / f"cli-{args[0]}.log"
        with log.open("a") as f:
            f.write(
                f"$ spatial-release {' '.join(args)}\n-> exit {done.returncode} after "
                f"{time.monotonic() - started:.0f} s\n{done.stdout}{done.stderr}\n"
            )
        return done

    def init_instance(self) -> None:
        """Create the instance's SQLite storages once, before several processes open them: two processes
        creating a fresh instance at the same time can both stamp its schema version (alembic then reports
        "more than one head" and the code location fails to load)."""
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import dagster as dg\n"
                "instance = dg.DagsterInstance.get()\n"
                "instance.get_runs(limit=1)\n"
                "instance.all_instigator_state()\n"
                "instance.fetch_materializations(dg.AssetKey('none'), limit=1)\n",
            ],
            cwd=PROJECT_ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.log").open("w")
        self.procs[name] = subprocess.Popen(
            argv, cwd=PROJECT_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def start_webserver(self) -> None:
        self._start(
            "webserver", [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(self.port)]
        )

    def start_release_site(self) -> None:
        """releases/ served over http on this machine, as a release site would serve it (report.html links)."""
        self._start(
            "release_site",
            [
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "--directory",
                str(self.out / "releases"),
                str(self.site_port),
            ],
        )

    def start_daemon(self) -> None:
        self._start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"])

    def stop(self) -> None:
        """SIGTERM to each started process's group (its code servers and run workers), SIGKILL to what is
        left after 20 s. Only the groups of the processes started here are signalled. Then the SMTP server
        and the webhook stop."""
        try:
            self._stop_processes()
        finally:
            if self.smtp is not None:
                self.smtp.stop()
            if self.hook is not None:
                self.hook.shutdown()
                self.hook.server_close()

    def _stop_processes(self) -> None:
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _group_alive(proc.pid):  # a pgid is not reused while its group has a member: still ours
                _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    # --- the alerts received --------------------------------------------------------------------------

    def mails(self, link: str) -> list[str]:
        """The e-mails received whose text holds `link` (a run's page), as text (mail_text)."""
        texts = [mail_text(message) for _, message in list(self.inbox.messages)]
        return [t for t in texts if _holds_link(t, link)]

    def hooks(self, link: str) -> list[list[str]]:
        """The webhook calls received whose body holds `link`, each as its strings (hook_strings)."""
        calls = [hook_strings(payload) for _, payload in list(self.hook.received)] if self.hook else []
        return [c for c in calls if any(_holds_link(t, link) for t in c)]

    def wait_for_alerts(self, link: str, deadline: float) -> tuple[list[str], list[list[str]]]:
        """The e-mails and webhook calls that hold `link` once both channels have one, or as they are at the
        (monotonic) deadline."""
        while True:
            mails, hooks = self.mails(link), self.hooks(link)
            if (mails and hooks) or time.monotonic() >= deadline:
                return mails, hooks
            time.sleep(0.5)

    def received_summary(self) -> str:
        subjects = [" ".join(str(m["Subject"]).split()) for _, m in list(self.inbox.messages)]
        received = list(self.hook.received) if self.hook else []
        calls = [(path, str(payload.get("text", ""))[:120]) for path, payload in received]
        return f"e-mails received: {subjects or 'none'}; webhook calls: {calls or 'none'}"

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def save_logs(self, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        for log in self.root.glob("*.log"):
            shutil.copy2(log, dest / log.name)

    def _alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    # --- GraphQL: waiting for state and finding run ids ------------------------------------------------

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=20) as response:
            answer = json.load(response)
        if answer.get("errors"):
            raise AssertionError(f"GraphQL errors: {answer['errors']}")
        return answer["data"]

    def wait_for_location(self, timeout: float) -> None:
        """Until the webserver serves the code location; its load error fails at once."""
        query = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
                     locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._alive("webserver")
            try:
                entries = self.graphql(query)["workspaceOrError"]["locationEntries"]
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                entries = []
            for entry in entries:
                if entry["name"] == LOCATION and entry["loadStatus"] == "LOADED":
                    loaded = entry["locationOrLoadError"] or {}
                    if loaded.get("__typename") == "PythonError":
                        raise AssertionError(f"the code location failed to load: {loaded['message']}")
                    return
            time.sleep(1)
        raise AssertionError(f"the code location did not load in {timeout:.0f} s:\n{self.log_tail('webserver')}")

    def sensor_ticks(self, sensor: str, limit: int = 5) -> list[dict]:
        query = """query ($selector: SensorSelector!, $limit: Int) { sensorOrError(sensorSelector: $selector) {
                     __typename ... on Sensor { sensorState { status ticks(limit: $limit) { status timestamp } } }
                     ... on PythonError { message } } }"""
        selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "sensorName": sensor}
        found = self.graphql(query, {"selector": selector, "limit": limit})["sensorOrError"]
        if found["__typename"] != "Sensor":
            raise AssertionError(f"sensor {sensor}: {found}")
        return found["sensorState"]["ticks"]

    def wait_for_tick(self, sensor: str, timeout: float) -> None:
        """Until the daemon has finished one evaluation of the sensor."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._alive("daemon")
            if any(t["status"] in TICK_DONE for t in self.sensor_ticks(sensor)):
                return
            time.sleep(1)
        raise AssertionError(f"the daemon did not evaluate {sensor} in {timeout:.0f} s:\n{self.log_tail('daemon')}")

    def runs(self, job: str, status: str | None = None) -> list[dict]:
        """The runs of a job, newest first, each with its tags as a dict."""
        query = """query ($filter: RunsFilter) { runsOrError(filter: $filter) { ... on Runs { results {
                     runId status jobName tags { key value } } } } }"""
        run_filter = {"pipelineName": job, **({"statuses": [status]} if status else {})}
        results = self.graphql(query, {"filter": run_filter})["runsOrError"]["results"]
        return [{**r, "tags": {t["key"]: t["value"] for t in r["tags"]}} for r in results]

    def partition_tags(self, job: str, partition: str) -> tuple[dict, str]:
        """The tags and run config the job's partition set gives `partition`: what the launchpad fills in
        when a partition is chosen in the UI."""
        query = """query ($repo: RepositorySelector!, $name: String!, $partition: String!) {
                     partitionSetOrError(repositorySelector: $repo, partitionSetName: $name) {
                       __typename ... on PartitionSet { partition(partitionName: $partition) {
                         tagsOrError { __typename ... on PartitionTags { results { key value } }
                                       ... on PythonError { message } }
                         runConfigOrError { __typename ... on PartitionRunConfig { yaml }
                                            ... on PythonError { message } } } }
                       ... on PythonError { message } } }"""
        repo = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}
        found = self.graphql(query, {"repo": repo, "name": f"{job}_partition_set", "partition": partition})[
            "partitionSetOrError"
        ]
        if found["__typename"] != "PartitionSet" or not found["partition"]:
            raise AssertionError(f"no partition {partition} in {job}'s partition set: {found}")
        tags, config = found["partition"]["tagsOrError"], found["partition"]["runConfigOrError"]
        if tags["__typename"] != "PartitionTags" or config["__typename"] != "PartitionRunConfig":
            raise AssertionError(f"partition {partition} of {job}: {tags} {config}")
        return {t["key"]: t["value"] for t in tags["results"]}, config["yaml"]

    def launch_partition_run(self, job: str, partition: str) -> str:
        """Launch a run of one partition of `job` through the webserver, as the UI's launchpad does (the
        partition's tags, among them dagster/partition, and its run config); returns the run id. The
        instance's run coordinator may queue it: the daemon dequeues it."""
        tags, run_config = self.partition_tags(job, partition)
        tags.setdefault("dagster/partition", partition)
        query = """mutation ($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
                     ... on LaunchRunSuccess { run { runId } }
                     ... on RunConfigValidationInvalid { errors { message } }
                     ... on Error { message } } }"""
        params = {
            "selector": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "jobName": job},
            "runConfigData": run_config or "{}",
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
        }
        launched = self.graphql(query, {"params": params})["launchRun"]
        if launched["__typename"] != "LaunchRunSuccess":
            raise AssertionError(f"launchRun of {job} partition {partition}: {launched}")
        return launched["run"]["runId"]

    def run_status(self, run_id: str) -> str:
        query = """query ($runId: ID!) { runOrError(runId: $runId) { __typename ... on Run { status } } }"""
        run = self.graphql(query, {"runId": run_id})["runOrError"]
        return run.get("status", run["__typename"])

    def wait_for_run(self, run_id: str, timeout: float) -> str:
        """The run's status once it has ended (the daemon dequeues and launches it)."""
        deadline = time.monotonic() + timeout
        status = ""
        while time.monotonic() < deadline:
            self._alive("daemon")
            status = self.run_status(run_id)
            if status in RUN_DONE:
                return status
            time.sleep(2)
        raise AssertionError(f"run {run_id} did not end in {timeout:.0f} s (status {status}):\n{self.log_tail('daemon')}")

    def partition_statuses(self, asset_path: list[str]) -> dict:
        """The asset's partition statuses as the webserver reports them: {"MATERIALIZED": [(start, end)],
        "FAILED": [...], "MATERIALIZING": [...]} (inclusive key ranges), and its partitionStats."""
        query = """query ($keys: [AssetKeyInput!]) { assetNodes(assetKeys: $keys) {
                     partitionStats { numMaterialized numFailed numMaterializing numPartitions }
                     assetPartitionStatuses { __typename
                       ... on TimePartitionStatuses { ranges { status startKey endKey } }
                       ... on DefaultPartitionStatuses { materializedPartitions failedPartitions
                                                         materializingPartitions } } } }"""
        [node] = self.graphql(query, {"keys": [{"path": asset_path}]})["assetNodes"]
        found = node["assetPartitionStatuses"]
        ranges: dict = {"MATERIALIZED": [], "FAILED": [], "MATERIALIZING": []}
        if found["__typename"] == "TimePartitionStatuses":
            for r in found["ranges"]:
                ranges.setdefault(r["status"], []).append((r["startKey"], r["endKey"]))
        elif found["__typename"] == "DefaultPartitionStatuses":
            for status in ("MATERIALIZED", "FAILED", "MATERIALIZING"):
                ranges[status] = [(k, k) for k in found[f"{status.lower()}Partitions"]]
        else:
            raise AssertionError(f"partition statuses of {'/'.join(asset_path)}: {found}")
        return {"ranges": ranges, "stats": node["partitionStats"]}

    def wait_for_backfill(self, backfill_id: str, timeout: float) -> str:
        """The backfill's status once the daemon has closed it (not REQUESTED), or as it is at the timeout."""
        query = """query ($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
                     ... on PartitionBackfill { status } } }"""
        deadline = time.monotonic() + timeout
        while True:
            found = self.graphql(query, {"id": backfill_id})["partitionBackfillOrError"]
            status = found.get("status", found["__typename"])
            if status != "REQUESTED" or time.monotonic() >= deadline:
                return status
            time.sleep(1)

    def run_times(self, run_id: str) -> dict:
        """The run's record times on the server: creationTime, startTime, endTime (epoch seconds)."""
        query = """query ($runId: ID!) { runOrError(runId: $runId) { __typename
                     ... on Run { status creationTime startTime endTime } } }"""
        run = self.graphql(query, {"runId": run_id})["runOrError"]
        if run["__typename"] != "Run":
            raise AssertionError(f"run {run_id}: {run}")
        return run

    def run_launched_at(self, run_id: str) -> float:
        """When the daemon launched the run (its RunStartingEvent, epoch seconds): after the queue, before the
        run worker loads the code location."""
        query = """query ($runId: ID!) { logsForRun(runId: $runId) { __typename ... on EventConnection {
                     events { __typename ... on MessageEvent { timestamp } } } } }"""
        found = self.graphql(query, {"runId": run_id})["logsForRun"]
        starting = [e for e in found.get("events", []) if e["__typename"] == "RunStartingEvent"]
        if not starting:
            raise AssertionError(f"run {run_id} has no RunStartingEvent: {found.get('__typename')}")
        return int(starting[0]["timestamp"]) / 1000

    def run_tags(self, run_id: str) -> dict:
        query = """query ($runId: ID!) { runOrError(runId: $runId) { ... on Run { tags { key value } } } }"""
        run = self.graphql(query, {"runId": run_id})["runOrError"]
        return {t["key"]: t["value"] for t in run.get("tags", [])}

    def wait_for_run_tag(self, run_id: str, key: str, deadline: float) -> dict:
        """The run's tags once it carries `key`, or its tags as they are at the (monotonic) deadline."""
        while True:
            tags = self.run_tags(run_id)
            if key in tags or time.monotonic() >= deadline:
                return tags
            time.sleep(2)


def _holds_link(text: str, link: str) -> bool:
    """`link` in `text` as a whole URL (not the start of a longer one)."""
    return re.search(re.escape(link) + r"(?![\w/-])", text) is not None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
