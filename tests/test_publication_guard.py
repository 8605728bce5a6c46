"""The publication guard: the Dagster UI offers "Report materialization events" on a programme's
published_release (Dagster cannot disable it), which marks a period materialised with no release behind it.
The `publication_guard` sensor records the check `published_by_the_publish_job` failed on such a partition
and delivers one `unbacked_publication` alert; a materialisation the publish job logged passes the check;
the check itself, run as the UI runs it, reads the ledger and the release folder."""

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml
from support.fixture import fixture_pings, policy_dict, write_policy

from spatial_release.alerts import Alert
from spatial_release.defs import guard
from spatial_release.defs.alerts import UI_URL_ENV
from spatial_release.defs.catalogue import build_catalogue, programme_for
from spatial_release.defs.execution import execute_release
from spatial_release.defs.guard import GUARD_JOB, GUARD_SENSOR
from spatial_release.defs.partitions import add_partition
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.period import Period

PARTITION = "2018-Q1"
RELEASE = dg.AssetKey(["fixture", "published_release"])
CHECK = dg.AssetCheckKey(RELEASE, "published_by_the_publish_job")


def _policies(tmp_path: Path) -> Path:
    """A policies folder holding the fixture policy alone (its landscape and traces in a subfolder)."""
    folder = tmp_path / "policies"
    shared = folder / "landscapes"
    shared.mkdir(parents=True)
    traces = shared / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    write_policy(shared, policy_dict(str(traces)), name="unused.yaml")
    data = policy_dict(str(traces))
    data["risk"] = {**data["risk"], "landscape": "landscapes/landscape.yaml"}
    (folder / "fixture.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (shared / "unused.yaml").unlink()
    return folder


def _settings(tmp_path: Path) -> dict:
    names = ("releases_dir", "work_dir", "ledger_dir", "alerts_dir")
    return {name: str(tmp_path / name.replace("_dir", "")) for name in names}


def _definitions(folder: Path) -> dg.Definitions:
    """The code location of the policies folder `folder`."""
    return build_catalogue(folder).definitions()


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance, settings: dict, cursor: str | None):
    """One tick of the guard (its run requests not launched yet)."""
    context = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"settings": ReleaseSettings(**settings)})
    return defs.resolve_sensor_def(GUARD_SENSOR).evaluate_tick(context)


def _launch(defs: dg.Definitions, instance: dg.DagsterInstance, settings: dict, request: dg.RunRequest):
    """The guard job's run of `request`, as the daemon launches it (the folders as the deployment sets them)."""
    assert request.job_name in (None, GUARD_JOB)
    run = defs.resolve_job_def(GUARD_JOB).execute_in_process(
        run_config={**request.run_config, "resources": {"settings": {"config": settings}}},
        instance=instance,
        tags=request.tags,
    )
    [evaluation] = run.get_asset_check_evaluations()
    return evaluation


def _alerts(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "alerts").glob("unbacked_publication-*.json"))]


def _latest_check(instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
    """The partition's check as the UI reads it: its latest stored evaluation."""
    record = instance.get_latest_asset_check_evaluation_record(CHECK)
    assert record is not None, "the check has no evaluation stored"
    assert record.event is not None
    event = record.event.dagster_event
    assert event is not None and isinstance(event.event_specific_data, dg.AssetCheckEvaluation)
    return event.event_specific_data


def _report_by_hand(instance: dg.DagsterInstance) -> None:
    """What the UI's "Report materialization events" dialog does (dagster_graphql's report_runless_asset_events)."""
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=RELEASE, partition=PARTITION))


def test_a_materialisation_reported_by_hand_fails_the_check_and_alerts_once(tmp_path, monkeypatch):
    monkeypatch.setenv(UI_URL_ENV, "http://127.0.0.1:3000/")
    settings = _settings(tmp_path)
    defs = _definitions(_policies(tmp_path))
    instance = dg.DagsterInstance.ephemeral()
    # control: a runless materialisation of another asset of the programme is none of the guard's business
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=dg.AssetKey(["fixture", "risk_assessment"]), partition=PARTITION)
    )
    quiet = _tick(defs, instance, settings, None)
    assert quiet.run_requests == [] and _alerts(tmp_path) == [] and quiet.skip_message
    _report_by_hand(instance)
    first = _tick(defs, instance, settings, quiet.cursor)
    [alert] = _alerts(tmp_path)
    assert alert["kind"] == "unbacked_publication" and (alert["dataset"], alert["period"]) == ("fixture", "2018-Q1")
    assert alert["subject"] == "[spatial_release] fixture 2018-Q1: unbacked_publication by published_by_the_publish_job"
    assert alert["published"] is False and alert["run_id"] is None
    assert (
        "reported by hand" in alert["reason"] and "records no release of this period: it is NOT published" in alert["reason"]
    )
    assert any("NOT published" in o for o in alert["options"]) and any("by hand" in o for o in alert["options"])
    assert alert["ui_url"] == "http://127.0.0.1:3000/assets/fixture/published_release?view=partitions&partition=2018-Q1"
    assert "Open in Dagster: http://127.0.0.1:3000/assets/fixture/published_release" in Alert.from_json(alert).text
    # the check on the partition, recorded by the guard's run
    [request] = first.run_requests
    assert request.tags["spatial_release/period"] == "2018-Q1"
    evaluation = _launch(defs, instance, settings, request)
    assert (evaluation.asset_key, evaluation.check_name, evaluation.partition) == (RELEASE, CHECK.name, PARTITION)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert evaluation.description == alert["reason"]
    assert evaluation.metadata["alert"].value.startswith("unbacked_publication-")
    stored = _latest_check(instance)
    assert (stored.passed, stored.partition) == (False, PARTITION)
    # the next tick, from the advanced cursor, delivers nothing more and requests nothing
    second = _tick(defs, instance, settings, first.cursor)
    assert second.run_requests == [] and len(_alerts(tmp_path)) == 1
    # no new materialisation read (the cursor also moves past the guard run's own evaluation of the check)
    assert json.loads(second.cursor)[RELEASE.to_user_string()] == json.loads(first.cursor)[RELEASE.to_user_string()]
    # the same period reported by hand again: a second alert (another event) and a second evaluation of the
    # same partition, which a runless evaluation could not be (see the last test)
    _report_by_hand(instance)
    third = _tick(defs, instance, settings, second.cursor)
    assert len(_alerts(tmp_path)) == 2
    [request] = third.run_requests
    assert not _launch(defs, instance, settings, request).passed
    assert len(instance.event_log_storage.get_asset_check_execution_history(CHECK, limit=10)) == 2


@pytest.mark.slow
def test_a_publication_by_the_publish_job_passes_the_check_without_an_alert(tmp_path):
    folder, settings = _policies(tmp_path), _settings(tmp_path)
    defs = _definitions(folder)
    instance = dg.DagsterInstance.ephemeral()
    release = execute_release(programme_for(folder / "fixture.yaml"), PARTITION, settings, instance=instance)
    assert release.success and release.publish is not None
    # the publish run records the check itself, passed
    [evaluation] = [e for e in release.publish.get_asset_check_evaluations() if e.check_name == CHECK.name]
    assert evaluation.passed and evaluation.partition == PARTITION
    assert evaluation.description is not None
    assert evaluation.description.startswith("fixture 2018-Q1 is published: ledger entry")
    assert _latest_check(instance).passed
    # ...so the guard reads its materialisation and has nothing to add: no run, no alert
    first = _tick(defs, instance, settings, None)
    assert first.run_requests == [] and _alerts(tmp_path) == [] and first.cursor != "{}"
    # a publication whose run did not record the check (published before the check existed) gets a run of the
    # guard that records it passed
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(guard, "_recorded_by_its_run", lambda instance, record: False)
        [request] = _tick(defs, instance, settings, None).run_requests
    evaluation = _launch(defs, instance, settings, request)
    assert (
        evaluation.passed and f"published by run {release.publish.run_id} of fixture_publish_job" in evaluation.description
    )
    # control: the same partition reported by hand after the publication is recorded failed and alerted,
    # saying that the ledger has the release (nothing to withdraw)
    _report_by_hand(instance)
    second = _tick(defs, instance, settings, first.cursor)
    [alert] = _alerts(tmp_path)
    assert alert["published"] is True and any("nothing to withdraw" in o for o in alert["options"])
    assert "the ledger records its release (entry 0) and its release folder is in place" in alert["reason"]
    [request] = second.run_requests
    assert not _launch(defs, instance, settings, request).passed and not _latest_check(instance).passed


def _run_check(folder: Path, settings: dict, instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
    """The check alone, run as the UI runs it (Dagster's implicit asset job with the check selected), on a
    partition the period sensor added."""
    programme = programme_for(folder / "fixture.yaml")
    add_partition(instance, programme.programme, Period.parse(PARTITION))
    job = (
        programme.runnable()
        .resolve_implicit_global_asset_job_def()
        .get_subset(asset_selection=set(), asset_check_selection={CHECK})
    )
    run = job.execute_in_process(
        partition_key=PARTITION, instance=instance, run_config={"resources": {"settings": {"config": settings}}}
    )
    [evaluation] = run.get_asset_check_evaluations()
    assert evaluation.partition == PARTITION
    return evaluation


@pytest.mark.slow
def test_the_check_passes_for_a_published_period_only(tmp_path):
    folder, settings = _policies(tmp_path), _settings(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    never = _run_check(folder, settings, instance)
    assert never.description is not None
    assert not never.passed and never.description.startswith("fixture 2018-Q1 is not published")
    assert "records no release" in never.description
    assert execute_release(programme_for(folder / "fixture.yaml"), PARTITION, settings, instance=instance).success
    published = _run_check(folder, settings, instance)
    assert published.description is not None
    assert published.passed and published.description.startswith("fixture 2018-Q1 is published: ledger entry")
    assert "cells.parquet, margins.parquet, report.html, report.png" in published.description
    # control: a published file altered after publication fails the check, naming it
    cells = Path(settings["releases_dir"]) / "fixture" / "2018-Q1" / "cells.parquet"
    cells.write_bytes(cells.read_bytes() + b"\0")
    altered = _run_check(folder, settings, instance)
    assert altered.description is not None
    assert not altered.passed and f"{cells} does not match the sha256 ledger entry" in altered.description


def test_dagster_stores_one_runless_check_evaluation_per_partition():
    """Why the guard records the check in runs of its own job: Dagster 1.13.27 refuses a second runless
    evaluation of a check on one partition (a unique index over asset, check, run id "" and partition), so a
    sensor's SensorResult(asset_events=[AssetCheckEvaluation(...)]) would fail the daemon's tick on the second
    report of a period. If this test fails, Dagster stores them now and the sensor could report them itself."""
    import sqlalchemy.exc

    instance = dg.DagsterInstance.ephemeral()

    def runless(passed: bool, partition: str) -> None:
        instance.report_runless_asset_event(
            dg.AssetCheckEvaluation(asset_key=RELEASE, check_name=CHECK.name, passed=passed, partition=partition)
        )

    runless(True, PARTITION)
    runless(False, "2018-04-01")  # control: another partition is stored
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        runless(False, PARTITION)


def _forge_under_run(instance: dg.DagsterInstance, run_id: str, partition: str) -> None:
    """A materialisation of `partition` logged under another run's id (`report_dagster_event`, the API beneath
    the runless report, which takes any run id)."""
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData

    run = instance.get_run_by_id(run_id)
    assert run is not None
    materialisation = dg.AssetMaterialization(asset_key=RELEASE, partition=partition)
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
        job_name=run.job_name,
        event_specific_data=StepMaterializationData(materialisation),
    )
    instance.report_dagster_event(event, run_id=run_id)


@pytest.mark.slow
def test_a_materialisation_of_another_period_under_a_publish_runs_id_is_no_publication(tmp_path):
    """A materialisation of 2018-Q2 logged under 2018-Q1's successful publish run's id must not be taken for a
    publication and recorded passed without an alert. A publish run publishes its own partition only."""
    folder, settings = _policies(tmp_path), _settings(tmp_path)
    defs = _definitions(folder)
    instance = dg.DagsterInstance.ephemeral()
    release = execute_release(programme_for(folder / "fixture.yaml"), PARTITION, settings, instance=instance)
    assert release.success and release.publish is not None
    first = _tick(defs, instance, settings, None)  # control: the publication itself: nothing to add
    assert first.run_requests == [] and _alerts(tmp_path) == []
    _forge_under_run(instance, release.publish.run_id, "2018-Q2")
    second = _tick(defs, instance, settings, first.cursor)
    [alert] = _alerts(tmp_path)
    assert alert["period"] == "2018-Q2" and alert["published"] is False
    assert "which published partition 2018-Q1, not this one" in alert["reason"] and "NOT published" in alert["reason"]
    [request] = second.run_requests
    evaluation = _launch(defs, instance, settings, request)
    assert not evaluation.passed and evaluation.partition == "2018-Q2"


@pytest.mark.slow
def test_a_check_evaluation_reported_by_hand_is_alerted_and_recorded_again_from_the_ledger(tmp_path):
    """`report_runless_asset_event` takes a check evaluation too: a passing published_by_the_publish_job
    reported by hand must not show an unpublished period green. The guard reads check evaluations as well as
    materialisations, alerts and records the check again from the ledger; the evaluations its runs and the
    publish run record are not reported."""
    folder, settings = _policies(tmp_path), _settings(tmp_path)
    defs = _definitions(folder)
    instance = dg.DagsterInstance.ephemeral()
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(asset_key=RELEASE, check_name=CHECK.name, passed=True, partition=PARTITION)
    )
    assert _latest_check(instance).passed  # what the UI showed
    first = _tick(defs, instance, settings, None)
    [alert] = _alerts(tmp_path)
    assert alert["period"] == PARTITION and "was reported by hand, without a run" in alert["reason"]
    assert "NOT published" in alert["reason"] and alert["published"] is False
    [request] = first.run_requests
    evaluation = _launch(defs, instance, settings, request)
    assert not evaluation.passed and "is not published" in evaluation.description
    assert not _latest_check(instance).passed
    # the guard's own evaluation, and the publish run's, are run-backed: nothing more to report
    assert execute_release(programme_for(folder / "fixture.yaml"), PARTITION, settings, instance=instance).success
    second = _tick(defs, instance, settings, first.cursor)
    assert second.run_requests == [] and len(_alerts(tmp_path)) == 1 and _latest_check(instance).passed


@pytest.mark.slow
def test_a_check_evaluation_logged_under_a_run_that_never_runs_the_check_is_reported(tmp_path):
    """Variant: the evaluation logged under an existing run's id (`report_dagster_event`) instead of runless.
    Only a run that executes the check (the publish job, the guard's job, a run that selected it) is trusted;
    the check run from the UI is not reported (control)."""
    from dagster._core.events import DagsterEvent, DagsterEventType

    folder, settings = _policies(tmp_path), _settings(tmp_path)
    defs = _definitions(folder)
    instance = dg.DagsterInstance.ephemeral()
    release = execute_release(programme_for(folder / "fixture.yaml"), PARTITION, settings, instance=instance)
    assert release.success
    assert _run_check(folder, settings, instance).passed  # the UI's run of the check
    first = _tick(defs, instance, settings, None)
    assert first.run_requests == [] and _alerts(tmp_path) == []
    candidate = release.candidate.run_id
    evaluation = dg.AssetCheckEvaluation(asset_key=RELEASE, check_name=CHECK.name, passed=True, partition="2018-Q2")
    candidate_run = instance.get_run_by_id(candidate)
    assert candidate_run is not None
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_CHECK_EVALUATION.value,
        job_name=candidate_run.job_name,
        event_specific_data=evaluation,
    )
    instance.report_dagster_event(event, run_id=candidate)
    second = _tick(defs, instance, settings, first.cursor)
    [alert] = _alerts(tmp_path)
    assert alert["period"] == "2018-Q2" and f"reported by hand, under run {candidate}, which never" in alert["reason"]
    assert "NOT published" in alert["reason"]
    [request] = second.run_requests
    assert not _launch(defs, instance, settings, request).passed
