"""Where things live: the policy, the trace files, the release, work and ledger folders.

Defaults point at the embedded demo (policies/demo.yaml, synthetic traces) inside the project folder, so
`dagster dev` and the schedule work out of the box; each can be set per run or by environment variable. The
environment is read when a resource is built (each default is a factory), never when this module is imported.
"""


import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from pydantic import Field

from spatial_release.counting.engines import DuckDBSettings, Engine, SparkSettings, open_engine
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import Policy, load_policy
from spatial_release.stages import Published, ReleaseContext, WorkArea

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _env(name: str, default: str | None = None) -> Callable[[], str | None]:
    """A default read from the environment when the resource is built."""
    return lambda: os.environ.get(name, default)


def _project(env: str, relative: str) -> Callable[[], str]:
    return _env(env, str(PROJECT_ROOT / relative))


class ReleaseSettings(dg.ConfigurableResource):
    policy: str = Field(default_factory=_project("SPATIAL_RELEASE_POLICY", "policies/demo.yaml"))
    traces: list[str] = []
    releases_dir: str = Field(default_factory=_project("SPATIAL_RELEASE_RELEASES", "releases"))
    work_dir: str = Field(default_factory=_project("SPATIAL_RELEASE_WORK", "work"))
    ledger_dir: str = Field(default_factory=_project("SPATIAL_RELEASE_LEDGER", "ledger"))
    alerts_dir: str = Field(default_factory=_project("SPATIAL_RELEASE_ALERTS", "alerts"))

    def load_policy(self) -> Policy:
        return load_policy(self.policy)

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
    ('local[*]', or a cluster URL such as 'spark://host:7077'). Suppression, audit and risk always run here,
    on the aggregated tables. Both engines give identical counts (a test compares them row for row)."""

    engine: str = Field(default_factory=_env("SPATIAL_RELEASE_ENGINE", "duckdb"))
    duckdb_memory_limit: str | None = Field(default_factory=_env("SPATIAL_RELEASE_DUCKDB_MEMORY_LIMIT"))
    duckdb_threads: int | None = Field(default_factory=_env_int("SPATIAL_RELEASE_DUCKDB_THREADS"))
    spark_master: str = Field(default_factory=_env("SPARK_MASTER", "local[*]"))
    spark_conf: dict[str, str] = {}
    # On a cluster, intermediate tables must be on storage every executor reaches (HDFS, S3, a shared mount).
    scratch_dir: str | None = Field(default_factory=_env("SPATIAL_RELEASE_SPARK_SCRATCH"))

    @contextmanager
    def open(self, area: WorkArea) -> Iterator[Engine]:
        if self.engine == "spark":
            scratch = Path(self.scratch_dir) / area.root.name if self.scratch_dir else area.counts / "spark"
            settings = SparkSettings(master=self.spark_master, conf=dict(self.spark_conf))
            with open_engine("spark", scratch=scratch, spark_settings=settings) as engine:
                yield engine
        else:
            settings = DuckDBSettings(memory_limit=self.duckdb_memory_limit, threads=self.duckdb_threads)
            with open_engine(self.engine, scratch=area.counts / "spill", duckdb_settings=settings) as engine:
                yield engine
