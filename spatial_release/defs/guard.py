"""The publication guard. The Dagster UI offers "Report materialization events" on every programme's
published_release (Dagster cannot disable it): an operator can mark a period materialised with no release or
ledger entry behind it, and the UI then shows a false "Materialized". The guard's sensor reads every new
materialisation of it: one that no successful run of the programme's publish job logged becomes an
`unbacked_publication` alert (beside the run alerts of `defs.alerts`), and the guard's job records the check
`published_by_the_publish_job` failed on its partition. A publication reads passed: its publish run records
the check itself. A materialisation logged under a successful publish run's id is a publication of that run's
partition only. The sensor also reads the check's own evaluations: `report_runless_asset_event` takes a check
evaluation as well, so one no run of the instance executed (a period shown passing by hand) is alerted the same
way, and the guard's job records the check again from the ledger and the release folder.

Why the guard records the check in a run of its own job, not as a runless event of the sensor
(`SensorResult(asset_events=[AssetCheckEvaluation(...)])`): Dagster 1.13.27 stores a runless check evaluation
under a unique index (asset key, check, run id "", partition), so a second runless evaluation of the same
check on the same partition (a period reported by hand twice, or after its publication) raises an
IntegrityError; the daemon would fail that tick, and every later one, on the same event. A run gives each
evaluation its own run id (tests/test_publication_guard.py shows both).

(No `from __future__ import annotations` here: Dagster reads the op's config class from its annotation.)
"""

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecord
from pydantic import Field

from spatial_release import stages
from spatial_release.alerts import Alert, AlertRouting, alert_path, deliver
from spatial_release.defs.alerts import asset_link
from spatial_release.defs.check_results import check_evaluation
from spatial_release.defs.partitions import PERIOD_TAG, period_of
from spatial_release.defs.programmes import Programme
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.period import Period

GUARD_SENSOR = "publication_guard"
GUARD_JOB = "publication_guard_job"
GUARD_OP = "report_publication_check"
GUARD_TAG = "spatial_release/publication_guard"
PARTITION_TAG = "dagster/partition"  # the partition a run of a partitioned job ran
GUARD_BATCH = 100  # materialisations read per programme and tick; the rest on the next tick
# The publish job's op logs the materialisation as (nearly) its last act, so its run ends seconds later: a run
# not finished yet is read again on a later tick, and one still not finished an hour later is no successful run.
PENDING_RUN_S = 3600.0


@dataclass(frozen=True)
class Origin:
    """What reported a materialisation of published_release, in words (`by`); `published`: a successful run
    of the programme's publish job logged it; `pending`: its run has not finished yet."""

    by: str
    published: bool = False
    pending: bool = False


def origin_of(
    instance: dg.DagsterInstance, entry: dg.EventLogEntry, publish_job: str, now: float, partition: str | None = None
) -> Origin:
    """A runless event (run id "") was reported by hand: the UI's "Report materialization events" or the API.
    An event under a successful publish run's id is a publication only for the partition that run published
    (`partition`: the materialisation's): one of another period logged under its id was reported by hand."""
    if not entry.run_id:
        return Origin('by hand, without a run (the UI\'s "Report materialization events" or the API)')
    run = instance.get_run_by_id(entry.run_id)
    if run is None:
        return Origin(f"by run {entry.run_id}, which this Dagster instance does not hold")
    by = f"by run {run.run_id} of {run.job_name}"
    if run.job_name == publish_job and run.status == dg.DagsterRunStatus.SUCCESS:
        ran = run.tags.get(PARTITION_TAG)
        if ran == partition:
            return Origin(by, published=True)
        return Origin(f"{by}, which published partition {ran}, not this one")
    if not run.is_finished and now - entry.timestamp < PENDING_RUN_S:
        return Origin(by, pending=True)
    return Origin(f"{by} ({run.status.value})")


def _period(partition: str | None, programme: Programme) -> Period | None:
    """The programme's period of a partition key; None for none, or a key that is no period of its cadence."""
    try:
        period = None if partition is None else period_of(partition)
    except ValueError:
        return None
    return period if period is not None and period.kind == programme.cadence else None


def ledger_words(found: stages.Publication | None, what: str) -> str:
    """What the ledger and the release folder say of the period `what` (a materialisation, a check
    evaluation) names; `found` None: it names no period of the programme."""
    if found is None:
        return f"{what} names no period of the programme"
    if not found.ledger_read:
        return "the ledger cannot be read or does not verify: whether the period is published is not known"
    if found.entry is None:
        return "the ledger records no release of this period: it is NOT published"
    state = "its release folder is in place" if found.outcome.passed else "its release folder does not match it"
    return f"the ledger records its release (entry {found.entry}) and {state}"


@dataclass(frozen=True)
class _Partition:
    """A programme's published_release on one partition: its period (None: no period of the programme) and
    what the ledger and the release folder say of it (None when not read)."""

    programme: Programme
    period: Period | None
    found: stages.Publication | None

    @property
    def key(self) -> dg.AssetKey:
        return self.programme.key("published_release")

    @property
    def label(self) -> str:
        return self.period.label if self.period is not None else "unknown"


@dataclass(frozen=True)
class GuardReading(_Partition):
    """The guard's reading of one materialisation of a programme's published_release: where it came from
    and, for one no publish run logged, what the ledger and the release folder say of its period."""

    record: dg.EventLogRecord
    origin: Origin

    def ledger_words(self) -> str:
        return ledger_words(self.found, "the materialisation")

    def reason(self) -> str:
        record, name = self.record, self.programme.policy.name
        if self.origin.published:
            return f"{name} {self.label}: published {self.origin.by}"
        at = datetime.fromtimestamp(record.timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (
            f"{name} {self.label}: the materialisation of partition {record.partition_key} (event "
            f"{record.storage_id}) was reported {self.origin.by} at {at}, not by a successful run of "
            f"{self.programme.name('publish_job')}; {self.ledger_words()}"
        )

    def alert(self) -> Alert:
        """The `unbacked_publication` alert of a materialisation no publish run logged, linking to the
        asset's partition in the UI."""
        return Alert.build(
            "unbacked_publication",
            self.programme.policy.name,
            self.label,
            stages.PUBLICATION_CHECK,
            self.reason(),
            run_id=self.record.run_id or None,
            ui_url=asset_link(self.key, self.record.partition_key),
            published=self.found is not None and self.found.entry is not None,
        )

    def evaluation(self, alerts_dir: Path) -> dg.AssetCheckEvaluation:
        """The check `published_by_the_publish_job` on the materialisation's partition: passed when a
        successful publish run logged it, failed otherwise (with the file of its alert)."""
        assert self.period is not None and self.record.partition_key is not None, "a partition of the programme"
        metadata: dict[str, Any] = {"reported": self.origin.by, "event_storage_id": str(self.record.storage_id)}
        if not self.origin.published:
            metadata["ledger"] = self.ledger_words()
            alert = alert_path(alerts_dir, self.alert())
            metadata["alert"] = alert.name if alert.exists() else "(no alert file)"
        return dg.AssetCheckEvaluation(
            asset_key=self.key,
            check_name=stages.PUBLICATION_CHECK,
            passed=self.origin.published,
            partition=self.record.partition_key,
            severity=dg.AssetCheckSeverity.ERROR,
            description=self.reason(),
            metadata=metadata,
        )


def read_materialisation(
    instance: dg.DagsterInstance, record: dg.EventLogRecord, programme: Programme, settings: ReleaseSettings
) -> GuardReading:
    origin = origin_of(instance, record.event_log_entry, programme.name("publish_job"), time.time(), record.partition_key)
    period = _period(record.partition_key, programme)
    found = None
    if not (origin.published or origin.pending) and period is not None:
        found = stages.publication(programme.policy, period, Path(settings.releases_dir), settings.ledger())
    return GuardReading(programme, period, found, record, origin)


def _recorded_by_its_run(instance: dg.DagsterInstance, record: dg.EventLogRecord) -> bool:
    """Whether the run that logged a materialisation also recorded the check on its partition (every
    publish run does since the check exists; one before did not)."""
    for log in instance.all_logs(record.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        data = log.dagster_event.event_specific_data if log.dagster_event is not None else None
        if (
            isinstance(data, dg.AssetCheckEvaluation)
            and data.check_name == stages.PUBLICATION_CHECK
            and data.asset_key == record.asset_key
            and data.partition == record.partition_key
        ):
            return True
    return False


class PublicationCheckRequest(dg.Config):
    """Which partition the guard job records the check of: it reads the partition's latest materialisation
    itself, so a launch by hand records nothing but what the event log says."""

    asset_key: list[str] = Field(description="A programme's published_release, e.g. [demo, published_release].")
    partition: str = Field(description="The partition key, e.g. 2018-01-01.")
    from_ledger: bool = Field(
        default=False,
        description="Record the check from the ledger and the release folder (as the check itself reads them), "
        "not from the partition's latest materialisation: after an evaluation of the check reported by hand.",
    )


@dataclass(frozen=True)
class ForgedCheck(_Partition):
    """An evaluation of `published_by_the_publish_job` that no run of this instance executed (reported by hand:
    `report_runless_asset_event` stores it without a run), and what the ledger says of its partition."""

    execution: AssetCheckExecutionRecord

    def reason(self) -> str:
        execution, name = self.execution, self.programme.policy.name
        status = execution.status.value.lower()
        at = datetime.fromtimestamp(execution.create_timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        how = f"under run {execution.run_id}, which never executes it" if execution.run_id else "without a run"
        return (
            f"{name} {self.label}: an evaluation of the check {stages.PUBLICATION_CHECK} on partition "
            f"{execution.partition} ({status}) was reported by hand, {how}, at {at}; only the publish job, the "
            f"guard and a run of the check record it; {ledger_words(self.found, 'the evaluation')}. The guard "
            "records the check again from the ledger"
        )

    def alert(self) -> Alert:
        return Alert.build(
            "unbacked_publication",
            self.programme.policy.name,
            self.label,
            stages.PUBLICATION_CHECK,
            self.reason(),
            ui_url=asset_link(self.key, self.execution.partition),
            published=self.found is not None and self.found.entry is not None,
        )


def _new_check_executions(
    instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, after: int | None
) -> list[AssetCheckExecutionRecord]:
    """The check's executions stored after the execution id `after` (all when None), oldest first."""
    found: list[AssetCheckExecutionRecord] = []
    cursor = None
    while True:
        page = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=GUARD_BATCH, cursor=cursor)
        new = [r for r in page if after is None or r.id > after]
        found += new
        if len(new) < len(page) or len(page) < GUARD_BATCH:
            return sorted(found, key=lambda r: r.id)
        cursor = page[-1].id


def _executes_the_check(instance: dg.DagsterInstance, run_id: str, key: dg.AssetCheckKey, programme: Programme) -> bool:
    """Whether `run_id` is a run of this instance that evaluates the check: the programme's publish job, the
    guard's job (both log it themselves), or a run that planned it (the check run from the UI)."""
    run = instance.get_run_by_id(run_id) if run_id else None
    if run is None:
        return False
    if run.job_name in (programme.name("publish_job"), GUARD_JOB):
        return True
    for log in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED):
        data = log.dagster_event.event_specific_data if log.dagster_event is not None else None
        if getattr(data, "asset_key", None) == key.asset_key and getattr(data, "check_name", None) == key.name:
            return True
    return False


def forged_checks(
    instance: dg.DagsterInstance, programme: Programme, after: int | None, settings: ReleaseSettings
) -> tuple[list[ForgedCheck], int | None]:
    """The evaluations of the programme's published_by_the_publish_job stored after `after` that no run of this
    instance executed, and the last execution id read. A run that executes the check (the publish job, the
    guard's job, the check run from the UI) reads the ledger or the event log itself; one without a run, or
    logged under a run that never executes it, was reported by hand, and may show a period that is not
    published as passing."""
    key = dg.AssetCheckKey(programme.key("published_release"), stages.PUBLICATION_CHECK)
    forged, last = [], after
    for execution in _new_check_executions(instance, key, after):
        last = execution.id
        if _executes_the_check(instance, execution.run_id, key, programme):
            continue
        period = _period(execution.partition, programme)
        found = (
            None
            if period is None
            else stages.publication(programme.policy, period, Path(settings.releases_dir), settings.ledger())
        )
        forged.append(ForgedCheck(programme, period, found, execution))
    return forged, last


def forged_check_request(forged: ForgedCheck) -> dg.RunRequest:
    partition = forged.execution.partition
    assert partition is not None and forged.period is not None
    config = {"asset_key": list(forged.key.path), "partition": partition, "from_ledger": True}
    return dg.RunRequest(
        run_key=f"{forged.key.to_user_string()}-check-{forged.execution.id}",
        run_config={"ops": {GUARD_OP: {"config": config}}},
        tags={**forged.programme.tags(), PERIOD_TAG: forged.period.label, GUARD_TAG: partition},
    )


def guard_request(reading: GuardReading) -> dg.RunRequest:
    partition = reading.record.partition_key
    assert partition is not None
    return dg.RunRequest(
        run_key=f"{reading.key.to_user_string()}-{reading.record.storage_id}",
        run_config={"ops": {GUARD_OP: {"config": {"asset_key": list(reading.key.path), "partition": partition}}}},
        tags={**reading.programme.tags(), PERIOD_TAG: reading.label, GUARD_TAG: partition},
    )


def guard_tick(
    instance: dg.DagsterInstance, programmes: Sequence[Programme], cursor: str | None, settings: ReleaseSettings
) -> tuple[list[dg.RunRequest], str, list[str]]:
    """Read each programme's new published_release materialisations (after its storage id in the cursor, in
    order). One no successful publish run logged is delivered as one `unbacked_publication` alert; the guard
    job then records the check on its partition (one run per partition and tick, for its last such event); a
    publication whose run did not record the check (published before the check existed) gets that run too. A
    materialisation of a run not finished yet stops that programme's reading there (the next tick reads it
    again). Returns the run requests, the new cursor and one log line per materialisation.

    No first tick that only sets the cursor (unlike a run-failure sensor's start from now): a materialisation
    reported by hand before the guard ran still shows a false "Materialized", so the guard reads every
    programme's whole history once (a new programme's too). It is short (one materialisation per published
    period, plus any reported by hand), read GUARD_BATCH at a time; read again (a cursor cleared), its alerts
    are the same alerts, which `deliver` does not send twice (one file per content), and its run keys the
    same keys, which Dagster does not launch twice."""
    after: dict[str, int] = json.loads(cursor) if cursor else {}
    requests: list[dg.RunRequest] = []
    lines: list[str] = []
    for programme in programmes:
        key = programme.key("published_release")
        name = key.to_user_string()
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, after_storage_id=after.get(name)), limit=GUARD_BATCH, ascending=True
        ).records
        to_record: dict[str, GuardReading] = {}
        for record in records:
            reading = read_materialisation(instance, record, programme, settings)
            if reading.origin.pending:
                lines.append(f"{name} {record.partition_key}: reported {reading.origin.by}, not finished: read next tick")
                break
            after[name] = record.storage_id
            if reading.origin.published:
                recorded = _recorded_by_its_run(instance, record)
                lines.append(f"{reading.reason()}" + ("" if recorded else "; its run did not record the check"))
                if recorded:  # the partition's latest reads true already
                    to_record.pop(str(record.partition_key), None)
                    continue
            else:
                alert = reading.alert()
                report = deliver(alert, AlertRouting.for_policy(programme.policy), Path(settings.alerts_dir))
                lines.append(f"{alert.subject}: {alert.reason} -> {report.summary()}")
            if reading.period is not None:
                to_record[str(record.partition_key)] = reading
        requests += [guard_request(reading) for reading in to_record.values()]
        forged, last = forged_checks(instance, programme, after.get(f"{name}:{stages.PUBLICATION_CHECK}"), settings)
        if last is not None:
            after[f"{name}:{stages.PUBLICATION_CHECK}"] = last
        for check in forged:
            alert = check.alert()
            report = deliver(alert, AlertRouting.for_policy(programme.policy), Path(settings.alerts_dir))
            lines.append(f"{alert.subject}: {alert.reason} -> {report.summary()}")
            if check.period is not None:
                requests.append(forged_check_request(check))
    return requests, json.dumps(after, sort_keys=True), lines


def build_publication_guard(programmes: Sequence[Programme]) -> tuple[dg.SensorDefinition, dg.JobDefinition]:
    """The publication guard of the code location (see above): its sensor and the job it launches."""
    by_key = {p.key("published_release"): p for p in programmes}

    @dg.op(
        name=GUARD_OP,
        description="Records the check published_by_the_publish_job on one partition of a programme's "
        "published_release, from the partition's latest materialisation: passed when a successful run of the "
        "programme's publish job logged it, failed otherwise.",
    )
    def report_publication_check(
        context: dg.OpExecutionContext, config: PublicationCheckRequest, settings: ReleaseSettings
    ) -> None:
        key = dg.AssetKey(config.asset_key)
        programme = by_key.get(key)
        if programme is None:
            raise dg.Failure(f"{key.to_user_string()} is no programme's published_release", allow_retries=False)
        if config.from_ledger:
            period = _period(config.partition, programme)
            if period is None:
                raise dg.Failure(f"{config.partition} is no period of {programme.policy.name}", allow_retries=False)
            outcome = stages.check_publication(programme.policy, period, Path(settings.releases_dir), settings.ledger())
            context.log.info(outcome.summary)
            context.log_event(check_evaluation(outcome, key, config.partition))  # type: ignore[arg-type]
            return
        latest = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[config.partition]), limit=1
        ).records
        if not latest:
            raise dg.Failure(f"{key.to_user_string()} has no materialisation of {config.partition}", allow_retries=False)
        reading = read_materialisation(context.instance, latest[0], programme, settings)
        if reading.origin.pending or reading.period is None:
            raise dg.Failure(
                f"{reading.reason()}: not recorded (its run has not finished, or the partition is no period of the "
                "programme)",
                allow_retries=False,
            )
        context.log.info(reading.reason())
        # log_event takes a check evaluation (OpExecutionContext.log_event), though its annotation omits it
        context.log_event(reading.evaluation(Path(settings.alerts_dir)))  # type: ignore[arg-type]

    @dg.job(
        name=GUARD_JOB,
        description="Launched by the publication_guard sensor: records the check published_by_the_publish_job "
        "on one partition of a programme's published_release from its latest materialisation.",
    )
    def publication_guard_job() -> None:
        report_publication_check()

    @dg.sensor(
        name=GUARD_SENSOR,
        job=publication_guard_job,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Reads every programme's new published_release materialisations: one that no successful "
        'run of its publish job logged (reported by hand with the UI\'s "Report materialization events", or '
        "the API) becomes an unbacked_publication alert naming the dataset, the period and whether the ledger "
        "has the release, and publication_guard_job records the check published_by_the_publish_job failed on "
        "its partition. A publication records the check passed itself.",
    )
    def publication_guard(context: dg.SensorEvaluationContext, settings: ReleaseSettings) -> dg.SensorResult:
        requests, cursor, lines = guard_tick(context.instance, programmes, context.cursor, settings)
        for line in lines:
            context.log.info(line)
        if not requests:
            reason = "nothing to record" if lines else "no new materialisation of any published_release"
            return dg.SensorResult(skip_reason=reason, cursor=cursor)
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return publication_guard, publication_guard_job
