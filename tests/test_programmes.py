"""One asset graph per policy file: own key prefix, partitions, jobs, schedules and run tags; a bad policy file
fails alone; a blocked run never marks the published release as failed."""

import json
from datetime import datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml
from support.fixture import fixture_pings, policy_dict, write_policy
from support.paths import PROJECT_ROOT
from support.spies import period_sensor_keys, stored_run

from spatial_release.defs.catalogue import build_catalogue, programme_for
from spatial_release.defs.execution import execute_release
from spatial_release.defs.partitions import MONTH_CRON, PERIOD_TAG, add_partition
from spatial_release.defs.programmes import DATASET_TAG, POLICY_SHA_TAG, POLICY_TAG, PolicyChanged
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.period import Period
from spatial_release.policy import load_policy

PARTITION = "2018-Q1"


def _policies(folder: Path, **datasets: dict) -> dict[str, Path]:
    """Policy files named after their datasets, over the fixture pings; the landscape and the traces in a
    subfolder (the policies folder holds policy files only, like the project's policies/landscapes/)."""
    shared = folder / "landscapes"
    shared.mkdir(parents=True, exist_ok=True)
    traces = shared / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    paths = {}
    for name, changes in datasets.items():
        data = {**policy_dict(str(traces)), "name": name, **changes}
        write_policy(shared, data, name=f"{name}.yaml")
        data["risk"] = {**data["risk"], "landscape": "landscapes/landscape.yaml"}
        paths[name] = folder / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(data, sort_keys=False))
        (shared / f"{name}.yaml").unlink()
    return paths


def _settings(tmp_path: Path) -> dict:
    return {
        "releases_dir": str(tmp_path / "releases"),
        "work_dir": str(tmp_path / "work"),
        "ledger_dir": str(tmp_path / "ledger"),
        "alerts_dir": str(tmp_path / "alerts"),
    }


def test_each_policy_file_has_its_own_graph_partitions_jobs_and_schedules(tmp_path):
    _policies(tmp_path / "policies", **{"bikes-q": {}, "bikes-m": {"period": "month"}})
    catalogue = build_catalogue(tmp_path / "policies")
    assert catalogue.errors == []
    defs = catalogue.definitions()
    dg.Definitions.validate_loadable(defs)
    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    for prefix in ("bikes_q", "bikes_m"):
        assert {
            f"{prefix}/{name}"
            for name in (
                "validated_pings",
                "cell_counts",
                "protected_table",
                "risk_assessment",
                "published_release",
                "risk_review",
            )
        } <= keys
        assert defs.schedules is not None
        assert {s.name for s in defs.schedules} >= {f"{prefix}_release_schedule", f"{prefix}_risk_review_schedule"}
    for prefix in ("bikes_q", "bikes_m"):
        partitions = defs.resolve_job_def(f"{prefix}_release_job").partitions_def
        assert isinstance(partitions, dg.DynamicPartitionsDefinition) and partitions.name == f"{prefix}_periods"
    assert defs.resolve_schedule_def("bikes_m_release_schedule").cron_schedule == MONTH_CRON
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        assert graph.get(key).owners == ["team:disclosure-control"], key
        assert graph.get(key).group_name == key.path[0]


def test_the_project_policies_each_have_a_graph():
    catalogue = build_catalogue(PROJECT_ROOT / "policies")
    assert catalogue.errors == []
    prefixes = {p.programme.prefix: p.programme.cadence for p in catalogue.programmes}
    assert prefixes == {"demo": "quarter", "jc_bikes": "quarter", "jc_bikes_dp": "quarter", "jc_bikes_monthly": "month"}


def test_an_invalid_policy_file_fails_alone_and_names_the_file(tmp_path):
    folder = tmp_path / "policies"
    _policies(folder, good={})
    (folder / "broken.yaml").write_text("name: broken\nversion: 1\nk: 1\n")
    catalogue = build_catalogue(folder)
    assert [p.programme.prefix for p in catalogue.programmes] == ["good"]
    [error] = catalogue.errors
    assert error.path == (folder / "broken.yaml").resolve()
    defs = catalogue.definitions()
    dg.Definitions.validate_loadable(defs)
    spec = defs.resolve_asset_graph().get(dg.AssetKey(["broken", "invalid_policy_file"]))
    assert spec.description is not None
    assert str(folder / "broken.yaml") in spec.description and "k" in spec.description
    # materialising it says what is wrong with the file now
    result = dg.materialize([defs.resolve_assets_def(dg.AssetKey(["broken", "invalid_policy_file"]))], raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    refused = failure.step_failure_data.user_failure_data
    assert refused is not None and refused.description is not None
    assert str(folder / "broken.yaml") in refused.description


def test_two_policy_files_of_one_dataset_are_both_refused(tmp_path):
    folder = tmp_path / "policies"
    paths = _policies(folder, one={})
    (folder / "copy.yaml").write_text(paths["one"].read_text())
    catalogue = build_catalogue(folder)
    assert catalogue.programmes == [] and len(catalogue.errors) == 2
    assert all("each policy file needs its own `name`" in e.error for e in catalogue.errors)


@pytest.mark.slow
def test_runs_carry_dataset_policy_and_period_tags_and_keys_are_prefixed(tmp_path):
    paths = _policies(tmp_path / "policies", first={}, second={})
    instance = dg.DagsterInstance.ephemeral()
    for name in ("first", "second"):
        run = execute_release(programme_for(paths[name]), PARTITION, _settings(tmp_path), instance=instance)
        assert run.success
        sha = programme_for(paths[name]).programme.policy.sha256[:16]
        for result in run.results:
            tags = result.dagster_run.tags
            assert tags[DATASET_TAG] == name and tags[POLICY_TAG] == f"{name} v1"
            assert tags[POLICY_SHA_TAG] == sha and tags[PERIOD_TAG] == "2018-Q1"
        keys = {e.asset_key.path[0] for e in run.get_asset_materialization_events()}
        assert keys == {name}
    assert (tmp_path / "releases" / "first" / "2018-Q1").is_dir() and (tmp_path / "releases" / "second" / "2018-Q1").is_dir()
    # each programme's figures are plotted under its own asset: no series mixes the two
    for name in ("first", "second"):
        records = instance.fetch_materializations(dg.AssetKey([name, "published_release"]), limit=10).records
        assert len(records) == 1


def _planned(instance: dg.DagsterInstance, run_id: str) -> set[str]:
    """The assets a run planned to materialise: the UI shows a planned asset that a failed run did not
    materialise as a failed partition."""
    planned: set[str] = set()
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED):
        assert record.dagster_event is not None and record.dagster_event.asset_key is not None, record
        planned.add(record.dagster_event.asset_key.to_user_string())
    return planned


@pytest.mark.slow
def test_a_refused_rerun_of_a_published_period_leaves_every_status_true(tmp_path):
    """A re-run of a published period is refused by its first step: the run is cancelled, not failed, so
    Dagster keeps the published materialisations as the partition's state (a partition or a check reads
    failed only when the run that planned it ended FAILED), never plans published_release, and the refusal
    is a notice (refused_release), with no withdrawal advice."""
    paths = _policies(tmp_path / "policies", bikes={})
    instance = dg.DagsterInstance.ephemeral()
    first = execute_release(programme_for(paths["bikes"]), PARTITION, _settings(tmp_path), instance=instance)
    assert first.success
    again = execute_release(programme_for(paths["bikes"]), PARTITION, _settings(tmp_path), instance=instance)
    assert not again.success and again.publish is None
    run = stored_run(instance, again.candidate.run_id)
    assert run.status == dg.DagsterRunStatus.CANCELED and run.tags["spatial_release/refused"] == "already_published"
    assert "bikes/published_release" not in _planned(instance, again.candidate.run_id)
    [failure] = [e for e in again.candidate.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "bikes__validated_pings"  # where the refusal is
    # a deliberate refusal, with its reason and what to do, not a crash with a stack trace
    refused = failure.step_failure_data.user_failure_data
    assert refused is not None and refused.description is not None
    assert "is already published" in refused.description
    error = failure.step_failure_data.error
    assert error is not None
    assert error.stack == [] and error.cause is None and error.cls_name is None, error
    assert error.message.startswith("Refused, not failed: ") and "is already published" in error.message, error
    assert "What to do: nothing to do: the published release stands" in error.message, error
    # what the UI reads: no partition of any asset of the programme is failed; each is still materialised
    graph = programme_for(paths["bikes"]).runnable().resolve_asset_graph()
    for name in ("validated_pings", "cell_counts", "protected_table", "risk_assessment", "published_release"):
        key = dg.AssetKey(["bikes", name])
        partitions = graph.get(key).partitions_def
        assert partitions is not None
        status = instance.get_status_by_partition(key, [PARTITION], partitions)
        assert status == {PARTITION: dg.AssetPartitionStatus.MATERIALIZED}, (name, status)
    # the checks the refused run planned were never evaluated: in a run that did not fail, Dagster resolves
    # them as skipped (AssetCheckExecutionRecord.resolve_status), never "execution failed"
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

    planned = 0
    for check_key in graph.asset_check_keys:
        history = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=1)
        if history and history[0].run_id == again.candidate.run_id:
            assert history[0].status == AssetCheckExecutionRecordStatus.PLANNED, check_key
            planned += 1
    assert planned > 0
    # the notice: its own kind and options, nothing to withdraw
    [alert_file] = [p for p in (tmp_path / "alerts").iterdir() if p.name.startswith("refused_release")]
    alert = json.loads(alert_file.read_text())
    assert alert["kind"] == "refused_release" and alert["published"] is True and alert["period"] == "2018-Q1"
    assert alert["subject"].endswith("2018-Q1: notice, refused_release by validated_pings")
    assert not any("withdraw" in option for option in alert["options"]), alert["options"]


@pytest.mark.slow
def test_a_publish_run_of_a_published_period_writes_nothing_and_does_not_fail(tmp_path):
    """Someone materialises published_release again from the UI: the release stays as published."""
    paths = _policies(tmp_path / "policies", bikes={})
    instance = dg.DagsterInstance.ephemeral()
    programme = programme_for(paths["bikes"])
    assert execute_release(programme, PARTITION, _settings(tmp_path), instance=instance).success
    defs = programme.runnable()
    result = defs.resolve_job_def("bikes_publish_job").execute_in_process(
        partition_key=PARTITION, instance=instance, run_config={"resources": {"settings": {"config": _settings(tmp_path)}}}
    )
    assert result.success and result.get_asset_materialization_events() == []
    assert len(instance.fetch_materializations(dg.AssetKey(["bikes", "published_release"]), limit=5).records) == 1


@pytest.mark.slow
def test_the_schedule_skips_a_published_period(tmp_path):
    paths = _policies(tmp_path / "policies", bikes={})
    programme = programme_for(paths["bikes"])
    assert execute_release(programme, PARTITION, _settings(tmp_path)).success
    defs = programme.runnable()
    context = dg.build_schedule_context(
        scheduled_execution_time=datetime(2018, 4, 1),
        resources={"settings": ReleaseSettings(**_settings(tmp_path))},
        repository_def=defs.get_repository_def(),
    )
    tick = defs.resolve_schedule_def("bikes_release_schedule").evaluate_tick(context)
    assert tick.run_requests == [] and tick.skip_message is not None and "already published" in tick.skip_message


@pytest.mark.slow
def test_the_publish_sensor_publishes_the_partition_of_a_successful_candidate(tmp_path):
    paths = _policies(tmp_path / "policies", bikes={})
    programme = programme_for(paths["bikes"])
    instance = dg.DagsterInstance.ephemeral()
    add_partition(instance, programme.programme, Period.parse(PARTITION))  # as the period sensor does
    defs = programme.runnable()
    candidate = defs.resolve_job_def("bikes_release_job").execute_in_process(
        partition_key=PARTITION, instance=instance, run_config={"resources": {"settings": {"config": _settings(tmp_path)}}}
    )
    assert candidate.success
    success = [e for e in candidate.all_events if e.event_type_value == "PIPELINE_SUCCESS"][0]
    context = dg.build_run_status_sensor_context(
        sensor_name="bikes_publish_sensor",
        dagster_instance=instance,
        dagster_run=candidate.dagster_run,
        dagster_event=success,
    )
    request = defs.resolve_sensor_def("bikes_publish_sensor")(context)
    assert isinstance(request, dg.RunRequest), request
    assert request.partition_key == PARTITION and request.tags["spatial_release/candidate_run"] == candidate.run_id


def test_a_policy_edited_after_the_graph_was_built_is_refused(tmp_path):
    paths = _policies(tmp_path / "policies", bikes={})
    programme = programme_for(paths["bikes"]).programme
    data = yaml.safe_load(paths["bikes"].read_text())
    paths["bikes"].write_text(yaml.safe_dump({**data, "k": data["k"] + 1}))
    try:
        programme.load()
    except PolicyChanged as changed:
        assert "reload the code location" in str(changed)
    else:
        raise AssertionError("an edited policy file was used with a stale graph")


@pytest.mark.slow
def test_the_command_line_refuses_a_published_period_before_any_run(tmp_path):
    from spatial_release import cli

    paths = _policies(tmp_path / "policies", bikes={})
    with dg.instance_for_test() as instance:
        import os

        os.environ["DAGSTER_HOME"] = instance.root_directory
        try:
            out, ledger = str(tmp_path / "out"), str(tmp_path / "ledger")
            assert cli.run_release(str(paths["bikes"]), "2018-Q1", out=out, ledger=ledger).published
            runs = len(instance.get_runs())
            again = cli.run_release(str(paths["bikes"]), "2018-Q1", out=out, ledger=ledger)
        finally:
            del os.environ["DAGSTER_HOME"]
        assert not again.published and again.exit_code == 1
        assert "already published" in again.failures[0].message
        assert len(instance.get_runs()) == runs == 2  # the release and publish runs; no red candidate run


def _monthly_exports(folder: Path, months: list[str]) -> str:
    """One trace file per month, named like the Citi Bike exports; returns the policy's `{month}` path."""
    folder.mkdir(parents=True, exist_ok=True)
    for month in months:
        fixture_pings().to_csv(folder / f"export-{month}.csv", index=False)
    return str(folder / "export-{month}.csv")


def _partition_keys(path: Path) -> list[str]:
    return period_sensor_keys(programme_for(path).runnable(), load_policy(path).name.replace("-", "_"))


def test_partitions_are_the_programme_periods_its_trace_files_cover(tmp_path):
    """A `{month}` source path says which periods the data covers: the partitions are the periods all of
    whose monthly files exist, not every quarter since 2018; a declared first_period/last_period wins. The
    period sensor adds them, by label, and adds a period whose files arrive later to the same definitions
    (no reload of the code location)."""
    pattern = _monthly_exports(tmp_path / "exports", ["201801", "201802", "201803", "201804", "201805"])
    paths = _policies(tmp_path / "policies", bikes={}, months={"period": "month"}, later={"first_period": "2018-Q2"})
    for path in paths.values():
        data = yaml.safe_load(path.read_text())
        data["source"]["paths"] = [pattern]
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _partition_keys(paths["bikes"]) == ["2018-Q1"]  # Q2 lacks its June file
    assert _partition_keys(paths["months"]) == [f"2018-0{m}" for m in range(1, 6)]
    assert _partition_keys(paths["later"]) == ["2018-Q2"]  # declared: one partition, its files missing yet
    defs, instance = programme_for(paths["bikes"]).runnable(), dg.DagsterInstance.ephemeral()
    assert period_sensor_keys(defs, "bikes", instance) == ["2018-Q1"]
    assert period_sensor_keys(defs, "bikes", instance) == []  # known: added once
    fixture_pings().to_csv(tmp_path / "exports" / "export-201806.csv", index=False)
    assert period_sensor_keys(defs, "bikes", instance) == ["2018-Q2"]  # the June file arrived: Q2 is in, same defs
    assert instance.get_dynamic_partitions("bikes_periods") == ["2018-Q1", "2018-Q2"]


def test_a_first_period_of_the_other_cadence_is_refused(tmp_path):
    from spatial_release.policy import PolicyError

    paths = _policies(tmp_path / "policies", good={})
    data = yaml.safe_load(paths["good"].read_text())
    for bounds, message in (
        ({"first_period": "2018-01"}, "first_period and last_period are quarters"),
        ({"first_period": "2018-Q3", "last_period": "2018-Q1"}, "is before first_period"),
    ):
        paths["good"].write_text(yaml.safe_dump({**data, **bounds}, sort_keys=False))
        with pytest.raises(PolicyError, match=message):
            load_policy(paths["good"])


@pytest.mark.slow
def test_the_schedule_skips_a_period_without_trace_files_and_says_why(tmp_path, monkeypatch):
    for name in ("RELEASES", "WORK", "LEDGER"):
        monkeypatch.setenv(f"SPATIAL_RELEASE_{name}", str(tmp_path / name.lower()))
    from spatial_release.defs.resources import ReleaseSettings

    pattern = _monthly_exports(tmp_path / "exports", ["201801", "201802", "201803"])
    paths = _policies(tmp_path / "policies", bikes={}, open={})
    for name, extra in (("bikes", {}), ("open", {"first_period": "2018-Q2"})):
        data = yaml.safe_load(paths[name].read_text())
        data["source"]["paths"] = [pattern]
        paths[name].write_text(yaml.safe_dump({**data, **extra}, sort_keys=False))

    def tick(name: str, when: datetime):
        defs = programme_for(paths[name]).runnable()
        schedule = defs.resolve_schedule_def(f"{name}_release_schedule")
        context = dg.build_schedule_context(
            scheduled_execution_time=when,
            resources={"settings": ReleaseSettings()},
            repository_def=defs.get_repository_def(),
            instance=instance,
        )
        return schedule.evaluate_tick(context)

    (tmp_path / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))  # the schedule adds its partition there
    [request] = tick("bikes", datetime(2018, 4, 1)).run_requests  # the quarter the files cover
    assert request.partition_key == "2018-Q1" and instance.get_dynamic_partitions("bikes_periods") == ["2018-Q1"]
    later = tick("bikes", datetime(2024, 7, 1))  # 2024-Q2: no file yet
    assert later.run_requests == [] and "2024-Q2: 3 of the policy's trace file paths match no file" in later.skip_message
    early = tick("open", datetime(2018, 4, 1))  # 2018-Q1, before the declared first period
    assert early.run_requests == [] and "before the policy's first_period 2018-Q2" in early.skip_message
    assert instance.get_dynamic_partitions("open_periods") == []
    # a programme whose periods are declared open: the period is a partition, its files are missing
    data = yaml.safe_load(paths["open"].read_text())
    paths["open"].write_text(yaml.safe_dump({**data, "last_period": "2024-Q4"}, sort_keys=False))
    missing = tick("open", datetime(2024, 7, 1))
    assert missing.run_requests == [] and "2024-Q2: 3 of the policy's trace file paths match no file" in missing.skip_message
    assert "export-" not in missing.skip_message  # how many, never which (a file name may be a unit id)


@pytest.mark.slow
def test_materialize_all_cannot_plan_the_published_release_and_its_success_is_published(tmp_path):
    """ "Materialize all" (Dagster's implicit asset job) never holds published_release: only the publish job
    reports it, so no such run publishes outside the publish job nor shows a never-published period failed
    when a check blocks it. A successful one is a candidate the publish sensor publishes."""
    from spatial_release.defs.release.assets import is_candidate_run

    paths = _policies(tmp_path / "policies", bikes={})
    programme = programme_for(paths["bikes"])
    defs = programme.runnable()
    implicit = defs.resolve_implicit_global_asset_job_def()
    planned = {key.to_user_string() for key in implicit.asset_layer.executable_asset_keys}
    assert "bikes/risk_assessment" in planned and "bikes/published_release" not in planned
    spec = defs.resolve_asset_graph().get(dg.AssetKey(["bikes", "published_release"]))
    assert not spec.is_executable and not spec.is_materializable
    instance = dg.DagsterInstance.ephemeral()
    add_partition(instance, programme.programme, Period.parse(PARTITION))  # as the period sensor does
    run = implicit.execute_in_process(
        partition_key=PARTITION,
        instance=instance,
        run_config={"resources": {"settings": {"config": _settings(tmp_path)}}},
    )
    assert run.success and not (tmp_path / "releases" / "bikes").exists()  # built and checked, not published
    selected = frozenset(implicit.asset_layer.executable_asset_keys)
    stored = stored_run(instance, run.run_id)._replace(asset_selection=selected)  # as the UI sets it
    assert is_candidate_run(stored, programme.programme, "bikes_release_job")
    assert not is_candidate_run(stored._replace(asset_selection=frozenset()), programme.programme, "bikes_release_job")
    # the sensor's request publishes it through the publish job, which reports the materialisation
    publish = defs.resolve_job_def("bikes_publish_job").execute_in_process(
        partition_key=PARTITION,
        instance=instance,
        run_config={"resources": {"settings": {"config": _settings(tmp_path)}}},
        tags={"spatial_release/candidate_run": run.run_id},
    )
    assert publish.success and (tmp_path / "releases" / "bikes" / "2018-Q1" / "release.json").is_file()
    graph = defs.resolve_asset_graph()
    key = dg.AssetKey(["bikes", "published_release"])
    partitions = graph.get(key).partitions_def
    assert partitions is not None
    status = instance.get_status_by_partition(key, [PARTITION], partitions)
    assert status == {PARTITION: dg.AssetPartitionStatus.MATERIALIZED}


@pytest.mark.slow
def test_the_command_line_releases_a_new_quarter_from_a_file_named_on_it(tmp_path, capsys):
    """The next quarter's release takes one command: its file, named on the command line, makes the period
    a partition (the policy's own folder holds only 2018-Q1's files); a period not over yet is refused."""
    from spatial_release import cli

    pattern = _monthly_exports(tmp_path / "exports", ["201801", "201802", "201803"])
    paths = _policies(tmp_path / "policies", bikes={})
    data = yaml.safe_load(paths["bikes"].read_text())
    data["source"]["paths"] = [pattern]
    paths["bikes"].write_text(yaml.safe_dump(data, sort_keys=False))
    april = fixture_pings()
    april["when"] = april["when"].str.replace("2018-01-", "2018-04-")
    april.to_csv(tmp_path / "april.csv", index=False)
    out, ledger = str(tmp_path / "out"), str(tmp_path / "ledger")
    common = ["release", "--policy", str(paths["bikes"]), "--out", out, "--ledger", ledger]
    assert cli.main([*common, "--period", "2018-Q2", "--traces", str(tmp_path / "april.csv")]) == 0
    record = json.loads((tmp_path / "out" / "releases" / "bikes" / "2018-Q2" / "release.json").read_text())
    assert record["period"] == "2018-Q2" and record["input"]["pings_read"] == len(april)
    capsys.readouterr()
    assert cli.main([*common, "--period", "2026-Q4", "--traces", str(tmp_path / "april.csv")]) == 2
    assert "period '2026-Q4' is not over yet" in capsys.readouterr().err
    assert not (tmp_path / "out" / "work" / "bikes" / "2026-Q4").exists()


def test_trace_files_that_cover_no_whole_period_make_no_partition(tmp_path):
    """`{month}` files of two months of a quarter: no period of the programme is complete, so the period sensor
    adds none (not every quarter since 2018); the third month's file makes that quarter a partition."""
    pattern = _monthly_exports(tmp_path / "exports", ["201804", "201805"])
    paths = _policies(tmp_path / "policies", bikes={})
    data = yaml.safe_load(paths["bikes"].read_text())
    data["source"]["paths"] = [pattern]
    paths["bikes"].write_text(yaml.safe_dump(data, sort_keys=False))
    defs, instance = programme_for(paths["bikes"]).runnable(), dg.DagsterInstance.ephemeral()
    assert period_sensor_keys(defs, "bikes", instance) == []
    fixture_pings().to_csv(tmp_path / "exports" / "export-201806.csv", index=False)
    assert period_sensor_keys(defs, "bikes", instance) == ["2018-Q2"]
