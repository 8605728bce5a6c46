"""Attack: read the withheld figures off what is published beside the tables. release.json and the
Dagster metadata used to carry the units withheld per level, the smallest count before suppression and the
total of unit counts: linear facts about withheld cells that the attacker-LP audit never saw. Every number
published must now be derivable from the published tables (re-derived here) or be a policy, input-ping or
risk-gate figure."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import geopandas as gpd
import pandas as pd

from conftest import fixture_pings, policy_dict, write_policy
from spatial_release.defs.catalogue import programme_for
from spatial_release.defs.execution import execute_release

# Facts about withheld cells (or units) that must never be published.
WITHHELD_FACTS = {"groups", "smallest_count_before", "primary_cells", "secondary_cells", "withheld_margins",
                  "unit_counts_withheld", "unit_counts_total", "share_withheld", "by_level", "units_withheld",
                  "units_counted", "primaries_audited", "components", "smallest_margin_to_bound",
                  "groups_below_k", "units_below_k", "cells_withheld", "withheld_by_level", "attacker_lo",
                  "attacker_up", "value", "units", "dagster/row_count"}


def _keys(obj: object) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _keys(v)}
    return set()


def _run(tmp_path: Path):
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    policy = write_policy(tmp_path, policy_dict(str(traces)))
    config = {"releases_dir": str(tmp_path / "releases"), "work_dir": str(tmp_path / "work"),
              "ledger_dir": str(tmp_path / "ledger"), "alerts_dir": str(tmp_path / "alerts")}
    return execute_release(programme_for(policy), "2018-01-01", config)


def test_release_json_and_metadata_carry_no_fact_about_withheld_cells(tmp_path):
    result = _run(tmp_path)
    assert result.success
    folder = tmp_path / "releases" / "fixture" / "2018-Q1"
    record = json.loads((folder / "release.json").read_text())
    assert not WITHHELD_FACTS & _keys(record), WITHHELD_FACTS & _keys(record)
    cells, margins = gpd.read_parquet(folder / "cells.parquet"), pd.read_parquet(folder / "margins.parquet")
    nonzero = cells[cells["n_devices"] > 0]
    assert record["counts"] == {"published_cells": len(nonzero), "published_margins": len(margins),
                                "smallest_published_count": int(nonzero["n_devices"].min()),
                                "structural_zero_cells_published": int((cells["n_devices"] == 0).sum()),
                                "published_by_level": {"cell": len(nonzero), **{
                                    str(k): int(v) for k, v in margins["level"].value_counts().sort_index().items()}}}
    metadata_keys: set[str] = set()
    for event in result.get_asset_materialization_events():
        if event.asset_key.path[-1] == "risk_assessment":
            # the per-zone risk table counts the units of each zone's published keys: computed from published
            # cells only (never from a withheld one), so it is no fact about withheld cells
            continue
        for key, value in event.materialization.metadata.items():
            if key == "dagster/row_count" and event.asset_key.path[-1] in ("protected_table", "validated_pings"):
                continue  # published cells (derivable from the tables) and valid pings (not units)
            metadata_keys |= {key} | _keys(getattr(value, "value", None))
    for evaluation in result.get_asset_check_evaluations():
        if evaluation.check_name == "risk_budget":
            continue  # the worst zone's row of the risk table (see above)
        for key, value in evaluation.metadata.items():
            metadata_keys |= {key} | _keys(getattr(value, "value", None))
    assert not WITHHELD_FACTS & metadata_keys, WITHHELD_FACTS & metadata_keys
    # the operator still has every figure, in the owner-only work area
    work = tmp_path / "work" / "fixture" / "2018-Q1"
    internal = json.loads((work / "candidate" / "manifest.json").read_text())["summary"]
    assert internal["primary_cells"] == 2 and internal["unit_counts_withheld"] == 3
    assert json.loads((work / "audit.internal.json").read_text())["primaries_audited"] == 2
