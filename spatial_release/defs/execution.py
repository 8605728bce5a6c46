"""Run one programme's release in this process, as the UI and its sensors would: the release job (the
candidate and its blocking checks), then, if it succeeded, the publish job for the same partition, acting
for that candidate run. The command line and the tests call this."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import dagster as dg

from spatial_release.defs.alerts import alert_failed_run
from spatial_release.defs.catalogue import ProgrammeDefs
from spatial_release.defs.partitions import add_partition, period_of
from spatial_release.defs.release import CANDIDATE_TAG


@dataclass(frozen=True)
class ReleaseRun:
    """The two runs of one release; the publish run is None when the candidate was blocked. `alerts`: the
    delivery of each failed run's alert (one line each)."""

    candidate: dg.ExecuteInProcessResult
    publish: dg.ExecuteInProcessResult | None
    alerts: tuple[str, ...] = ()

    @property
    def results(self) -> list[dg.ExecuteInProcessResult]:
        return [r for r in (self.candidate, self.publish) if r is not None]

    @property
    def published(self) -> bool:
        """Whether the publish run wrote the release (it writes nothing for a period another run published
        between the two runs)."""
        return self.publish is not None and any(
            e.asset_key is not None and e.asset_key.path[-1] == "published_release"
            for e in self.publish.get_asset_materialization_events()
        )

    @property
    def success(self) -> bool:
        return self.candidate.success and self.publish is not None and self.publish.success and self.published

    @property
    def all_events(self) -> list:
        return [e for r in self.results for e in r.all_events]

    def get_asset_check_evaluations(self) -> list:
        return [e for r in self.results for e in r.get_asset_check_evaluations()]

    def get_asset_materialization_events(self) -> list:
        return [e for r in self.results for e in r.get_asset_materialization_events()]


class _FirstLineOfErrors(logging.Formatter):
    """Dagster's console logger appends a failed step's error and its Python stack ("Stack Trace:") to the
    event's line. The command line names every failure itself, in one line (cli._failures), so an error
    record keeps its first line here: the full error stays in the run's event log (and --debug prints it)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record)
        return text.split("\n", 1)[0] if record.levelno >= logging.ERROR or record.exc_info else text


@dg.logger(
    dg.colored_console_logger.config_schema,
    description="Dagster's console logger with each error record cut to its first line (no stack).",
)
def one_line_console_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = dg.colored_console_logger.logger_fn(init_context)
    for handler in logger.handlers:
        handler.setFormatter(_FirstLineOfErrors(handler.formatter))
    return logger


def environment_instance() -> dg.DagsterInstance:
    """With DAGSTER_HOME set, runs land in that instance and show in the UI; otherwise they are ephemeral."""
    return dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()


def execute_release(
    programme: ProgrammeDefs,
    partition_key: str,
    settings: dict,
    counting: dict | None = None,
    instance: dg.DagsterInstance | None = None,
    log_level: str = "INFO",
    tracebacks: bool = False,
) -> ReleaseRun:
    """Run the release job of `programme` for one partition, then its publish job if the candidate passed.

    settings / counting: config of the `settings` and `counting` resources (ReleaseSettings, CountingEngine).
    tracebacks: print each failed step's error with its stack on the console (the command line's --debug);
    otherwise its first line only. The partition is a period label of the programme's cadence (else a
    PeriodError); it is added to the programme's partitions in `instance` if it is not one yet (its bounds
    are the caller's to check: cli.run_release, the schedule)."""
    instance = instance or dg.DagsterInstance.ephemeral()
    period = period_of(partition_key)
    programme.programme.policy.check_period(period)  # a month of a quarterly programme is none of its periods
    add_partition(instance, programme.programme, period)
    defs = programme.runnable()
    if not tracebacks:
        defs = dg.Definitions.merge(defs, dg.Definitions(loggers={"console": one_line_console_logger}))
    run_config = {
        "resources": {"settings": {"config": settings}, "counting": {"config": counting or {}}},
        "loggers": {"console": {"config": {"log_level": log_level}}},
    }
    names = programme.programme
    candidate = defs.resolve_job_def(names.name("release_job")).execute_in_process(
        partition_key=partition_key, instance=instance, raise_on_error=False, run_config=run_config
    )
    if not candidate.success:
        return ReleaseRun(candidate, None, _alert(instance, candidate, programme))
    publish = defs.resolve_job_def(names.name("publish_job")).execute_in_process(
        partition_key=partition_key,
        instance=instance,
        raise_on_error=False,
        run_config=run_config,
        tags={CANDIDATE_TAG: candidate.run_id},
    )
    return ReleaseRun(candidate, publish, () if publish.success else _alert(instance, publish, programme))


def _alert(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult, programme: ProgrammeDefs) -> tuple[str, ...]:
    """A run executed here has no code-location origin, so the daemon's run-failure sensor never sees it:
    its alert is delivered here, exactly as the sensor would (and tagged on the run)."""
    run = instance.get_run_by_id(result.run_id)
    assert run is not None, "the run was executed in this instance"
    return (alert_failed_run(instance, run, programme.programme),)
