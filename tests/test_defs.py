"""The Dagster definitions load, and the release job publishes or is blocked exactly as the checks say."""

import json
from datetime import datetime
from pathlib import Path

import dagster as dg
import geopandas as gpd
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from support.documentation import manual_text
from support.fixture import CELL_A, CELL_B, CELL_C, CELL_D, CELL_E, K, cell_id, fixture_pings, policy_dict, write_policy
from support.paths import SHARED_DATA
from support.releases import published_folder, release
from support.spies import period_sensor_keys

from spatial_release import cli, stages
from spatial_release.definitions import defs as load_definitions
from spatial_release.defs.catalogue import programme_for
from spatial_release.defs.execution import execute_release
from spatial_release.defs.partitions import PERIOD_TAG
from spatial_release.fileio import sha256_file
from spatial_release.stages import protect as protect_stage
from spatial_release.suppression import primary

defs = load_definitions()  # the code location as Dagster's tools load it (lazily, at call)


def public_counts_of(cells: pd.DataFrame, margins: pd.DataFrame, column: str) -> dict:
    """The counts a release.json may carry, re-derived from the published tables alone."""
    nonzero = cells[cells[column] > 0]
    return {
        "published_cells": len(nonzero),
        "published_margins": len(margins),
        "smallest_published_count": int(nonzero[column].min()),
        "structural_zero_cells_published": int((cells[column] == 0).sum()),
        "published_by_level": {
            "cell": len(nonzero),
            **{str(k): int(v) for k, v in margins["level"].value_counts().sort_index().items()},
        },
    }


PARTITION = "2018-Q1"


@pytest.mark.slow
def test_definitions_load():
    dg.Definitions.validate_loadable(defs)
    # a programme's partitions are its periods, by label, as its period sensor adds them: the demo's declared
    # one; Citi Bike's, those its files cover
    for prefix, keys in (
        ("demo", ["2018-Q1"]),
        ("jc_bikes", ["2018-Q1"]),
        ("jc_bikes_monthly", ["2018-01", "2018-02", "2018-03"]),
    ):
        partitions = defs.resolve_job_def(f"{prefix}_release_job").partitions_def
        assert isinstance(partitions, dg.DynamicPartitionsDefinition) and partitions.name == f"{prefix}_periods"
        added = period_sensor_keys(defs, prefix)
        if prefix == "demo" or (SHARED_DATA / "citibike-jc").is_dir():  # the exports of 2018-Q1 are there (CI)
            assert added == keys, prefix
        else:  # elsewhere the periods are open from 2018 to the last that is over
            assert added[0] == keys[0], prefix
    checks = {key.name for key in defs.resolve_asset_graph().asset_check_keys if key.asset_key.path[0] == "demo"}
    assert checks == {
        "rejected_share",
        "outside_share",
        "k_floor",
        "withheld_absent",
        "no_identifiers",
        "suppression_audit",
        "structural_zeros_hold",
        "suppression_budget",
        "earlier_work_files",
        "risk_budget",
        "published_within_budget",
        "within_risk_budget",
        "published_by_the_publish_job",
    }
    # the alert sensors and the publication guard (its sensor and job), one each for the code location
    assert defs.sensors is not None
    assert {"failed_run_alert", "refused_run_notice", "publication_guard"} <= {s.name for s in defs.sensors}
    assert defs.resolve_job_def("publication_guard_job").executor_def.name == "in_process"
    for key in defs.resolve_asset_graph().asset_check_keys:
        if key.asset_key.path[-1] != "published_release":  # nothing downstream to block
            assert defs.resolve_asset_graph().get_check_spec(key).blocking, key
    # every job of the location, "Materialize all" (the implicit asset job) too, runs in one process
    jobs = [defs.resolve_job_def(n) for n in ("demo_release_job", "demo_publish_job", "jc_bikes_release_job")]
    for job in [*jobs, defs.resolve_implicit_global_asset_job_def()]:
        assert job.executor_def.name == "in_process", job.name


@pytest.mark.slow
def test_schedule_requests_the_quarter_that_just_closed(tmp_path, monkeypatch):
    for name in ("RELEASES", "WORK", "LEDGER"):
        monkeypatch.setenv(f"SPATIAL_RELEASE_{name}", str(tmp_path / name.lower()))
    schedule = defs.resolve_schedule_def("demo_release_schedule")
    assert schedule.cron_schedule == "0 0 1 */3 *"
    from spatial_release.defs.resources import ReleaseSettings

    context = dg.build_schedule_context(
        scheduled_execution_time=datetime(2018, 4, 1),
        resources={"settings": ReleaseSettings()},
        repository_def=defs.get_repository_def(),
        instance=dg.DagsterInstance.local_temp(str(tmp_path)),
    )
    requests = schedule.evaluate_tick(context).run_requests
    assert requests is not None
    [request] = requests
    assert request.partition_key == "2018-Q1" and request.tags[PERIOD_TAG] == "2018-Q1"


def _settings(tmp_path: Path) -> dict:
    return {
        "releases_dir": str(tmp_path / "releases"),
        "work_dir": str(tmp_path / "work"),
        "ledger_dir": str(tmp_path / "ledger"),
        "alerts_dir": str(tmp_path / "alerts"),
    }


def _run(tmp_path: Path, policy: Path, instance: dg.DagsterInstance | None = None):
    return execute_release(programme_for(policy), PARTITION, _settings(tmp_path), instance=instance)


def _policy_file(tmp_path: Path, **source) -> Path:
    traces = tmp_path / "traces.csv"
    frame = fixture_pings()
    if source.pop("bad_row", False):
        frame.loc[len(frame)] = {"device": "x", "when": "not a time", "lon": 1, "lat": 1, "gender": "f"}
    frame.to_csv(traces, index=False)
    data = policy_dict(str(traces))
    data["source"].update(source)
    return write_policy(tmp_path, data)


def _materialized(result) -> set[str]:
    return {m.asset_key.to_user_string() for m in result.get_asset_materialization_events()}


@pytest.mark.slow
def test_release_job_publishes_the_fixture(tmp_path):
    result = _run(tmp_path, _policy_file(tmp_path))
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    # the candidate's ten and the publish run's published_by_the_publish_job; within_risk_budget, on the
    # published release, is reported by the risk review
    assert {e.check_name for e in result.get_asset_check_evaluations()} == {
        "published_by_the_publish_job",
        "rejected_share",
        "outside_share",
        "k_floor",
        "withheld_absent",
        "no_identifiers",
        "suppression_audit",
        "structural_zeros_hold",
        "suppression_budget",
        "earlier_work_files",
        "risk_budget",
    }
    folder = tmp_path / "releases" / "fixture" / "2018-Q1"
    assert sorted(p.name for p in folder.iterdir()) == [
        "cells.parquet",
        "margins.parquet",
        "release.json",
        "report.html",
        "report.png",
    ]
    cells = gpd.read_parquet(folder / "cells.parquet")
    assert b"geo" in pq.read_schema(folder / "cells.parquet").metadata and cells.crs.to_epsg() == 32618
    assert list(cells.columns) == ["cell_id", "bucket_start", "n_devices", "geometry"]
    assert dict(zip(cells["cell_id"], cells["n_devices"])) == {cell_id(CELL_A): K, cell_id(CELL_D): 5, cell_id(CELL_E): 6}
    assert str(cells["bucket_start"].dtype) == "datetime64[us, UTC]"
    margins = pd.read_parquet(folder / "margins.parquet")
    assert list(margins.columns) == ["level", "area_id", "bucket_start", "n_devices"]
    assert (margins["n_devices"] >= K).all()
    record = json.loads((folder / "release.json").read_text())
    assert record["files"] == {
        n: sha256_file(folder / n) for n in ("cells.parquet", "margins.parquet", "report.png", "report.html")
    }
    assert record["unit"] == "devices" and record["k"] == K and "inclusive" in record["k_boundary"]
    assert record["complementary_suppression"].startswith("applied") and record["audit"]["passed"]
    assert record["counts"] == public_counts_of(cells, margins, "n_devices")
    internal = json.loads((tmp_path / "work" / "fixture" / "2018-Q1" / "audit.internal.json").read_text())
    assert internal["primaries_audited"] == 2  # B and C protect each other
    text = (folder / "release.json").read_text()
    assert "lonely" not in text and "gender" not in text and '"device"' not in text
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path == ["fixture", "published_release"]]
    metadata = event.materialization.metadata
    assert metadata["release_record"].value == str(folder / "release.json")
    assert "smallest published count | 3" in metadata["k_anonymity_report"].value
    # the map and previews of what the public sees, from the published files only
    page = metadata["map"].value
    assert "![map](data:image/png;base64," in page and "2018-Q1" in page
    assert cell_id(CELL_A) in page and cell_id(CELL_B) not in page and cell_id(CELL_C) not in page
    assert [c.name for c in metadata["dagster/column_schema"].schema.columns] == list(cells.columns)
    assert [c.name for c in metadata["margins_column_schema"].schema.columns] == list(margins.columns)
    assert metadata["map_png"].value == str(folder / "report.png")
    assert metadata["risk_journalist_cumulative_headroom"].value == pytest.approx(
        0.20 - record["risk"]["cumulative"], rel=1e-2
    )
    # the release page holds the release: key names say what they hold (a zone by name, a figure by adversary),
    # every guarantee with its verdict, the ledger entry
    risk = record["risk"]
    assert metadata["risk_worst_zone"].value == risk["worst_zone"]
    assert metadata["risk_journalist_worst_zone_figure"].value == pytest.approx(risk["release_figure"], rel=1e-3)
    assert "risk_journalist_worst_zone" not in metadata
    if risk.get("upper_bound") is not None:
        assert metadata["risk_upper_bound_zone"].value == risk["upper_bound_zone"]
        assert metadata["risk_journalist_uniqueness_upper_bound"].value == pytest.approx(risk["upper_bound"], rel=1e-3)
    assert metadata["checks"].value == record["checks"]
    guarantees = metadata["guarantees"].value
    assert all(f"| {verdict} |" in guarantees for verdict in record["checks"].values())
    assert guarantees.count("\n") == len(record["checks"]) + 1  # a header, its rule, one row per check
    assert metadata["ledger_entry"].value == record["ledger_entry"][:16] and f"ledger entry {record['ledger_entry']}" in page
    # the risk report says what the gate reads and why, and what "worst" means beside a "publish"
    [risk_event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == "risk_assessment"]
    report = risk_event.materialization.metadata["risk_report"].value
    assert f"**{record['risk']['status']}**" in report and "The gate reads the" in report
    assert "A worst of 1 says that some unit's known points are shared by no other" in report
    header = next(line for line in report.splitlines() if line.startswith("| zone |"))
    attack = record["risk"]["model"] == "attack"
    assert ("attack: success (gated)" in header) == attack and "prosecutor: worst" in header


@pytest.fixture
def leaky_suppressor(monkeypatch):
    """A suppression bug: cell B (2 devices, below k) is published."""
    original = protect_stage.protect_release

    def leaky(*args, **kwargs):
        table, log, system = original(*args, **kwargs)
        leak = table.withheld_cells[table.withheld_cells["cell_id"] == cell_id(CELL_B)].drop(columns="reason")
        return (
            primary.ProtectedTable(
                pd.concat([table.cells, leak], ignore_index=True),
                table.margins,
                table.withheld_cells,
                table.withheld_margins,
                table.structural_zero_conflicts,
            ),
            log,
            system,
        )

    monkeypatch.setattr(protect_stage, "protect_release", leaky)


@pytest.mark.slow
def test_blocking_check_stops_the_release(tmp_path, leaky_suppressor):
    result = _run(tmp_path, _policy_file(tmp_path))
    assert not result.success
    failed = {e.check_name: e for e in result.get_asset_check_evaluations() if not e.passed}
    assert {"k_floor", "withheld_absent"} <= set(failed)
    assert failed["k_floor"].metadata["offending"].value[0]["cell_id"] == cell_id(CELL_B)
    assert result.publish is None  # the blocked candidate fails on the candidate: publishing is never planned
    assert "fixture/published_release" not in _materialized(result)
    assert not (tmp_path / "releases" / "fixture" / "2018-Q1").exists()


@pytest.mark.slow
def test_rejected_share_blocks_before_counting(tmp_path):
    result = _run(tmp_path, _policy_file(tmp_path, bad_row=True, max_rejected_share=0.0))
    assert not result.success
    [failed] = [e for e in result.get_asset_check_evaluations() if not e.passed]
    assert failed.check_name == "rejected_share" and "unparseable_timestamp" in failed.description
    assert _materialized(result) == {"fixture/validated_pings"}


@pytest.mark.slow
def test_a_published_release_is_never_overwritten(tmp_path):
    policy = _policy_file(tmp_path)
    assert _run(tmp_path, policy).success
    before = sha256_file(tmp_path / "releases/fixture/2018-Q1/release.json")
    second = _run(tmp_path, policy)
    assert not second.success and "fixture/published_release" not in _materialized(second)
    assert sha256_file(tmp_path / "releases/fixture/2018-Q1/release.json") == before


@pytest.mark.slow
def test_cli_release_publishes(tmp_path, capsys):
    # --memory-limit reaches the counting resource: DuckDB runs the counting step under it
    code = release(_policy_file(tmp_path), tmp_path, extra=["--memory-limit", "300MB"])
    assert code == 0
    captured = capsys.readouterr()
    assert "3 published" in captured.out and str(tmp_path / "out" / "releases" / "fixture" / "2018-Q1") in captured.out
    assert "counting on duckdb" in captured.out + captured.err  # progress is printed as the run goes
    counts = json.loads((tmp_path / "out" / "work" / "fixture" / "2018-Q1" / "counts" / "counts.json").read_text())
    assert counts["engine_settings"]["memory_limit"] == "286.1 MiB"  # DuckDB's spelling of 300MB


@pytest.mark.slow
def test_cli_blocked_release_names_check_and_cell(tmp_path, capsys, leaky_suppressor):
    code = release(_policy_file(tmp_path), tmp_path)
    assert code == 1
    err = capsys.readouterr().err
    assert "BLOCKED by check 'k_floor'" in err and cell_id(CELL_B) in err
    assert not (tmp_path / "out" / "releases" / "fixture" / "2018-Q1").exists()


def test_cli_bad_policy_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: 1\n")
    assert (
        cli.main(
            [
                "release",
                "--policy",
                str(bad),
                "--period",
                "2018-Q1",
                "--out",
                str(tmp_path),
                "--ledger",
                str(tmp_path / "ledger"),
            ]
        )
        == 2
    )
    assert f"{bad}" in capsys.readouterr().err


# The audit tests read the run's published fixture release (conftest.published_q1, published through the
# command line as test_cli_release_publishes does): a copy of it each, never a release of their own.


@pytest.mark.slow
def test_cli_audit_passes_on_a_published_release(published_q1, capsys):
    policy = published_q1 / "policy.yaml"
    folder = published_folder(published_q1)
    capsys.readouterr()
    assert cli.main(["audit", str(folder), "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert "PASSED" in out and "2 withheld primaries audited" in out
    intervals = pd.read_parquet(published_q1 / "out" / "work" / "fixture" / "2018-Q1" / "audit_intervals.internal.parquet")
    assert len(intervals) == 2 and intervals["passed"].all()


@pytest.mark.slow
def test_cli_audit_fails_a_release_that_leaks(published_q1, capsys):
    """The folder is edited after publication (B is published, the record re-hashed): C is then recovered."""
    policy = published_q1 / "policy.yaml"
    folder = published_folder(published_q1)
    cells = gpd.read_parquet(folder / "cells.parquet")
    b = cells.iloc[[0]].assign(cell_id=cell_id(CELL_B), n_devices=2)
    pd.concat([cells, b], ignore_index=True).to_parquet(folder / "cells.parquet")
    record = json.loads((folder / "release.json").read_text())
    assert cli.main(["audit", str(folder), "--policy", str(policy)]) == 1  # the hash no longer matches
    record["files"]["cells.parquet"] = sha256_file(folder / "cells.parquet")
    (folder / "release.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert cli.main(["audit", str(folder), "--policy", str(policy)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and cell_id(CELL_C) in out


@pytest.mark.slow
def test_cli_audit_refuses_another_policy(published_q1, capsys):
    policy = published_q1 / "policy.yaml"
    other = write_policy(published_q1, {**yaml.safe_load(policy.read_text()), "version": 2}, name="other.yaml")
    folder = published_folder(published_q1)
    assert cli.main(["audit", str(folder), "--policy", str(other)]) == 2


@pytest.mark.slow
def test_progress_of_ingest_counting_and_audit_is_in_the_run_log(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    result = _run(tmp_path, _policy_file(tmp_path), instance).candidate
    messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any(m.startswith("ingest: input file 1 of 1:") for m in messages)  # by position, never by name
    assert any(m.startswith("counting on duckdb: scanning 1 file(s)") for m in messages)
    assert any(m.startswith("counting done in") for m in messages)
    assert any(m.startswith("suppression: ") for m in messages)
    assert (
        sum(m.startswith("audit: done in") and "every withheld primary protected" in m for m in messages) == 2
    )  # protect, then the check
    # no count of withheld figures or components in the run log
    assert not any("withheld primaries in" in m or "components" in m or "cell groups" in m for m in messages)


def test_documented_postgres_instance_config_is_valid_for_dagster(monkeypatch, tmp_path):
    import re

    from dagster._core.instance.config import dagster_instance_config

    block = re.search(r"# \$DAGSTER_HOME/dagster.yaml\n(.*?)```", manual_text(), re.S)
    assert block is not None, "the manual shows the instance's dagster.yaml"
    (tmp_path / "dagster.yaml").write_text(block.group(1))
    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD"):
        monkeypatch.setenv(name, "x")
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["storage"]["postgres"]["postgres_db"]["db_name"] == "dagster"
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"


def test_counting_engine_resource_defaults_to_duckdb_and_refuses_unknown_engines(tmp_path):
    from spatial_release.defs.resources import CountingEngine

    area = stages.WorkArea(tmp_path / "work")
    with CountingEngine().open(area) as engine:
        assert engine.name == "duckdb"  # the embedded default
    # a shared Spark scratch folder is per dataset and period: two programmes of one period never collide
    spark = CountingEngine(engine="spark", scratch_dir=str(tmp_path / "scratch"))
    first, second = (spark.scratch_for(stages.WorkArea(tmp_path / "work" / name / "2018-Q1")) for name in "ab")
    assert first != second and first == tmp_path / "scratch" / "a" / "2018-Q1"
    with pytest.raises(ValueError, match="'polars' is not one of 'duckdb', 'spark'"):
        with CountingEngine(engine="polars").open(area):
            pass
