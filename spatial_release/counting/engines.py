"""The SQL engines the counting step runs on: DuckDB on one machine (the default) or Apache Spark.

Both run the same SQL text (see `counting.plan`); the few spellings that differ live in a `Dialect`.
An engine only needs to: read the validated pings, take small frames from Python (dictionaries, exact
assignments), materialise intermediate tables, and hand back small results or an exported table.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import duckdb
import pandas as pd
import pyarrow as pa


class Dialect(Protocol):
    def epoch_us(self, ts: str) -> str: ...
    def int_div(self, a: str, b: str) -> str: ...
    def array_at(self, values: Sequence[int], index_1based: str) -> str: ...


class DuckDBDialect:
    def epoch_us(self, ts: str) -> str:
        return f"epoch_us({ts})"

    def int_div(self, a: str, b: str) -> str:
        return f"(({a}) // ({b}))"

    def array_at(self, values: Sequence[int], index_1based: str) -> str:
        return f"([{', '.join(map(str, values))}])[{index_1based}]"


class SparkDialect:
    def epoch_us(self, ts: str) -> str:
        return f"unix_micros({ts})"

    def int_div(self, a: str, b: str) -> str:
        return f"(({a}) div ({b}))"

    def array_at(self, values: Sequence[int], index_1based: str) -> str:
        # try_element_at: NULL (not an error) outside the array, like DuckDB's list indexing
        return f"try_element_at(array({', '.join(map(str, values))}), CAST({index_1based} AS INT))"


class Engine(Protocol):
    name: str

    @property
    def dialect(self) -> Dialect: ...  # read-only here, so each engine's own dialect class satisfies it

    def register_parquet(self, name: str, paths: Sequence[Path]) -> None: ...
    def register_frame(self, name: str, frame: pd.DataFrame) -> None: ...
    def materialize(self, name: str, sql: str) -> None: ...
    def view(self, name: str, sql: str) -> None: ...
    def fetch(self, sql: str) -> pd.DataFrame: ...
    def export(self, name: str, sql: str) -> str:
        """Make the query's result readable by a DuckDB connection from `finisher()`; returns a FROM item."""
        ...

    def finisher(self) -> duckdb.DuckDBPyConnection: ...
    def describe(self) -> dict: ...
    def close(self) -> None: ...


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass
class DuckDBSettings:
    """memory_limit like '2GB' (None: DuckDB's default, 80 % of RAM); past it DuckDB spills to temp_directory."""

    memory_limit: str | None = None
    threads: int | None = None
    temp_directory: Path | None = None


class DuckDBEngine:
    name = "duckdb"

    def __init__(self, settings: DuckDBSettings | None = None, scratch: Path | None = None):
        self.settings = settings or DuckDBSettings()
        self.dialect = DuckDBDialect()
        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")
        # insertion order is never relied on here; dropping it lets big COPYs and joins stream and spill
        self.con.execute("SET preserve_insertion_order = false")
        if self.settings.memory_limit:
            self.con.execute(f"SET memory_limit = {_lit(self.settings.memory_limit)}")
        if self.settings.threads:
            self.con.execute(f"SET threads = {int(self.settings.threads)}")
        temp = self.settings.temp_directory or scratch
        if temp is not None:
            Path(temp).mkdir(parents=True, exist_ok=True)
            self.con.execute(f"SET temp_directory = {_lit(str(temp))}")

    def register_parquet(self, name: str, paths: Sequence[Path]) -> None:
        files = "[" + ", ".join(_lit(str(p)) for p in paths) + "]"
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM read_parquet({files})")

    def register_frame(self, name: str, frame: pd.DataFrame | pa.Table) -> None:
        """A table of the frame's rows (pandas or Arrow), copied in so later queries scan it in parallel."""
        self._drop(name)
        self.con.register(f"{name}_frame", frame)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {name}_frame")
        self.con.unregister(f"{name}_frame")

    def _drop(self, name: str) -> None:
        """Whatever holds the name, table or view (an Arrow view cannot be replaced by a table, nor the
        reverse), so that one engine can count twice."""
        kind = self.con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = ?", [name]).fetchall()
        for (table_type,) in kind:
            if table_type == "VIEW":
                self.con.unregister(name)  # an Arrow view: the connection's own reference to the arrays too
                self.con.execute(f"DROP VIEW IF EXISTS {name}")
            else:
                self.con.execute(f"DROP TABLE IF EXISTS {name}")

    def register_arrow_view(self, name: str, table: pa.Table, batch_rows: int = 1 << 20) -> None:
        """A view of an Arrow table, without copying it; in batches, which DuckDB scans in parallel. The
        engine keeps the table alive until it is closed."""
        self._drop(name)
        self.con.register(name, pa.Table.from_batches(table.to_batches(max_chunksize=batch_rows), table.schema))

    def materialize(self, name: str, sql: str) -> None:
        self._drop(name)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")

    def view(self, name: str, sql: str) -> None:
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {sql}")

    def fetch(self, sql: str) -> pd.DataFrame:
        return self.con.execute(sql).df()

    def export(self, name: str, sql: str) -> str:
        return f"({sql})"

    def finisher(self) -> duckdb.DuckDBPyConnection:
        return self.con

    def describe(self) -> dict:
        row = self.con.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchone()
        assert row is not None  # a SELECT without FROM returns one row
        memory, threads = row
        return {"engine": self.name, "memory_limit": memory, "threads": int(threads)}

    def close(self) -> None:
        self.con.close()


_SPARK_TYPES = {
    "int64": "bigint",
    "int32": "int",
    "float64": "double",
    "object": "string",
    "str": "string",
    "string": "string",
    "bool": "boolean",
}


@dataclass
class SparkSettings:
    """master: 'local[*]' for one machine, 'spark://host:7077' (or 'yarn', 'k8s://...') for a cluster."""

    master: str = "local[*]"
    app_name: str = "spatial-release-counting"
    conf: dict[str, str] = field(default_factory=dict)
    shuffle_partitions: int = 8


@contextmanager
def _quiet_pandas_notes() -> Iterator[None]:
    """PySpark 4.3 warns on every pandas conversion that it does not 'fully support' pandas 3; the conversions
    used here (numbers, strings) are covered by the Spark-vs-DuckDB equality tests, so the notes are muted."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\.")
        warnings.filterwarnings("ignore", message=r".*copy keyword is deprecated.*")
        yield


# What this process asked of the Spark context it started last: Spark rewrites some settings as it starts
# (it puts its own JVM options before spark.*.extraJavaOptions), so the running context's settings cannot
# be compared with the request itself.
_requested: dict[int, tuple[str, dict[str, str]]] = {}


def _stop_session_elsewhere(settings: SparkSettings) -> None:
    """Stops this process's Spark session if it runs on another master or with other settings: getOrCreate()
    would hand it back unchanged (a cluster run in a process that had a local[*] session would run locally).
    A context this module started with the same request is kept: the counting step and each later step's
    tasks share one application instead of starting a new one each."""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    if running is None:
        return
    if _requested.get(id(running)) == (settings.master, settings.conf):
        return
    conf = running.getConf()
    if running.master != settings.master or any(conf.get(k) != v for k, v in settings.conf.items()):
        running.stop()  # the stale session object is replaced by the next getOrCreate()


def spark_session(settings: SparkSettings) -> Any:
    """This process's SparkSession on `settings.master`: the running one when it matches, else a new one
    (the counting engine and the runner of protection's, the audit's and the risk estimate's tasks share it)."""
    from pyspark.sql import SparkSession  # imported here: Spark is optional at run time

    _stop_session_elsewhere(settings)
    builder = (
        SparkSession.builder.master(settings.master)
        .appName(settings.app_name)
        .config("spark.sql.session.timeZone", "UTC")
        # Owner-only scratch files (0600, folders 0700) on every executor, whatever the umask of
        # the cluster's workers: Hadoop's file systems apply this umask, not the process's.
        .config("spark.hadoop.fs.permissions.umask-mode", "077")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if settings.master.startswith("local"):
        # Python workers on this machine run this interpreter (its environment): the job functions of
        # `spatial_release.tasks` need its libraries, and the `python3` PySpark defaults to may have none of
        # them. PySpark reads the variable (not the spark.pyspark.python setting) when the context starts.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in settings.conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _requested.clear()
    _requested[id(spark.sparkContext)] = (settings.master, dict(settings.conf))
    return spark


class SparkEngine:
    """Runs the counting SQL through PySpark. Intermediate tables are written as Parquet in a scratch folder
    that the Spark executors can reach (on a cluster: a shared path given as `scratch`)."""

    name = "spark"

    def __init__(self, settings: SparkSettings | None = None, scratch: Path | None = None):
        self.settings = settings or SparkSettings()
        self.dialect = SparkDialect()
        self._own_scratch = scratch is None
        self.scratch = Path(scratch or tempfile.mkdtemp(prefix="spark-counting-"))
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.spark = spark_session(self.settings)
        self._duck: duckdb.DuckDBPyConnection | None = None

    def register_parquet(self, name: str, paths: Sequence[Path]) -> None:
        self.spark.read.parquet(*[str(p) for p in paths]).createOrReplaceTempView(name)

    def register_frame(self, name: str, frame: pd.DataFrame) -> None:
        schema = ", ".join(f"`{c}` {_SPARK_TYPES[str(t)]}" for c, t in frame.dtypes.items())
        with _quiet_pandas_notes():
            self.spark.createDataFrame(frame, schema=schema).createOrReplaceTempView(name)

    def materialize(self, name: str, sql: str) -> None:
        path = self.scratch / name
        self.spark.sql(sql).write.mode("overwrite").parquet(str(path))
        self.spark.read.parquet(str(path)).createOrReplaceTempView(name)

    def view(self, name: str, sql: str) -> None:
        self.spark.sql(sql).createOrReplaceTempView(name)

    def fetch(self, sql: str) -> pd.DataFrame:
        with _quiet_pandas_notes():
            return self.spark.sql(sql).toPandas()

    def export(self, name: str, sql: str) -> str:
        path = self.scratch / f"export_{name}"
        self.spark.sql(sql).write.mode("overwrite").parquet(str(path))
        return f"read_parquet({_lit(str(path / '*.parquet'))})"

    def describe(self) -> dict:
        return {"engine": self.name, "master": self.spark.sparkContext.master, "version": self.spark.version}

    def finisher(self) -> duckdb.DuckDBPyConnection:
        if self._duck is None:
            self._duck = duckdb.connect()
            self._duck.execute("SET TimeZone = 'UTC'")
        return self._duck

    def close(self) -> None:
        if self._duck is not None:
            self._duck.close()
        # the session is kept: starting a JVM costs seconds, and getOrCreate() hands the same one back
        if self._own_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


@contextmanager
def open_engine(
    kind: str = "duckdb",
    scratch: Path | None = None,
    duckdb_settings: DuckDBSettings | None = None,
    spark_settings: SparkSettings | None = None,
) -> Iterator[Engine]:
    if kind == "duckdb":
        engine: Engine = DuckDBEngine(duckdb_settings, scratch)
    elif kind == "spark":
        engine = SparkEngine(spark_settings, scratch)
    else:
        raise ValueError(f"counting engine {kind!r} is not one of 'duckdb', 'spark'")
    try:
        yield engine
    finally:
        engine.close()
