"""Attack: read the withheld figures off what is published beside the tables. release.json and the
Dagster metadata used to carry the units withheld per level, the smallest count before suppression and the
total of unit counts: linear facts about withheld cells that the attacker-LP audit never saw. Every number
published must now be derivable from the published tables (re-derived here) or be a policy, input-ping or
risk-gate figure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import geopandas as gpd
import pandas as pd
import pytest
from support.fixture import fixture_pings, policy_dict, write_policy

from spatial_release.defs.catalogue import programme_for
from spatial_release.defs.execution import execute_release

# Facts about withheld cells (or units) that must never be published.
WITHHELD_FACTS = {
    "groups",
    "smallest_count_before",
    "primary_cells",
    "secondary_cells",
    "withheld_margins",
    "unit_counts_withheld",
    "unit_counts_total",
    "share_withheld",
    "by_level",
    "units_withheld",
    "units_counted",
    "primaries_audited",
    "components",
    "smallest_margin_to_bound",
    "groups_below_k",
    "units_below_k",
    "cells_withheld",
    "withheld_by_level",
    "attacker_lo",
    "attacker_up",
    "value",
    "units",
    "dagster/row_count",
}


def _keys(obj: object) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _keys(v)}
    return set()


def _run(tmp_path: Path, trace_name: str = "traces.csv"):
    traces = tmp_path / trace_name
    fixture_pings().to_csv(traces, index=False)
    policy = write_policy(tmp_path, policy_dict(str(traces)))
    config = {
        "releases_dir": str(tmp_path / "releases"),
        "work_dir": str(tmp_path / "work"),
        "ledger_dir": str(tmp_path / "ledger"),
        "alerts_dir": str(tmp_path / "alerts"),
    }
    return execute_release(programme_for(policy), "2018-Q1", config)


@pytest.mark.slow
def test_release_json_and_metadata_carry_no_fact_about_withheld_cells(tmp_path):
    result = _run(tmp_path)
    assert result.success
    folder = tmp_path / "releases" / "fixture" / "2018-Q1"
    record = json.loads((folder / "release.json").read_text())
    assert not WITHHELD_FACTS & _keys(record), WITHHELD_FACTS & _keys(record)
    cells, margins = gpd.read_parquet(folder / "cells.parquet"), pd.read_parquet(folder / "margins.parquet")
    nonzero = cells[cells["n_devices"] > 0]
    assert record["counts"] == {
        "published_cells": len(nonzero),
        "published_margins": len(margins),
        "smallest_published_count": int(nonzero["n_devices"].min()),
        "structural_zero_cells_published": int((cells["n_devices"] == 0).sum()),
        "published_by_level": {
            "cell": len(nonzero),
            **{str(k): int(v) for k, v in margins["level"].value_counts().sort_index().items()},
        },
    }
    metadata_keys: set[str] = set()
    for event in result.get_asset_materialization_events():
        for key, value in event.materialization.metadata.items():
            if key == "dagster/row_count" and event.asset_key.path[-1] in ("protected_table", "validated_pings"):
                continue  # published cells (derivable from the tables) and valid pings (not units)
            metadata_keys |= {key} | _keys(getattr(value, "value", None))
    for evaluation in result.get_asset_check_evaluations():
        for key, value in evaluation.metadata.items():
            metadata_keys |= {key} | _keys(getattr(value, "value", None))
    assert not WITHHELD_FACTS & metadata_keys, WITHHELD_FACTS & metadata_keys
    # the operator still has every figure, in the owner-only work area
    work = tmp_path / "work" / "fixture" / "2018-Q1"
    internal = json.loads((work / "candidate" / "manifest.json").read_text())["summary"]
    assert internal["primary_cells"] == 2 and internal["unit_counts_withheld"] == 3
    assert json.loads((work / "audit.internal.json").read_text())["primaries_audited"] == 2


def _metadata_entries(result) -> list[tuple[str, str, object]]:
    """(asset or check, key, value) of every metadata entry of every materialisation and check evaluation."""
    entries = [
        (event.asset_key.path[-1], key, getattr(value, "value", value))
        for event in result.get_asset_materialization_events()
        for key, value in event.materialization.metadata.items()
    ]
    return entries + [
        (evaluation.check_name, key, getattr(value, "value", value))
        for evaluation in result.get_asset_check_evaluations()
        for key, value in evaluation.metadata.items()
    ]


def _numbers(value: object) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.slow
def test_no_exact_ratio_in_any_metadata_and_no_trace_file_name_anywhere(tmp_path):
    """Per-device exports name a unit (`bike-29590.csv`): the fixture's traces are written as `export-a0.csv`,
    a0 being one of its devices. Neither the name nor the id may reach release.json, report.html, report.png's
    text, any Dagster metadata entry or description; and no metadata number may be an exact ratio (227/228
    names 228 units): every fraction has at most 4 significant digits."""
    result = _run(tmp_path, "export-a0.csv")
    assert result.success
    folder = tmp_path / "releases" / "fixture" / "2018-Q1"
    record_text = (folder / "release.json").read_text()
    record = json.loads(record_text)
    assert "export-a0" not in record_text and '"a0"' not in record_text
    assert record["input"]["files"] == 1 and len(record["input"]["files_sha256"]) == 64
    html = (folder / "report.html").read_text()
    assert "export-a0" not in html and "a0.csv" not in html
    from PIL import Image, PngImagePlugin

    with Image.open(folder / "report.png") as image:
        assert isinstance(image, PngImagePlugin.PngImageFile)
        assert not any("a0" in f"{k} {v}" for k, v in image.text.items())
    entries = _metadata_entries(result)
    assert entries
    for where, key, value in entries:
        texts = _strings(value)
        assert not any("export-a0" in t for t in texts), (where, key)
        for number in _numbers(value):
            if number != int(number):
                assert float(f"{number:.4g}") == number, (where, key, number)
    for evaluation in result.get_asset_check_evaluations():
        assert "export-a0" not in (evaluation.description or "")


def test_the_identifiers_check_finds_a_unit_id_in_the_record_and_the_report(tmp_path):
    """Negative controls of the free-text scan: an id as a whole JSON string, as a part of a file name, in the
    report's prose; and what it must not read as ids (figures, dates)."""
    from spatial_release.guarantees import ids_in_texts

    ids = {"a0", "29590", "7", "2018"}
    assert ids_in_texts({"release.json": ["29590"]}, ids)
    assert ids_in_texts({"release.json": ["exported from /data/bike-29590.csv"]}, ids)
    assert ids_in_texts({"report.html": "<p>device a0 was here</p>"}, ids)
    assert not ids_in_texts({"report.html": "<p>7 cells, 0.0074 share, 2018-01-29, 1,234 pings</p>"}, ids)
    assert not ids_in_texts({"release.json": ["2018-Q1", "zone B at 0.0085"]}, ids)
    # small integer ids against the report's everyday words (CSS, encodings, CRS codes)
    assert not ids_in_texts({"report.html": "margin:.5em 0;padding:0 utf-8 EPSG:4326 h3"}, {"0", "8", "4326", "5"})


@pytest.mark.slow
def test_publication_refuses_a_staged_report_that_names_a_unit(tmp_path, monkeypatch):
    """The last look before the ledger append: a report that quotes a unit id (here a policy whose map title
    would carry it is simulated by patching the renderer) is refused and nothing is published."""
    import spatial_release.report as report_package

    original = report_package.write_report

    def leaky(staging, record, policy):
        original(staging, record, policy)
        html = staging / "report.html"
        html.write_text(html.read_text() + "<p>traced device a1</p>")

    monkeypatch.setattr(report_package, "write_report", leaky)
    result = _run(tmp_path)
    assert not result.success
    assert not (tmp_path / "releases" / "fixture" / "2018-Q1").exists()
    entries = tmp_path / "ledger" / "entries.jsonl"
    assert not entries.exists() or '"fixture"' not in entries.read_text()
    assert not list((tmp_path / "releases" / "fixture").glob(".*publishing"))


# The fields an offending row may carry to an operator-facing surface: places, files and what fails.
PLACE_FIELDS = {
    "cell_id",
    "level",
    "area_id",
    "bucket_start",
    "bucket",
    "zone",
    "failing",
    "file",
    "problem",
    "column",
    "error",
    "figure",
}


def _standalone_integers(text: str, ids: set[str]) -> set[int]:
    """The standalone integers of a text, ids and ISO instants removed first (their digits are not figures)."""
    for value in sorted(ids, key=len, reverse=True):
        text = text.replace(value, " ")
    text = re.sub(r"\d{4}-\d\d-\d\d(T[\d:.]+([+-]\d\d:\d\d)?)?", " ", text)
    return {int(n) for n in re.findall(r"(?<![\w.])\d+(?![\w.])", text)}


@pytest.mark.slow
def test_a_blocked_candidate_shows_no_figure_of_its_own_to_the_operator(tmp_path, monkeypatch):
    """Attack: read an unpublished figure of a blocked candidate off what an operator sees: the run's event
    log, every materialisation's and check's metadata, the failure descriptions and the alert. A suppression
    bug publishes cell B (2 devices, below k = 3) and the checks block it. Every offending row may carry
    places and the failing rule only, and no text that names cell B may carry its count."""
    from support.fixture import CELL_B, cell_id

    from spatial_release.stages import protect as protect_stage
    from spatial_release.suppression import primary

    original = protect_stage.protect_release

    def leaky(*args, **kwargs):
        table, log, system = original(*args, **kwargs)
        leak = table.withheld_cells[table.withheld_cells["cell_id"] == cell_id(CELL_B)].drop(columns="reason")
        cells = pd.concat([table.cells, leak], ignore_index=True)
        protected = primary.ProtectedTable(
            cells, table.margins, table.withheld_cells, table.withheld_margins, table.structural_zero_conflicts
        )
        return protected, log, system

    monkeypatch.setattr(protect_stage, "protect_release", leaky)
    import dagster as dg

    instance = dg.DagsterInstance.ephemeral()
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    policy = write_policy(tmp_path, policy_dict(str(traces)))
    config = {
        name: str(tmp_path / name.removesuffix("_dir")) for name in ("releases_dir", "work_dir", "ledger_dir", "alerts_dir")
    }
    result = execute_release(programme_for(policy), "2018-Q1", config, instance=instance)
    assert not result.success and result.publish is None
    b_count = 2  # cell B's devices in its bucket, by the fixture's construction
    texts: list[str] = [record.user_message for record in instance.all_logs(result.candidate.run_id)]
    rows: list[dict] = []
    for evaluation in result.get_asset_check_evaluations():
        texts.append(evaluation.description or "")
        for key, value in evaluation.metadata.items():
            texts.append(f"{key}: {json.dumps(value.value, default=str)}")
            if key == "offending":
                rows += list(value.value)
    for event in result.candidate.all_events:
        if event.event_type_value == "STEP_FAILURE" and event.step_failure_data.user_failure_data:
            texts.append(event.step_failure_data.user_failure_data.description or "")
    alerts = [json.loads(p.read_text()) for p in (tmp_path / "alerts").glob("*.json")]
    assert alerts, "the blocked run has an alert"
    texts += [json.dumps(alert) for alert in alerts]
    assert rows and all(set(row) <= PLACE_FIELDS for row in rows), [set(r) - PLACE_FIELDS for r in rows]
    named = [t for t in texts if cell_id(CELL_B) in t]
    assert named, "the blocked cell is named (its id: a place, not a figure)"
    ids = {cell_id(CELL_B), str(tmp_path)}
    leaking = [t for t in named if b_count in _standalone_integers(t, ids)]
    assert not leaking, leaking
