"""Where independent jobs run (`spatial_release.tasks`): results in job order whatever the runner, a refusal
raised in a worker comes back as itself, and a Spark cluster whose executors run other code is refused.

The Spark runner is exercised here on a stand-in for a SparkSession that runs each task in this process
through pickle (as Spark ships a task), so these tests need no Java; tests/test_spark_cluster.py runs a whole
release on a real standalone cluster and compares it byte for byte with the local one."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest

from spatial_release import tasks
from spatial_release.codeversion import CODE_DIGEST
from spatial_release.errors import Blocked
from spatial_release.suppression.complementary import SuppressionError


def square_or_refuse(n: int) -> int:
    if n == 13:
        raise SuppressionError("figure 13 cannot be protected")
    if n == 99:
        raise ValueError("an internal error, not a refusal")
    return n * n


NO_PACKAGE = "executors without the package"


class _FakeRDD:
    def __init__(self, items, executor_digest: str | None = None):
        self.items, self.executor_digest = list(items), executor_digest
        self.fns: list[Callable[[Any], Any]] = []

    def map(self, fn):
        self.fns.append(fn)
        return self

    def collect(self):
        if self.executor_digest == NO_PACKAGE:  # what PySpark raises when the executors' Python lacks the package
            raise RuntimeError("PythonException: ModuleNotFoundError: No module named 'spatial_release'")
        if self.executor_digest is not None:  # what `_executor_digest` returns on the stand-in's executors
            return [self.executor_digest] * len(self.items)
        out = self.items
        for fn in self.fns:
            out = [pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(x))))) for x in out]
        return out


class _FakeBroadcast:
    def __init__(self, value):
        self.value, self.destroyed = value, False

    def destroy(self):
        self.destroyed = True


def offset_square(shared: dict, n: int) -> int:
    return shared["offset"] + n * n


class _FakeContext:
    """What SparkTasks uses of a SparkContext: parallelize().map().collect(), job groups, parallelism."""

    master = "spark://fake:7077"
    defaultParallelism = 3
    pythonExec = "python3"

    def __init__(self, digest: str = CODE_DIGEST):
        self.digest, self.tasks = digest, 0
        self.groups: list[str] = []

    def setJobGroup(self, group, description):
        self.groups.append(group)

    def broadcast(self, value):
        self.broadcasts = getattr(self, "broadcasts", []) + [_FakeBroadcast(value)]
        return self.broadcasts[-1]

    def parallelize(self, items, slices):
        self.tasks += 1
        items = list(items)
        if not self.groups:  # before any job group: the executors' code digest check
            return _FakeRDD(items, executor_digest=self.digest)
        return _FakeRDD(items)


class _FakeSession:
    def __init__(self, digest: str = CODE_DIGEST):
        self.sparkContext = _FakeContext(digest)


@pytest.mark.parametrize(
    "runner",
    [tasks.LocalProcesses(1), tasks.LocalProcesses(2), tasks.SparkTasks(_FakeSession())],
    ids=["in place", "two processes", "spark tasks"],
)
def test_every_runner_returns_the_results_in_job_order(runner):
    jobs = [n for n in range(40) if n != 13]
    assert list(runner.map(square_or_refuse, jobs, chunksize=3)) == [n * n for n in jobs]


def test_spark_tasks_ship_each_chunk_as_one_task_in_the_functions_job_group():
    session = _FakeSession()
    runner = tasks.SparkTasks(session)
    assert runner.slots == 3
    assert list(runner.map(square_or_refuse, range(10), chunksize=4)) == [n * n for n in range(10)]
    context = session.sparkContext
    assert context.tasks == 1 + 3  # the digest check, then chunks of 4, 4 and 2 jobs
    assert set(context.groups) == {"spatial_release:test_tasks.square_or_refuse"}


@pytest.mark.parametrize(
    "runner", [tasks.LocalProcesses(2), tasks.SparkTasks(_FakeSession())], ids=["two processes", "spark tasks"]
)
def test_a_refusal_in_a_worker_is_raised_as_itself_and_an_internal_error_is_not_hidden(runner):
    with pytest.raises(SuppressionError, match="figure 13") as refused:
        list(runner.map(square_or_refuse, [1, 2, 13, 4], chunksize=2))
    assert isinstance(refused.value, Blocked) and refused.value.__cause__ is None
    with pytest.raises(Exception, match="an internal error"):
        list(runner.map(square_or_refuse, [1, 99], chunksize=1))


def test_executors_running_other_code_are_refused_before_any_job():
    session = _FakeSession(digest="0" * 64)
    runner = tasks.SparkTasks(session)
    with pytest.raises(tasks.ExecutorMismatch, match="other code than this driver") as mismatch:
        list(runner.map(square_or_refuse, [1, 2]))
    assert "spark://fake:7077" in str(mismatch.value)
    assert "their Python: python3" in str(mismatch.value)  # an executor Python without this environment differs too
    assert session.sparkContext.groups == []  # no job of the step was shipped


def test_executors_that_cannot_import_the_package_are_refused_with_their_python_named():
    """A cluster whose Python is not this environment (PYSPARK_PYTHON unset on the driver: `python3`) gets
    a refusal that says so, not a pickling traceback from the first job."""
    session = _FakeSession(digest=NO_PACKAGE)
    with pytest.raises(tasks.ExecutorMismatch, match="cannot import spatial_release") as mismatch:
        list(tasks.SparkTasks(session).map(square_or_refuse, [1, 2]))
    assert "python3" in str(mismatch.value) and "PYSPARK_PYTHON" in str(mismatch.value)
    assert session.sparkContext.groups == []


def test_the_context_runner_replaces_local_processes_and_one_worker_runs_in_place():
    spark = tasks.SparkTasks(_FakeSession())
    assert tasks.current() is None and tasks.runner_for(1) is None
    assert isinstance(tasks.runner_for(4), tasks.LocalProcesses) and tasks.slots(7) == 7
    with tasks.running_on(spark):
        assert tasks.current() is spark and tasks.runner_for(2) is spark and tasks.slots(7) == 3
        assert tasks.runner_for(1) is None  # too little work to ship: the caller runs it in place
    assert tasks.current() is None


def test_shared_inputs_go_to_the_executors_once_and_are_destroyed_after():
    session = _FakeSession()
    runner = tasks.SparkTasks(session)
    assert list(runner.map_shared(offset_square, {"offset": 100}, range(5), chunksize=2)) == [100 + n * n for n in range(5)]
    context = session.sparkContext
    [broadcast] = context.broadcasts
    assert broadcast.destroyed
    assert set(context.groups) == {"spatial_release:test_tasks.offset_square"}  # the job's function, not a wrapper


def test_a_chunk_run_by_other_code_after_the_first_check_is_refused_not_merged(monkeypatch):
    """The first check reaches only the executors its probes land on: an executor that replaces a dead one,
    or a module edited on an executor's path after its worker imported the package, runs other code later.
    Every task reports the digest of the code that ran it, and the driver refuses a chunk whose digest differs."""
    from spatial_release import codeversion

    session = _FakeSession()
    runner = tasks.SparkTasks(session)
    assert list(runner.map(square_or_refuse, range(4), chunksize=2)) == [0, 1, 4, 9]  # checked, and equal
    monkeypatch.setattr(codeversion, "digest_of_files", lambda *a: "edited on the executor after the check")
    with pytest.raises(tasks.ExecutorMismatch, match="in a task of spatial_release:test_tasks.square_or_refuse"):
        list(runner.map(square_or_refuse, range(4), chunksize=2))
    monkeypatch.undo()
    assert list(runner.map(square_or_refuse, range(4), chunksize=2)) == [0, 1, 4, 9]  # the same code again
