"""Spies on the package and small drivers of its Dagster definitions, for tests that show which path ran."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    import dagster as dg

P = ParamSpec("P")
R = TypeVar("R")


def spy_packing(monkeypatch) -> list:
    """Records what the counting step's `packing_for` decided in each count (None: an SQL path), so a test
    can show that the packed path (spatial_release/counting/packed.py) did run, or did not."""
    from spatial_release.counting import counts as counts_module

    decided = []
    real = counts_module.packing_for

    def spy(*args):
        decided.append(real(*args))
        return decided[-1]

    monkeypatch.setattr(counts_module, "packing_for", spy)
    return decided


def counted(real: Callable[P, R], calls: list[int]) -> Callable[P, R]:
    """`real`, appending 1 to `calls` each time it is called: shows whether a step ran, and how often."""

    def spy(*args: P.args, **kwargs: P.kwargs) -> R:
        calls.append(1)
        return real(*args, **kwargs)

    return spy


def period_sensor_keys(defs, prefix: str, instance: Any = None) -> list[str]:
    """The periods the programme's period sensor adds as partitions in `instance` (a fresh one by default),
    added there as the daemon would."""
    import dagster as dg

    instance = instance or dg.DagsterInstance.ephemeral()
    result = defs.resolve_sensor_def(f"{prefix}_period_sensor")(dg.build_sensor_context(instance=instance, definitions=defs))
    added = [key for request in result.dynamic_partitions_requests for key in request.partition_keys]
    if added:
        instance.add_dynamic_partitions(f"{prefix}_periods", added)
    return added


def stored_run(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun:
    """The run `run_id` as `instance` stores it: a run the test launched there, so it is found."""
    run = instance.get_run_by_id(run_id)
    assert run is not None, run_id
    return run


def run_failure_context(instance: dg.DagsterInstance, run_id: str) -> dg.RunFailureSensorContext:
    """What Dagster hands the programme's run-failure sensor (`failed_run_alert`) for the failed run `run_id`."""
    import dagster as dg

    [event] = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert event.dagster_event is not None
    return dg.build_run_status_sensor_context(
        sensor_name="failed_run_alert",
        dagster_instance=instance,
        dagster_run=stored_run(instance, run_id),
        dagster_event=event.dagster_event,
    ).for_run_failure()
