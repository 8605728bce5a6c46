"""A whole release on a real Spark standalone cluster is byte-identical to the local one, with owner-only files.

A master and two workers (1 core each, limited memory) run as separate JVM processes started from the PySpark
distribution (`spark-class ...deploy.master.Master` / `...deploy.worker.Worker`) on 127.0.0.1 with free ports;
the workers run under a permissive 022 umask, like a cluster's service account. The release runs through
the command line's `run_release` with the `counting` resource's config (`engine: spark`, `spark_master:
spark://...`, `scratch_dir`: a folder both workers reach), as `--engine spark --spark-master URL` gives it,
in a driver process of its own: the counting as Spark SQL, protection's chunks of blocks as Spark tasks. The
test proves from the master's and the workers' JSON and the
executors' logs that the application ran on the cluster with an executor on each worker that ran tasks (not
local mode). Every process is stopped by a finalizer (on failure and on Ctrl-C too); if pytest itself is
killed, the kernel sends the daemons and the driver SIGTERM (PR_SET_PDEATHSIG) and executors follow their
worker.

On a user's machine without PySpark or Java this skips; in CI (CI=true) both are installed by .ci/run, and a
missing one fails instead of skipping.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.fixture import CELL_A, CELL_D, TO_LONLAT, fixture_pings, policy_dict, write_policy
from support.spark import HAVE_SPARK, SKIP_REASON, require_spark_on_ci

from spatial_release import stages, tasks
from spatial_release.period import Period
from spatial_release.risk.attack import _best_slice, _linkage_task
from spatial_release.risk.estimator import _anonymity_task
from spatial_release.suppression.blocks import _protect_chunk

require_spark_on_ci()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAVE_SPARK, reason=SKIP_REASON)]  # slow: not in the fast tier

PERIOD = Period.parse("2018-Q1")
START_TIMEOUT = 150  # seconds for the three daemons to come up, on a loaded 2-core machine
DRIVER_TIMEOUT = 480  # seconds for the driver: session, counting, snapshots (about a minute on a quiet machine)
# Short-lived JVMs: the client compiler only and a serial collector start faster and use less of 2 cores.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss4m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as response:
        return json.load(response)


def _daemon_preexec() -> None:
    """In the child: its own process group (stopped as one, executors included), SIGTERM when pytest dies,
    and a permissive umask, so that owner-only files must come from the project's Spark settings."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.umask(0o022)


def _driver_preexec() -> None:
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Cluster:
    root: Path
    master_port: int = field(default_factory=_free_port)
    master_ui: int = field(default_factory=_free_port)
    worker_uis: list[int] = field(default_factory=lambda: [_free_port(), _free_port()])
    processes: list[tuple[str, subprocess.Popen]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def scratch(self) -> Path:
        return self.root / "shared-scratch"

    def worker_dir(self, i: int) -> Path:
        return self.root / f"worker{i}"

    def start(self) -> None:
        from pyspark.find_spark_home import _find_spark_home

        spark_class = Path(_find_spark_home()) / "bin" / "spark-class"
        conf_dir = self.root / "conf"  # empty: no spark-defaults.conf or spark-env.sh of the machine
        for folder in (conf_dir, self.scratch, self.root / "logs"):
            folder.mkdir(parents=True)
        env = self.env = {
            **os.environ,
            "SPARK_HOME": str(spark_class.parents[1]),
            "SPARK_CONF_DIR": str(conf_dir),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
            "PYSPARK_PYTHON": sys.executable,
        }
        env.pop("SPARK_MASTER", None)
        self._spawn(
            "master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                self.master_port,
                "--webui-port",
                self.master_ui,
            ],
            env,
        )
        for i, ui in enumerate(self.worker_uis):
            work = self.worker_dir(i)
            for folder in (work, work / "local", work / "apps"):  # as on a cluster: folders others may enter
                folder.mkdir()
                folder.chmod(0o755)
            self._spawn(
                f"worker{i}",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    ui,
                    "--cores",
                    "1",
                    "--memory",
                    "768m",
                    "--work-dir",
                    work / "apps",
                    self.url,
                ],
                {**env, "SPARK_LOCAL_DIRS": str(work / "local")},
            )
        self._wait_for_workers()

    def _spawn(self, name: str, command: list, env: dict, preexec=_daemon_preexec) -> subprocess.Popen:
        log = open(self.root / "logs" / f"{name}.log", "wb")
        with log:
            process = subprocess.Popen(
                [str(c) for c in command],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=preexec,
            )
        self.processes.append((name, process))
        return process

    def run_driver(self, command: list) -> int:
        """Runs the driver process (its own process group, stopped with the cluster); its exit code."""
        env = {**self.env, "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        process = self._spawn("driver", command, env, preexec=_driver_preexec)
        try:
            return process.wait(DRIVER_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the Spark driver took over {DRIVER_TIMEOUT} s:\n{self.log_tails()}") from None

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        state: dict = {}
        while time.monotonic() < deadline:
            dead = [name for name, p in self.processes if p.poll() is not None]
            if dead:
                raise RuntimeError(f"Spark daemon(s) {dead} exited while starting:\n{self.log_tails()}")
            try:
                state = _get_json(self.master_ui)
            except (OSError, ValueError):
                # Not listening yet, or (seen in CI) the master's UI answers /json/ with its HTML page while
                # it is still starting: both mean "ask again".
                state = {}
            if sum(w.get("state") == "ALIVE" for w in state.get("workers", [])) == 2:
                return
            time.sleep(0.5)
        raise RuntimeError(f"two workers did not register within {START_TIMEOUT} s: {state}\n{self.log_tails()}")

    def log_tails(self) -> str:
        return "\n".join(
            f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            for log in sorted((self.root / "logs").glob("*.log"))
        )

    def alive(self) -> list[str]:
        """The daemons whose process group still has a process (a daemon or one of its executors)."""
        names = []
        for name, process in self.processes:
            try:
                os.killpg(process.pid, 0)
                names.append(name)
            except ProcessLookupError:
                pass
            except PermissionError:
                names.append(name)
        return names

    def stop(self) -> None:
        """The driver, the workers (each with its executors: one process group), then the master; SIGKILL
        after 20 s."""
        for _name, process in reversed(self.processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 20
        for name, process in reversed(self.processes):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            while time.monotonic() < deadline and name in self.alive():
                time.sleep(0.2)  # executors leave after their worker
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(10)
            # SIGKILL to a group is delivered asynchronously, and its members other than the leader are
            # reaped by init: give them a moment before anyone counts what is left (a suite run saw the
            # three groups still present right after the leaders' wait)
            gone_by = time.monotonic() + 10
            while name in self.alive() and time.monotonic() < gone_by:
                time.sleep(0.1)


@pytest.fixture
def spark_cluster(tmp_path):
    cluster = Cluster(tmp_path / "cluster")
    try:
        started = time.monotonic()
        cluster.start()
        print(f"cluster up in {time.monotonic() - started:.1f} s")
        yield cluster
    finally:
        # also on failure and on Ctrl-C (pytest runs fixture finalizers when a session is interrupted)
        cluster.stop()


def _traces(path: Path) -> Path:
    """The fixture traces plus 400 generated devices over 3 days and nine 1 km cells around the fixture's."""
    rng = np.random.default_rng(13)
    n = 12_000
    x = rng.uniform(CELL_A[0] - 1000, CELL_D[0] + 2000, n)
    y = rng.uniform(CELL_A[1] - 1000, CELL_D[1] + 1000, n)
    lon, lat = TO_LONLAT.transform(x, y)
    minutes = rng.integers(0, 3 * 24 * 60, n)
    when = pd.Timestamp("2018-01-09 00:00:00") + pd.to_timedelta(minutes, unit="min")
    devices = rng.integers(0, 400, n)
    extra = pd.DataFrame(
        {
            "device": [f"g{d:04d}" for d in devices],
            "when": when.strftime("%Y-%m-%d %H:%M:%S"),
            "lon": np.round(lon, 7),
            "lat": np.round(lat, 7),
            "gender": np.where(devices % 2 == 0, "f", "m"),
        }
    )
    pd.concat([fixture_pings(), extra], ignore_index=True).to_csv(path, index=False)
    return path


def _tables(area: stages.WorkArea) -> dict[str, pd.DataFrame]:
    cells, margins = stages.read_true_counts(area)
    frames = {
        "cells": cells,
        "margins": margins,
        "membership": pd.read_parquet(area.counts / "membership.internal.parquet"),
        "outside": pd.read_parquet(area.counts / "outside.parquet"),
    }
    return {name: f.sort_values(list(f.columns)).reset_index(drop=True) for name, f in frames.items()}


def _facts(summary) -> tuple:
    return (
        summary.groups,
        summary.units,
        summary.unit_buckets,
        summary.pings_located,
        summary.pings_outside_geometry,
        summary.unsure_coordinates,
        summary.linked_covers_main,
    )


def _group_or_world_bits(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode) & 0o077


def test_a_whole_release_on_a_standalone_cluster_is_byte_identical_to_the_local_one(tmp_path, spark_cluster):
    """The same release twice in one driver process: on this machine (DuckDB, local worker processes), then
    with `engine: spark` on the cluster, where the counting runs as Spark SQL and protection's chunks of
    independent blocks, the attack simulation's chunks and the uniqueness estimate's anonymity counts, by ranges
    of units, as Spark tasks (`spatial_release.tasks`). The
    published files are byte-identical, the risk figures equal and the true counts equal row for row; the
    application ran on the cluster's two executors, with the job groups of those tasks among its jobs; every
    file the executors wrote is owner-only."""
    started = time.monotonic()
    traces = _traces(tmp_path / "traces.csv")
    # hourly buckets: one independent block per hour, 18 chunks of blocks at the chunk size the driver sets
    data = policy_dict(str(traces), k=10, time={"bucket": "1h", "timezone": "America/New_York"})
    data["risk"] = {**data["risk"], "per_release_ceiling": 1.0, "cumulative_ceiling": 1.0}  # published either way
    policy = write_policy(tmp_path, data, population=100_000)
    spec = {
        "policy": str(policy),
        "root": str(tmp_path),
        "master": spark_cluster.url,
        "scratch": str(spark_cluster.scratch),
        "master_ui": spark_cluster.master_ui,
        "worker_uis": spark_cluster.worker_uis,
        "worker_local": [str(spark_cluster.worker_dir(i) / "local") for i in range(2)],
        "top": str(spark_cluster.root),
        "report": str(tmp_path / "driver-report.json"),
    }
    (tmp_path / "driver-spec.json").write_text(json.dumps(spec))
    # The Spark driver runs in its own process: Ctrl-C then reaches pytest at once (a Python process blocked
    # in a long Py4J call only sees it when the call returns), and a hung driver is a failure, not a hang.
    driver = spark_cluster.run_driver([sys.executable, __file__, str(tmp_path / "driver-spec.json")])
    assert driver == 0, f"the Spark driver failed ({driver}):\n{spark_cluster.log_tails()}"
    report = json.loads(Path(spec["report"]).read_text())
    t_driver = time.monotonic()

    # both published, the same bytes
    local, spark = report["releases"]["local"], report["releases"]["spark"]
    assert local["published"] and spark["published"], report["releases"]
    assert spark["sha256"] == local["sha256"], (local, spark)
    assert spark["risk"] == local["risk"] and local["risk"]["zones"], (local["risk"], spark["risk"])
    assert local["chunks"] >= 2, "the protection ran on one chunk: no Spark task would have protected a block"

    # the application ran on the cluster: the master lists it on 2 cores while it runs, each worker ran
    # one of its executors, and each executor finished tasks of it (its own log, in the worker's folder)
    app_id = report["app_id"]
    apps = {a["id"]: a for a in report["master"]["activeapps"]}
    assert app_id in apps and apps[app_id]["state"] == "RUNNING" and apps[app_id]["cores"] == 2, report["master"]
    executors = [[e for e in worker["executors"] if e["appid"] == app_id] for worker in report["workers"]]
    assert all(len(e) == 1 for e in executors), executors
    for i in range(2):
        logs = list((spark_cluster.worker_dir(i) / "apps" / app_id).glob("*/stderr"))
        assert len(logs) == 1 and "Finished task" in logs[0].read_text(errors="replace"), (i, logs)
    # protection's chunks were Spark jobs of their own group, one per chunk (the driver counted the chunks),
    # and so were the attack simulation's chunks of knowledge sets (the policy's risk model is the attack)
    groups = report["job_groups"]
    assert groups.get(tasks.job_group(_protect_chunk)) == local["chunks"], groups
    assert groups.get(tasks.job_group(_linkage_task), 0) >= 1, groups
    assert groups.get(tasks.job_group(_best_slice), 0) >= 1, groups  # the trajectories matched to units
    # the uniqueness estimate went by ranges on the cluster (its figures are in the risk compared above) and
    # every range's anonymity counts were Spark jobs
    assert len(report["ranges"]) == 1 and report["ranges"][0] >= 3, report["ranges"]
    assert groups.get(tasks.job_group(_anonymity_task), 0) >= report["ranges"][0], groups
    spark_area = stages.WorkArea(Path(spark["work"]) / "fixture" / PERIOD.label)
    local_area = stages.WorkArea(Path(local["work"]) / "fixture" / PERIOD.label)
    summary = stages.read_counts_summary(spark_area)
    assert summary.engine == "spark" and summary.engine_settings["master"] == spark_cluster.url

    # row for row: cell counts, margins, membership, outside pings, and the summary's facts
    local_tables, spark_tables = _tables(local_area), _tables(spark_area)
    assert len(local_tables["cells"]) > 20 and len(local_tables["membership"]) > 5000
    for name in local_tables:
        pd.testing.assert_frame_equal(local_tables[name], spark_tables[name], check_dtype=False, obj=name)
    assert _facts(stages.read_counts_summary(local_area)) == _facts(summary)

    # owner-only: what the executors wrote in the shared scratch (under the workers' 022 umask), the spark
    # run's work area, and the shuffle files the executors kept while the application ran
    scratch = spark_cluster.scratch / "fixture" / PERIOD.label
    written = list(scratch.rglob("*"))
    assert any(p.name.startswith("part-") and p.suffix == ".parquet" for p in written), written
    readable = [
        (str(p), oct(stat.S_IMODE(p.lstat().st_mode)))
        for p in [scratch, *written, *spark_area.root.rglob("*")]
        if _group_or_world_bits(p)
    ]
    assert readable == [], readable
    assert report["shuffle_files"] > 0 and report["exposed"] == [], report

    # every daemon, executor and the driver stop with the cluster
    spark_cluster.stop()
    assert spark_cluster.alive() == []
    print(
        f"driver {t_driver - started:.1f} s (local release {local['seconds']:.1f} s, spark release "
        f"{spark['seconds']:.1f} s), checks and stop {time.monotonic() - t_driver:.1f} s"
    )


SPARK_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    # start work only once both executors are there
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": QUICK_JVM,
    "spark.executor.extraJavaOptions": QUICK_JVM,
    # shuffle files stay until the application ends (Spark's cleaner deletes them once their tables are
    # garbage collected, which happens during the later steps), so the check of their modes sees them
    "spark.cleaner.referenceTracking": "false",
}


# Small enough that the fixture's hourly blocks go to 18 chunks (the release's own thresholds split tables
# of 20,000 figures and more): set in the driver, for both releases.
DRIVER_BLOCKS_MIN_NODES, DRIVER_CHUNK_NODES = 200, 100
DRIVER_RANGE_ROWS = 1_000  # (unit, key) rows per range of the spark run's uniqueness estimate


def _release(spec: dict, name: str, counting: dict | None) -> dict:
    from spatial_release.cli import run_release

    out = Path(spec["root"]) / f"release-{name}"
    started = time.monotonic()
    outcome = run_release(spec["policy"], PERIOD.label, out=str(out), ledger=str(out / "ledger"), counting=counting)
    done = {"published": outcome.published, "failures": [f.message for f in outcome.failures]}
    if outcome.published:
        assert outcome.release_dir is not None
        files = ("cells.parquet", "margins.parquet")
        done["sha256"] = {f: hashlib.sha256((outcome.release_dir / f).read_bytes()).hexdigest() for f in files}
        area = stages.WorkArea(out / "work" / "fixture" / PERIOD.label)
        done["risk"] = _without_timings(stages.read_risk(area).to_json())
    return {**done, "work": str(out / "work"), "seconds": time.monotonic() - started}


def _without_timings(value):
    """The risk assessment's figures without its timings (seconds), which differ from run to run."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _drive(spec: dict) -> None:
    """The driver process: the release on this machine, then on the cluster through the `counting`
    resource's config (as `--engine spark --spark-master URL` gives it), and what the master, the workers
    and the workers' local folders showed while the application ran."""
    from spatial_release.ledger import SIGNING_KEY_ENV
    from spatial_release.risk import ranges
    from spatial_release.risk.estimator import RiskParams, RiskReport
    from spatial_release.risk.ranges import KeyRanges
    from spatial_release.stages import risk as risk_stage
    from spatial_release.suppression import blocks
    from spatial_release.suppression.table import Table

    os.environ[SIGNING_KEY_ENV] = str(Path(spec["root"]) / "key" / "ledger.key")
    blocks.BLOCKS_MIN_NODES, blocks.CHUNK_NODES = DRIVER_BLOCKS_MIN_NODES, DRIVER_CHUNK_NODES
    chunks: list[int] = []
    real_chunks = blocks._chunks

    # the stand-ins keep the parameter names of the functions they replace, which a caller may pass by name
    def counted_chunks(table: Table, blocks: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        out = real_chunks(table, blocks)
        chunks.append(len(out))
        return out

    blocks._chunks = counted_chunks
    report: dict = {"releases": {"local": _release(spec, "local", None)}}
    report["releases"]["local"]["chunks"] = chunks[-1] if chunks else 0
    counting = {"engine": "spark", "spark_master": spec["master"], "scratch_dir": spec["scratch"], "spark_conf": SPARK_CONF}
    # On the cluster the uniqueness estimate goes by ranges of units (as above its row limit, at 500 M pings):
    # each range's counts are Spark jobs, and its figures must still be those of the whole key sets here.
    ranged: list[int] = []
    real_ranges = risk_stage.estimate_key_ranges

    def counted_ranges(
        ranges: KeyRanges, params: RiskParams, population: dict[str, float] | None = None, started: float | None = None
    ) -> RiskReport:
        ranged.append(len(ranges))
        return real_ranges(ranges, params, population, started)

    risk_stage.estimate_key_ranges = counted_ranges
    risk_stage.RANGES_ABOVE, ranges.RANGE_ROWS = 0, DRIVER_RANGE_ROWS
    report["releases"]["spark"] = _release(spec, "spark", counting)
    report["ranges"] = ranged
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None, "the spark release left its session running"
    context = spark.sparkContext
    tracker = context.statusTracker()
    groups = {
        tasks.job_group(blocks._protect_chunk),
        tasks.job_group(_linkage_task),
        tasks.job_group(_best_slice),
        tasks.job_group(_anonymity_task),
    }
    report["job_groups"] = {g: len(tracker.getJobIdsForGroup(g)) for g in groups}
    report["app_id"] = context.applicationId
    report["master"] = _get_json(spec["master_ui"])
    report["workers"] = [_get_json(ui) for ui in spec["worker_uis"]]
    shuffle = [p for folder in spec["worker_local"] for p in Path(folder).rglob("*") if p.is_file()]
    report["shuffle_files"] = len(shuffle)
    report["exposed"] = [
        (str(p), oct(stat.S_IMODE(p.lstat().st_mode))) for p in shuffle if _reachable_by_others(p, Path(spec["top"]))
    ]
    spark.stop()
    Path(spec["report"]).write_text(json.dumps(report))


def _reachable_by_others(path: Path, top: Path) -> bool:
    """Whether another user could read `path`: it is group/world readable and every folder down to it from
    `top` lets them through."""
    if not stat.S_IMODE(path.lstat().st_mode) & 0o044:
        return False
    folder = path.parent
    while folder != top and top in folder.parents:
        if not stat.S_IMODE(folder.lstat().st_mode) & 0o011:
            return False
        folder = folder.parent
    return True


def test_an_engine_on_another_master_does_not_reuse_the_running_session(tmp_path):
    """getOrCreate() hands back a running session unchanged: a cluster run after a local one in the same
    process (a Dagster process, this test session) would run locally. The engine stops the other one."""
    from spatial_release.counting.engines import SparkEngine, SparkSettings, open_engine

    for master in ("local[1]", "local[2]"):
        with open_engine("spark", scratch=tmp_path / master, spark_settings=SparkSettings(master=master)) as engine:
            assert engine.describe()["master"] == master
            assert engine.fetch("SELECT 1 AS one")["one"].tolist() == [1]
    assert isinstance(engine, SparkEngine)
    engine.spark.stop()


if __name__ == "__main__":
    _drive(json.loads(Path(sys.argv[1]).read_text()))
