"""Run one programme's release in this process, as the UI and its sensors would: the release job (the
candidate and its blocking checks), then, if it succeeded, the publish job for the same partition, acting
for that candidate run. The command line and the tests call this."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from spatial_release.defs.alerts import alert_failed_run
from spatial_release.defs.catalogue import ProgrammeDefs
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
            e.asset_key.path[-1] == "published_release" for e in self.publish.get_asset_materialization_events())

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


def execute_release(programme: ProgrammeDefs, partition_key: str, settings: dict, counting: dict | None = None,
                    instance: dg.DagsterInstance | None = None, log_level: str = "INFO") -> ReleaseRun:
    """Run the release job of `programme` for one partition, then its publish job if the candidate passed.

    settings / counting: config of the `settings` and `counting` resources (ReleaseSettings, CountingEngine).
    Raises dg.DagsterUnknownPartitionError for a partition outside the programme's partitions."""
    instance = instance or dg.DagsterInstance.ephemeral()
    defs = programme.runnable()
    run_config = {"resources": {"settings": {"config": settings}, "counting": {"config": counting or {}}},
                  "loggers": {"console": {"config": {"log_level": log_level}}}}
    names = programme.programme
    candidate = defs.resolve_job_def(names.name("release_job")).execute_in_process(
        partition_key=partition_key, instance=instance, raise_on_error=False, run_config=run_config)
    if not candidate.success:
        return ReleaseRun(candidate, None, _alert(instance, candidate, programme))
    publish = defs.resolve_job_def(names.name("publish_job")).execute_in_process(
        partition_key=partition_key, instance=instance, raise_on_error=False, run_config=run_config,
        tags={CANDIDATE_TAG: candidate.run_id})
    return ReleaseRun(candidate, publish, () if publish.success else _alert(instance, publish, programme))


def _alert(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult, programme: ProgrammeDefs
           ) -> tuple[str, ...]:
    """A run executed here has no code-location origin, so the daemon's run-failure sensor never sees it:
    its alert is delivered here, exactly as the sensor would (and tagged on the run)."""
    return (alert_failed_run(instance, instance.get_run_by_id(result.run_id), programme.programme),)
