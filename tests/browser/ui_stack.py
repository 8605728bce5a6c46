"""A throw-away Dagster deployment for the browser test: a fresh DAGSTER_HOME and output folder, the
`spatial-release` command line run into that instance, `dagster-webserver` and `dagster-daemon` as
subprocesses (each in its own process group, stopped by that group's id), and the GraphQL queries the test
uses to wait for state and to find run ids. What the test checks it reads in the browser, not here."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

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
# The instance settings the README recommends for a release deployment: queued runs are picked up within a
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


def _ui_policies(folder: Path) -> Path:
    """The policies the deployment serves: the project's demo (its files beside it) and `demo-ui`, the same
    programme under another name, which the test releases through the UI to time it against the command
    line's demo (the demo's own period is published by the command line first)."""
    source = PROJECT_ROOT / "policies"
    shutil.copytree(source / "landscapes", folder / "landscapes")
    for name in ("demo.yaml", "demo-structural-zeros.csv"):
        shutil.copy(source / name, folder / name)
    text = (source / "demo.yaml").read_text()
    assert "\nname: demo\n" in text, "the demo policy's name line moved"
    (folder / f"{UI_PROGRAMME}.yaml").write_text(text.replace("\nname: demo\n", f"\nname: {UI_PROGRAMME}\n"))
    # the demo again, blocked by its first check: it quarantines some generated pings and accepts none
    assert "max_rejected_share: 0.01" in text, "the demo policy's rejected-share line moved"
    blocked = text.replace("\nname: demo\n", f"\nname: {BLOCKED_PROGRAMME}\n").replace(
        "max_rejected_share: 0.01", "max_rejected_share: 0.0"
    )
    (folder / f"{BLOCKED_PROGRAMME}.yaml").write_text(blocked)
    return folder


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
        return cls(root, env, port, site_port=site)

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
        left after 20 s. Only the groups of the processes started here are signalled."""
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
