"""Where a step's independent jobs run: worker processes on this machine, or tasks on a Spark cluster.

Protection's chunks of independent blocks (`suppression.blocks`), the audit's packs of components
(`suppression.audit`, which the certificate's verification also calls for what it cannot certify) and the
risk estimator's chunks of knowledge sets are independent jobs whose results the caller merges in job
order. Each caller asks `current()` for the runner of this context and maps its job function over its jobs:

- `LocalProcesses(workers)`: a process pool on this machine (the default).
- `SparkTasks(spark)`: each chunk of jobs is one Spark task on the cluster's executors. Several Spark jobs run
  at once from driver threads (one per executor core), so a slow chunk does not hold the others back, and
  at most 2 x that many chunks are pending, so the driver never holds every job's input at once.

The runner never changes a result: jobs are formed from the table alone (never from the number of workers or
executors) and merged in job order, so the outputs are byte-identical whatever runs them
(tests/test_spark_cluster.py compares a whole release on a standalone cluster with the local one).

A Spark executor runs this package's job functions, so it must run the same code and the same libraries as
the driver: `SparkTasks` compares the executors' code digest with the driver's before the first job and refuses
a cluster that differs (a different solver version could withhold other figures). Every task reports the
digest again, with its results, and a chunk run by other code is refused, not merged: the first check reaches
only the executors its probe tasks land on, an executor that replaces a dead one or joins later is never
probed, and a module imported after the files on an executor's path changed runs other code under the digest
taken at import (`codeversion.current_digest` is None there).

`running_on(runner)` sets the runner for a block of code (the Dagster steps and the command line do it for
`--engine spark`); a notebook can do the same:

    with tasks.running_on(tasks.SparkTasks(spark)):
        stages.run_protect(ctx)
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from itertools import islice
from typing import Any, Generic, Protocol, TypeVar

from spatial_release.errors import Blocked

J = TypeVar("J")
R = TypeVar("R")

# modules a fork server imports once, before forking the workers (the job functions live there; the trajectory
# recovery's, `in_own_process`, too)
PRELOAD = ("spatial_release.suppression.audit", "spatial_release.suppression.blocks", "spatial_release.risk.attack")


class Runner(Protocol):
    name: str

    @property
    def slots(self) -> int:
        """How many jobs run at once."""
        ...

    def map(self, fn: Callable[[J], R], jobs: Iterable[J], chunksize: int = 1) -> Iterator[R]:
        """fn(job) of every job, in job order; `chunksize` jobs travel together."""
        ...


_current: ContextVar[Runner | None] = ContextVar("spatial_release_runner", default=None)


def current() -> Runner | None:
    """The runner set by `running_on` for this context; None: the caller's local default."""
    return _current.get()


@contextmanager
def running_on(runner: Runner | None) -> Iterator[Runner | None]:
    token = _current.set(runner)
    try:
        yield runner
    finally:
        _current.reset(token)


def pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes. A single-threaded caller (a script, a notebook, the benchmark) forks: cheap, and a
    script without a `__main__` guard keeps working. A threaded one (a Dagster run) uses a fork server, so
    no worker is forked from a process whose other threads may hold locks; there, as for any spawned
    worker, the main module is imported again and must guard its entry point (Dagster's and the command
    line's do)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=_process_context())


def _process_context() -> Any:
    """Fork for a caller on the process's only thread, else a fork server (`pool`'s rule)."""
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # read when the fork server starts, by whichever caller is first
    return context


def _chunked(jobs: Iterable[J], size: int) -> Iterator[list[J]]:
    it = iter(jobs)
    while chunk := list(islice(it, max(1, size))):
        yield chunk


def _apply(fn: Callable[[J], R], chunk: Sequence[J]) -> list[tuple[str, Any]]:
    """fn over a chunk, where it runs; a refusal (`Blocked`: a suppression error, a gate) comes back as a
    value and is raised again by the caller as itself (a pool or Spark would wrap it in its own error, and
    the command line and the alerts read a failed step's kind from it)."""
    out: list[tuple[str, Any]] = []
    for job in chunk:
        try:
            out.append(("ok", fn(job)))
        except Blocked as refusal:
            refusal.__cause__ = refusal.__context__ = None
            refusal.__traceback__ = None
            out.append(("refused", refusal))
    return out


def _unwrap(results: list[tuple[str, Any]]) -> Iterator[Any]:
    for kind, value in results:
        if kind == "refused":
            raise value
        yield value


def _in_order(submit: Callable[[list], Future], jobs: Iterable, chunksize: int, pending_max: int) -> Iterator:
    """Submit chunks of jobs, at most `pending_max` pending, and yield their results in job order."""
    pending: deque[Future] = deque()
    for chunk in _chunked(jobs, chunksize):
        pending.append(submit(chunk))
        if len(pending) >= pending_max:
            yield from _unwrap(pending.popleft().result())
    while pending:
        yield from _unwrap(pending.popleft().result())


class LocalProcesses:
    """`workers` processes on this machine (a fork, or a fork server from a threaded caller)."""

    name = "local"

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))

    @property
    def slots(self) -> int:
        return self.workers

    def map(self, fn: Callable[[J], R], jobs: Iterable[J], chunksize: int = 1) -> Iterator[R]:
        if self.workers <= 1:
            for job in jobs:
                yield fn(job)
            return
        with pool(self.workers) as executor:
            yield from _in_order(lambda chunk: executor.submit(_apply, fn, chunk), jobs, chunksize, 2 * self.workers)


class ExecutorMismatch(RuntimeError):
    """The Spark executors run other code or other libraries than the driver."""


class SparkTaskFailed(RuntimeError):
    """A Spark task of a step failed on every attempt Spark made: its executor or Python worker died, ran out
    of memory, or the job raised something other than a refusal."""


def _spark_reason(error: BaseException) -> str:
    """Spark's one-line reason for a failed job: the stage failure with its last attempt's cause (without the
    JVM's stack, which follows on the next lines of a Py4J error), or the last line of a job's Python
    traceback, which is its error."""
    lines = [line.strip(" :") for line in str(error).splitlines() if line.strip(" :")]
    aborted = next((line for line in lines if "Job aborted" in line), None)
    if aborted is not None:
        return aborted.split(" Consider setting")[0]
    return lines[-1] if lines else type(error).__name__


def _executor_digest(_: object) -> str | None:
    from spatial_release.codeversion import current_digest

    return current_digest()


def _apply_reporting_digest(fn: Callable[[J], R], chunk: Sequence[J]) -> tuple[str | None, list[tuple[str, Any]]]:
    """`_apply` on an executor, with the digest of the code that ran it (taken after the jobs: a module the
    jobs imported lazily is on disk by then)."""
    results = _apply(fn, chunk)
    return _executor_digest(None), results


def job_group(fn: Callable) -> str:
    """The Spark job group of `fn`'s tasks: `spatial_release:<module>.<function>`."""
    return f"spatial_release:{fn.__module__}.{fn.__qualname__}"


def _with_shared(fn: Callable, shared: Any, job: Any) -> Any:
    return fn(shared.value, job)


class SparkTasks:
    """Jobs as tasks on the executors of a running SparkSession (`spark`): one task per chunk of jobs,
    `slots` (default: the application's default parallelism, its executors' cores) chunks running at once."""

    name = "spark"

    def __init__(self, spark: Any, slots: int | None = None):
        self.spark = spark
        self._slots = slots
        self._checked = False

    @property
    def slots(self) -> int:
        if self._slots is None:
            self._slots = max(1, int(self.spark.sparkContext.defaultParallelism))
        return self._slots

    @property
    def master(self) -> str:
        return str(self.spark.sparkContext.master)

    def check_executors(self) -> None:
        """Refuse executors whose package files or libraries differ from the driver's: their solver could
        withhold other figures than this machine's, and the release would depend on where it ran."""
        context = self.spark.sparkContext
        try:
            found = set(context.parallelize(range(self.slots), self.slots).map(_executor_digest).collect())
        except Exception as error:  # noqa: BLE001 - PySpark wraps the executors' errors in its own types
            if "No module named 'spatial_release'" not in str(error):
                raise
            raise ExecutorMismatch(
                f"the Spark executors of {self.master} cannot import spatial_release: their Python "
                f"({context.pythonExec}, from PYSPARK_PYTHON or spark.pyspark.python of this driver) is not an "
                "environment with this package; install it there, or point PYSPARK_PYTHON at one (e.g. a venv "
                "shipped with spark.archives)"
            ) from None
        self._refuse_other_code(found)
        self._checked = True

    def _refuse_other_code(self, found: set[str | None], where: str = "") -> None:
        from spatial_release.codeversion import CODE_DIGEST

        if found != {CODE_DIGEST}:
            digests = sorted(d[:12] if d else "changed on disk since import" for d in found)
            raise ExecutorMismatch(
                f"the Spark executors of {self.master} run other code than this driver{where} (code digests "
                f"{digests} against {CODE_DIGEST[:12]}; their Python: {self.spark.sparkContext.pythonExec}, from "
                "PYSPARK_PYTHON or spark.pyspark.python of this driver): install the same spatial_release "
                "version and the same numpy, pandas, pyarrow, duckdb, highspy, numba, shapely, pyproj and geopandas "
                "on every executor (e.g. ship this environment with spark.archives), and do not change them while "
                "a release runs"
            )

    def _run(self, fn: Callable, chunk: list, group: str) -> list[tuple[str, Any]]:
        context = self.spark.sparkContext
        # the Spark UI and the status tracker show which step's jobs these are (job groups are per thread)
        context.setJobGroup(group, f"{len(chunk)} job(s) of {group}")
        try:
            digest, results = (
                context.parallelize([chunk], 1).map(lambda jobs: _apply_reporting_digest(fn, jobs)).collect()[0]
            )
        except Exception as error:  # noqa: BLE001 - PySpark raises Py4J's and its own types
            # raised in its context, not from it: the command line and the alert name a failed step by its
            # innermost cause, and a Py4J error's says only which JVM method was called
            raise SparkTaskFailed(  # noqa: B904
                f"a Spark task of {group} ({len(chunk)} job(s)) failed on {self.master} and Spark gave up "
                f"retrying it: {_spark_reason(error)}"
            )
        self._refuse_other_code({digest}, f" in a task of {group}")
        return results

    def map(self, fn: Callable[[J], R], jobs: Iterable[J], chunksize: int = 1, group: str | None = None) -> Iterator[R]:
        """As `Runner.map`; the tasks go to the job group `group` (default `job_group(fn)`)."""
        if not self._checked:
            self.check_executors()
        group = group or job_group(fn)
        with ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="spark-tasks") as threads:
            yield from _in_order(lambda chunk: threads.submit(self._run, fn, chunk, group), jobs, chunksize, 2 * self.slots)

    def map_shared(self, fn: Callable[[Any, J], R], shared: Any, jobs: Iterable[J], chunksize: int = 1) -> Iterator[R]:
        """fn(shared, job) of every job, in job order: `shared` (the arrays every job reads: a risk estimate's
        key sets) goes to each executor once, as a Spark broadcast, and is destroyed afterwards."""
        broadcast = self.spark.sparkContext.broadcast(shared)
        try:
            yield from self.map(partial(_with_shared, fn, broadcast), jobs, chunksize, group=job_group(fn))
        finally:
            broadcast.destroy()


def spark_tasks() -> SparkTasks | None:
    """The context's runner when it is Spark: the risk estimate's chunks share large arrays, which local
    threads read in place and only Spark is worth shipping them to."""
    runner = current()
    return runner if isinstance(runner, SparkTasks) else None


def slots(local: int) -> int:
    """How many jobs run at once: the context's runner's slots, else `local` (the caller's local default)."""
    runner = current()
    return runner.slots if runner is not None else local


def runner_for(workers: int) -> Runner | None:
    """None when `workers` <= 1 (the caller runs in place: too little work to ship, or one worker asked
    for); else the context's runner, or `workers` local processes."""
    if workers <= 1:
        return None
    return current() or LocalProcesses(workers)


class JobStopped(RuntimeError):
    """A job run in its own process (`in_own_process`) was stopped before it ended: its process was ended."""


class JobProcessEnded(RuntimeError):
    """A job's own process ended without sending a result (killed by a signal, out of memory)."""


def in_own_process(fn: Callable[..., R], *args: Any, stop: threading.Event | None = None, name: str = "job") -> R:
    """fn(*args) in a process of its own, its result or its error sent back (`start_in_own_process`). For one
    long job that holds the interpreter lock (a native solver's call) beside threads that need it: in a thread it
    stalled them, in a process it runs on its own core. `stop`, when set, ends the process at once (JobStopped).
    The result travels pickled through a pipe: meant for arrays, not for objects holding open files or locks."""
    return start_in_own_process(fn, *args, stop=stop, name=name).result()


def start_in_own_process(
    fn: Callable[..., R], *args: Any, stop: threading.Event | None = None, name: str = "job"
) -> OwnProcess[R]:
    """Start fn(*args) in a process of its own and return at once; `OwnProcess.result` waits for it. A caller
    on the process's only thread (a script, a notebook) forks, as `pool` does: a script without a `__main__`
    guard keeps working, and the arguments are not pickled. Otherwise (a Dagster run, the caller a thread) the
    process is a fork server's child, whose arguments travel pickled and which imports the main module again."""
    context = _process_context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_run_and_send, args=(sender, fn, args), name=name, daemon=True)
    process.start()
    sender.close()  # the child holds the sending end: a child that dies closes it, and the poll below sees it
    return OwnProcess(process, receiver, name, stop)


class OwnProcess(Generic[R]):
    """A job running in a process of its own (`start_in_own_process`)."""

    def __init__(self, process: Any, receiver: Any, name: str, stop: threading.Event | None):
        self._process, self._receiver, self._name, self._stop = process, receiver, name, stop

    def result(self) -> R:
        """The job's result, or its error raised as itself; JobStopped when `stop` was set first, JobProcessEnded
        when the process ended without sending one. The process is ended and reaped either way."""
        try:
            while not self._receiver.poll(0.2):
                if self._stop is not None and self._stop.is_set():
                    raise JobStopped(f"{self._name}: stopped")
            try:
                kind, value = self._receiver.recv()
            except EOFError:
                self._process.join()
                code = self._process.exitcode
                raise JobProcessEnded(f"{self._name}: its process ended with exit code {code} and no result") from None
        finally:
            self.close()
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        """End the process if it still runs (its result no longer wanted), and reap it."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._receiver.close()


def _run_and_send(sender: Any, fn: Callable[..., Any], args: tuple) -> None:
    try:
        result: tuple[str, Any] = ("ok", fn(*args))
    except BaseException as error:  # noqa: BLE001 - the caller raises it as itself
        error.__traceback__ = None
        result = ("error", error)
    sender.send(result)
    sender.close()
