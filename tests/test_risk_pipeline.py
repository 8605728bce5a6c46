"""The risk gate, the ledger entry and the review automation, through the Dagster job."""

import json
from datetime import UTC
from pathlib import Path

import dagster as dg
import pytest
from support.fixture import fixture_pings, policy_dict, uniqueness_model, write_policy
from support.spies import run_failure_context, stored_run

from spatial_release import release, stages
from spatial_release.defs.catalogue import programme_for
from spatial_release.defs.execution import execute_release
from spatial_release.defs.resources import ReleaseSettings
from spatial_release.ledger import Ledger, read_ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy

# Whole releases: left out of the fast tier (pytest -m "not slow").
pytestmark = pytest.mark.slow

PARTITION = "2018-Q1"


def _settings(tmp_path: Path, policy: Path) -> dict:
    return {
        "releases_dir": str(tmp_path / "releases"),
        "work_dir": str(tmp_path / "work"),
        "ledger_dir": str(tmp_path / "ledger"),
        "alerts_dir": str(tmp_path / "alerts"),
    }


def _policy(tmp_path: Path, population: int = 10_000, model: str = "uniqueness") -> Path:
    """The fixture policy. Most tests here are of the gate's mechanics (ceilings, warn_at, reviews, alerts),
    set through the journalist's population on the uniqueness figure; `model="attack"` for the attacks."""
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    data = policy_dict(str(traces))
    return write_policy(tmp_path, uniqueness_model(data) if model == "uniqueness" else data, population=population)


def _run(tmp_path, policy, instance=None):
    return execute_release(programme_for(policy), PARTITION, _settings(tmp_path, policy), instance=instance)


def _review(policy):
    """The programme's review asset, its check and its sensor."""
    review = programme_for(policy).review
    return review.asset, review.check, review.sensor


def test_publication_writes_a_chained_ledger_entry(tmp_path):
    result = _run(tmp_path, _policy(tmp_path))
    assert result.success
    [entry] = read_ledger(tmp_path / "ledger")
    record = json.loads((tmp_path / "releases/fixture/2018-Q1/release.json").read_text())
    assert record["ledger_entry"] == entry["hash"] and entry["files"] == record["files"]
    assert entry["risk"]["status"] == "publish" and record["risk"]["worst_zone"] is not None
    assert record["risk"]["cumulative"] == pytest.approx(record["risk"]["release_figure"])


def test_risk_gate_blocks_a_sparse_zone(tmp_path):
    # a public population of 5 per cell: the panel is nearly everyone, so the journalist figure is high
    result = _run(tmp_path, _policy(tmp_path, population=5))
    assert not result.success
    failed = {e.check_name: e for e in result.get_asset_check_evaluations() if not e.passed}
    assert set(failed) == {"risk_budget"}
    assert "RiskBudgetExceeded" in failed["risk_budget"].description
    assert result.publish is None
    assert "fixture/published_release" not in {
        m.asset_key.to_user_string() for m in result.get_asset_materialization_events()
    }
    assert not (tmp_path / "releases/fixture/2018-Q1").exists()
    assert not (tmp_path / "ledger/entries.jsonl").exists()


@pytest.mark.parametrize("crash_at", ["before_ledger", "after_ledger"])
def test_crash_between_ledger_and_rename_rolls_forward(tmp_path, monkeypatch, crash_at):
    policy_path = _policy(tmp_path)
    policy, period = load_policy(policy_path), Period.parse("2018-Q1")
    ctx = stages.ReleaseContext(policy, period, tmp_path / "work")
    _ = ctx.area  # the work area is made before the stages run
    ledger = Ledger(tmp_path / "ledger")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)

    def power_cut(*args, **kwargs):
        raise SystemExit("power cut")

    # the machine stops while staging (before the ledger append) or after the append, before the rename
    if crash_at == "before_ledger":
        monkeypatch.setattr(release.staging, "write_json_atomic", power_cut)
    else:
        monkeypatch.setattr(release.staging.os, "rename", power_cut)
    with pytest.raises(SystemExit):
        stages.run_publish(ctx, tmp_path / "releases", ledger)
    monkeypatch.undo()
    target = tmp_path / "releases/fixture/2018-Q1"
    assert not target.exists() and release.staging_dir(target).exists()  # nothing visible: the old state
    assert len(read_ledger(tmp_path / "ledger")) == (0 if crash_at == "before_ledger" else 1)
    # the next attempt restarts (before) or finishes that publication (after), never recording it twice
    target_path, record = stages.run_publish(ctx, tmp_path / "releases", ledger)
    [entry] = read_ledger(tmp_path / "ledger")
    assert target_path == target and record.ledger_entry == entry["hash"]
    assert len(read_ledger(tmp_path / "ledger")) == 1 and not release.staging_dir(target).exists()
    assert stages.verify_release_files(target).files == entry["files"]


def _sensor_context(tmp_path, policy, cursor=None):
    return dg.build_sensor_context(cursor=cursor, resources={"settings": ReleaseSettings(**_settings(tmp_path, policy))})


def test_review_sensor_fires_on_new_releases_and_landscape_changes(tmp_path):
    policy = _policy(tmp_path)
    _, _, risk_review_sensor = _review(policy)
    first = risk_review_sensor(_sensor_context(tmp_path, policy))
    assert not first.run_requests and "no published release" in first.skip_reason.skip_message
    assert _run(tmp_path, policy).success
    ctx = _sensor_context(tmp_path, policy, first.cursor)
    [request] = risk_review_sensor(ctx).run_requests
    cursor = risk_review_sensor(ctx).cursor
    again = risk_review_sensor(_sensor_context(tmp_path, policy, cursor))
    assert not again.run_requests  # nothing changed
    landscape = tmp_path / "landscape.yaml"
    landscape.write_text(landscape.read_text().replace("points: 2", "points: 3"))
    [changed] = risk_review_sensor(_sensor_context(tmp_path, policy, cursor)).run_requests
    assert changed.run_key != request.run_key and changed.run_key.startswith("review-fixture-1-")


def test_a_review_with_nothing_published_writes_no_ledger_entry(tmp_path):
    """ "Materialize all" or the quarterly schedule runs the review before any release: it records nothing
    (no ledger entry, no review file) and its check passes, saying why; once a release exists it records one."""
    policy = _policy(tmp_path)
    risk_review, published_within_budget, _ = _review(policy)
    resources = {"settings": ReleaseSettings(**_settings(tmp_path, policy))}
    with dg.instance_for_test() as instance:
        empty = dg.materialize([risk_review, published_within_budget], resources=resources, instance=instance)
        assert empty.success
        assert not (tmp_path / "ledger").exists() or read_ledger(tmp_path / "ledger") == []
        assert not (tmp_path / "work" / "fixture" / "reviews").exists()
        [evaluation] = empty.get_asset_check_evaluations()
        assert evaluation.passed and evaluation.description is not None
        assert "nothing to review" in evaluation.description
        [event] = empty.get_asset_materialization_events()
        assert event.materialization.metadata["releases_reviewed"].value == 0
        assert _run(tmp_path, policy, instance=instance).success
        dg.materialize([risk_review, published_within_budget], resources=resources, instance=instance)
    assert [e["kind"] for e in read_ledger(tmp_path / "ledger")] == ["release", "review"]


def _release_check(instance) -> tuple[bool, str]:
    record = instance.get_latest_asset_check_evaluation_record(
        dg.AssetCheckKey(dg.AssetKey(["fixture", "published_release"]), "within_risk_budget")
    )
    evaluation = record.event.dagster_event.event_specific_data
    return evaluation.passed, evaluation.partition


def test_review_flags_a_published_release_that_is_now_over_budget(tmp_path):
    policy = _policy(tmp_path)
    risk_review, published_within_budget, _ = _review(policy)
    with dg.instance_for_test() as instance:
        assert _run(tmp_path, policy, instance=instance).success
        resources = {"settings": ReleaseSettings(**_settings(tmp_path, policy))}
        calm = dg.materialize(
            [risk_review, published_within_budget], resources=resources, instance=instance, raise_on_error=False
        )
        assert calm.success and all(e.passed for e in calm.get_asset_check_evaluations())
        assert _release_check(instance) == (True, PARTITION)
        # the world changes: the landscape now says the public population is tiny
        (tmp_path / "population.csv").write_text((tmp_path / "population.csv").read_text().replace("10000", "5"))
        stormy = dg.materialize(
            [risk_review, published_within_budget], resources=resources, instance=instance, raise_on_error=False
        )
        [evaluation] = [e for e in stormy.get_asset_check_evaluations() if e.check_name == "published_within_budget"]
        assert not evaluation.passed and evaluation.description is not None and "2018-Q1" in evaluation.description
        assert not stormy.success  # the breach fails the review run: the runs overview shows it red
        # the review as an operator reads it: a headline naming the period, the ceilings, the adversary
        [calm_event] = calm.get_asset_materialization_events()
        calm_report = calm_event.materialization.metadata["review_report"].value
        assert isinstance(calm_report, str)
        assert "**Every one of the 1 published release(s) is within its budget.**" in calm_report
        [event] = stormy.get_asset_materialization_events()
        report = event.materialization.metadata["review_report"].value
        assert isinstance(report, str)
        assert report.startswith("**1 release(s) over budget: 2018-Q1**") and "Ceilings: per release 0.05" in report
        assert "- **2018-Q1** (fixture, ledger entry 0): **over budget**; " in report and "adversary **" in report
        assert "|" not in report  # no table: the entry is shown in a narrow column of the metadata table
        # ...and the check on the published release's own partition now shows failed in the UI
        assert _release_check(instance) == (False, PARTITION)
    alerts = [json.loads(p.read_text()) for p in (tmp_path / "alerts").glob("risk_breach-*.json")]
    assert len(alerts) == 1 and alerts[0]["period"] == "2018-Q1" and len(alerts[0]["options"]) == 3
    kinds = [e["kind"] for e in read_ledger(tmp_path / "ledger")]
    assert kinds == ["release", "review", "review"]


def test_run_failure_sensor_turns_a_blocked_release_into_an_alert(tmp_path):
    with dg.instance_for_test() as instance:
        policy = _policy(tmp_path, population=5)
        result = _run(tmp_path, policy, instance=instance).candidate
        assert not result.success
        programme_for(policy).alert_sensor()(run_failure_context(instance, result.run_id))
        tags = stored_run(instance, result.run_id).tags
    folder = tmp_path / "alerts"  # the failed run's own alerts folder (its settings), not the default
    alerts = [json.loads(p.read_text()) for p in folder.glob("blocked_release-*.json")]
    mine = [a for a in alerts if a["run_id"] == result.run_id]
    assert len(mine) == 1 and mine[0]["dataset"] == "fixture" and mine[0]["period"] == "2018-Q1"
    assert mine[0]["check"] == "risk_budget" and "RiskBudgetExceeded" in mine[0]["reason"]
    assert mine[0]["published"] is False and mine[0]["offending"]  # the zone that blocked
    assert any("coarser" in option for option in mine[0]["options"])
    assert tags["spatial_release/blocked_by"] == "risk_budget"  # the alert shows on the failed run


# What a work area keeps after its retention: aggregates only (true counts for `spatial-release audit`,
# the candidate and its manifest, summaries). Listed here, not taken from the code under test.
KEPT_AFTER_RETENTION = {
    "audit.internal.json",
    "candidate/cells.parquet",
    "candidate/margins.parquet",
    "candidate/manifest.json",
    "candidate/withheld_cells.internal.parquet",
    "counts/cell_counts.parquet",
    "counts/counts.json",
    "counts/margin_counts.parquet",
    "ingest/ingest.json",
    "risk/risk.json",
}


def test_per_unit_data_is_pruned_after_retention_and_the_figure_still_counts(tmp_path):
    from datetime import datetime, timedelta

    policy_path = _policy(tmp_path)
    assert _run(tmp_path, policy_path).success
    policy = load_policy(policy_path)
    ledger = Ledger(tmp_path / "ledger")
    work = tmp_path / "work"
    area = work / "fixture" / "2018-Q1"
    keys = stages.key_set_path(work, policy, "2018-Q1")
    per_unit = [
        keys,
        area / "ingest/pings.parquet",
        area / "ingest/quarantine.parquet",
        area / "counts/membership.internal.parquet",
        area / "counts/outside.parquet",
        area / "audit_intervals.internal.parquet",
    ]
    assert all(p.exists() for p in per_unit)
    assert stages.prune_per_unit_artefacts(policy, ledger, work) == []  # within retention: kept
    assert all(p.exists() for p in per_unit)
    assert policy.risk is not None
    later = datetime.now(UTC) + timedelta(days=policy.risk.key_retention_days + 1)
    assert stages.prune_per_unit_artefacts(policy, ledger, work, now=later) == ["2018-Q1"]
    remaining = {str(p.relative_to(area)) for p in area.rglob("*") if p.is_file()}
    assert remaining <= KEPT_AFTER_RETENTION, remaining - KEPT_AFTER_RETENTION
    assert not any(p.exists() for p in per_unit)
    # still within retention by the clock: a missing key set is an error, never silently skipped
    with pytest.raises(FileNotFoundError, match="missing within their retention"):
        stages.review_programme(policy, ledger, work)


def test_an_audit_after_retention_does_not_write_the_intervals_back(tmp_path, monkeypatch):
    """`audit` after retention must not re-create audit_intervals.internal.parquet, a per-unit file retention
    deleted. The audit still runs on the kept true counts; the intervals are not kept."""
    from datetime import datetime, timedelta

    import spatial_release.cli as cli_module

    policy_path = _policy(tmp_path)
    assert _run(tmp_path, policy_path).success
    policy = load_policy(policy_path)
    work, intervals = tmp_path / "work", tmp_path / "work/fixture/2018-Q1/audit_intervals.internal.parquet"
    assert policy.risk is not None
    later = datetime.now(UTC) + timedelta(days=policy.risk.key_retention_days + 1)
    assert stages.prune_per_unit_artefacts(policy, Ledger(tmp_path / "ledger"), work, now=later) == ["2018-Q1"]
    assert not intervals.exists()

    class Later(datetime):
        @classmethod
        def now(cls, tz=None):
            return later

    monkeypatch.setattr(cli_module, "datetime", Later)
    argv = [
        "audit",
        str(tmp_path / "releases/fixture/2018-Q1"),
        "--policy",
        str(policy_path),
        "--work",
        str(work),
        "--ledger",
        str(tmp_path / "ledger"),
    ]
    assert cli_module.main(argv) == 0
    assert not intervals.exists()
    monkeypatch.setattr(cli_module, "datetime", datetime)  # control: within retention the audit keeps them
    assert cli_module.main(argv) == 0 and intervals.exists()


def test_past_warn_at_publishes_with_a_warning(tmp_path):
    # every fixture cell's units share one trace, so the journalist figure is 1 / population = 0.04:
    # past warn_at (0.75 x 0.05 = 0.0375), under the ceiling
    result = _run(tmp_path, _policy(tmp_path, population=25))
    assert result.success
    [risk] = [e for e in result.get_asset_check_evaluations() if e.check_name == "risk_budget"]
    assert not risk.passed and risk.severity == dg.AssetCheckSeverity.WARN
    record = json.loads((tmp_path / "releases/fixture/2018-Q1/release.json").read_text())
    assert record["risk"]["status"] == "warn" and record["risk"]["release_figure"] == pytest.approx(0.04)
    assert "past 75% of the per-release ceiling" in record["risk"]["reason"]


def test_a_policy_without_a_risk_section_cannot_publish(tmp_path):
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    data = policy_dict(str(traces))
    del data["risk"]
    result = _run(tmp_path, write_policy(tmp_path, data))
    assert not result.success
    from spatial_release.cli import root_cause

    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert any(
        "no 'risk' section: a release without a risk estimate is blocked" in root_cause(e.step_failure_data.error)
        for e in failures
    )
    assert not (tmp_path / "releases/fixture/2018-Q1").exists()


def test_a_second_dataset_over_the_same_cells_is_audited_together(tmp_path):
    """Two programmes over the same devices, cells and days ('loose' with k = 2, 'fixture' with k = 3):
    the fixture release is audited with loose's overlapping release, which the audit loads from the ledger
    and checks against its hashes. (A leak through such a pair is tested in test_guarantees with
    hand-made release frames.)"""
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    loose_path = write_policy(tmp_path, policy_dict(str(traces), name="loose", k=2), name="loose.yaml")
    strict = policy_dict(str(traces))
    strict["suppression"] = {**strict["suppression"], "audit_with": ["loose"]}
    strict_path = write_policy(tmp_path, strict, name="strict.yaml")
    published = stages.Published(Ledger(tmp_path / "ledger"), tmp_path / "releases")
    policy, period = load_policy(strict_path), Period.parse("2018-Q1")
    assert stages.related_releases(policy, period, published) == []  # nothing published yet
    assert _run(tmp_path, loose_path).success
    [(cells, margins)] = stages.related_releases(policy, period, published)
    assert len(cells) and set(margins["level"]) >= {"total"}
    assert stages.related_releases(policy, Period.parse("2018-Q2"), published) == []  # no overlap
    result = _run(tmp_path, strict_path)
    assert result.success
    [audit_eval] = [e for e in result.get_asset_check_evaluations() if e.check_name == "suppression_audit"]
    assert audit_eval.passed
    # a loose release edited after publication is refused, not silently audited
    (tmp_path / "releases/loose/2018-Q1/margins.parquet").write_bytes(b"tampered")
    with pytest.raises(stages.ReleaseTampered):
        stages.related_releases(policy, period, published)
