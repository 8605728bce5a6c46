"""Where things live: the policy, the trace files, the release, work and ledger folders.

Defaults point at the embedded demo (policies/demo.yaml, synthetic traces) inside the project folder, so
`dagster dev` and the schedule work out of the box; each can be set per run or by environment variable. The
environment is read when a resource is built (each default is a factory), never when this module is imported.
"""

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from pydantic import Field

from spatial_release import tasks
from spatial_release.counting.engines import DuckDBSettings, Engine, SparkSettings, open_engine, spark_session
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.stages import Published, ReleaseContext, WorkArea

PROJECT_ROOT = Path(__file__).resolve().parents[2]


_HTTP_BASE_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")


def is_http_base_url(value: str) -> bool:
    """An http(s) URL with a host and an optional path, nothing else (the UI's and the release site's bases)."""
    return bool(_HTTP_BASE_URL.match(value))


def _env(name: str) -> Callable[[], str | None]:
    """A default read from the environment when the resource is built (None when it is not set)."""
    return lambda: os.environ.get(name)


def _env_or(name: str, default: str) -> Callable[[], str]:
    """A default read from the environment when the resource is built, `default` when it is not set."""
    return lambda: os.environ.get(name, default)


def _project(env: str, relative: str) -> Callable[[], str]:
    return _env_or(env, str(PROJECT_ROOT / relative))


class ReleaseSettings(dg.ConfigurableResource):
    """Where every programme's files live. The policy is not here: each policy file has its own graph."""

    traces: list[str] = Field(
        default=[],
        description="Trace files or globs for this run; empty: the policy's source.paths (or its synthetic generator).",
    )
    releases_dir: str = Field(
        default_factory=_project("SPATIAL_RELEASE_RELEASES", "releases"),
        description="Published release folders, <dataset>/<period>/ (env SPATIAL_RELEASE_RELEASES).",
    )
    work_dir: str = Field(
        default_factory=_project("SPATIAL_RELEASE_WORK", "work"),
        description="Owner-only work areas with per-unit files (env SPATIAL_RELEASE_WORK).",
    )
    ledger_dir: str = Field(
        default_factory=_project("SPATIAL_RELEASE_LEDGER", "ledger"),
        description="The signed, hash-chained ledger of releases (env SPATIAL_RELEASE_LEDGER).",
    )
    releases_url: str | None = Field(
        default_factory=_env("SPATIAL_RELEASE_RELEASES_URL"),
        description="Where the releases folder is served over http(s), e.g. https://data.example.org/releases "
        "(env SPATIAL_RELEASE_RELEASES_URL): each published release's report.html is then a link in the UI; "
        "unset, its path only.",
    )
    alerts_dir: str = Field(
        default_factory=_project("SPATIAL_RELEASE_ALERTS", "alerts"),
        description="Alert records, one JSON file per alert, besides the e-mail and "
        "webhook deliveries (env SPATIAL_RELEASE_ALERTS).",
    )

    def context(self, policy: Policy, period: Period) -> ReleaseContext:
        """The release context of one step (it refuses a period of the other cadence)."""
        return ReleaseContext(policy, period, Path(self.work_dir))

    def ledger(self) -> Ledger:
        # the ledger knows its releases folder, so every read for a risk assessment is cross-checked with it
        return Ledger(Path(self.ledger_dir), Path(self.releases_dir))

    def published(self) -> Published:
        return Published(self.ledger(), Path(self.releases_dir))


def _env_int(name: str) -> Callable[[], int | None]:
    return lambda: int(os.environ[name]) if os.environ.get(name) else None


class CountingEngine(dg.ConfigurableResource):
    """The engine that counts the pings. `duckdb` (the default) runs on this machine and spills to disk past
    `duckdb_memory_limit`; `spark` hands the scan and the distinct counts to Apache Spark at `spark_master`
    ('local[*]', or a cluster URL such as 'spark://host:7077'), and with it the independent jobs of the later
    steps (`tasks`: protection's blocks, the audit's components, the risk estimate's chunks) run as Spark tasks
    on the same master instead of local processes. Both engines give identical counts and byte-identical
    releases (tests compare them)."""

    engine: str = Field(
        default_factory=_env_or("SPATIAL_RELEASE_ENGINE", "duckdb"),
        description="duckdb or spark (env SPATIAL_RELEASE_ENGINE).",
    )
    duckdb_memory_limit: str | None = Field(
        default_factory=_env("SPATIAL_RELEASE_DUCKDB_MEMORY_LIMIT"),
        description="DuckDB memory limit, e.g. 2GB; past it DuckDB spills "
        "to the work area (env SPATIAL_RELEASE_DUCKDB_MEMORY_LIMIT).",
    )
    duckdb_threads: int | None = Field(
        default_factory=_env_int("SPATIAL_RELEASE_DUCKDB_THREADS"),
        description="DuckDB threads; default all cores (env SPATIAL_RELEASE_DUCKDB_THREADS).",
    )
    spark_master: str = Field(
        default_factory=_env_or("SPARK_MASTER", "local[*]"),
        description="Spark master URL: local[*], spark://host:7077, yarn, k8s://... (env SPARK_MASTER).",
    )
    spark_conf: dict[str, str] = Field(default={}, description="Extra Spark settings, e.g. spark.executor.memory.")
    # On a cluster, intermediate tables must be on storage every executor reaches (HDFS, S3, a shared mount).
    scratch_dir: str | None = Field(
        default_factory=_env("SPATIAL_RELEASE_SPARK_SCRATCH"),
        description="Scratch folder every Spark executor can reach (env "
        "SPATIAL_RELEASE_SPARK_SCRATCH); default inside the work area.",
    )

    def scratch_for(self, area: WorkArea) -> Path:
        """Spark's scratch folder for one work area: `<scratch_dir>/<dataset>/<period>` on shared storage (two
        programmes releasing one period never share one), else inside the work area."""
        return Path(self.scratch_dir) / area.root.parent.name / area.root.name if self.scratch_dir else area.counts / "spark"

    def spark_settings(self) -> SparkSettings:
        return SparkSettings(master=self.spark_master, conf=dict(self.spark_conf))

    @contextmanager
    def tasks(self) -> Iterator[tasks.Runner | None]:
        """The runner of a step's independent jobs while the block runs: Spark tasks on `spark_master` for the
        spark engine; None (local processes, `tasks.LocalProcesses`) for duckdb."""
        if self.engine != "spark":
            yield None
            return
        with tasks.running_on(tasks.SparkTasks(spark_session(self.spark_settings()))) as runner:
            yield runner

    @contextmanager
    def open(self, area: WorkArea) -> Iterator[Engine]:
        if self.engine == "spark":
            scratch = self.scratch_for(area)
            with open_engine("spark", scratch=scratch, spark_settings=self.spark_settings()) as engine:
                yield engine
        else:
            duck = DuckDBSettings(memory_limit=self.duckdb_memory_limit, threads=self.duckdb_threads)
            with open_engine(self.engine, scratch=area.counts / "spill", duckdb_settings=duck) as engine:
                yield engine
