"""Citi Bike Jersey City 2018-Q1 under the advantage gate (risk.model: advantage): the shipped quarterly policy with
only its model changed publishes, every ward shown by the day or the week, and release.json carries the per-zone
table. Figures are re-derived from the published files, not read from the report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from spatial_release.cli import run_release

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not (SHARED / "citibike-jc").is_dir(), reason="../shared/data (Citi Bike) is absent")

COLUMNS = {"zone", "targets", "success_without", "success_with", "advantage", "advantage_ucb", "strongest"}
COLUMNS |= {"exposed_share", "uniqueness_bound"}


def _advantage_policy(tmp: Path) -> Path:
    """jc-bikes.yaml with risk.model advantage and every path it names made absolute."""
    source = ROOT / "policies" / "jc-bikes.yaml"
    data = yaml.safe_load(source.read_text())
    base = source.parent
    data["source"]["paths"] = [str((base / p).resolve()) for p in data["source"]["paths"]]
    data["geometry"]["path"] = str((base / data["geometry"]["path"]).resolve())
    for linked in data["geometry"].get("linked", []):
        linked["path"] = str((base / linked["path"]).resolve())
    landscape = yaml.safe_load((base / data["risk"]["landscape"]).read_text())
    land_base = (base / data["risk"]["landscape"]).parent
    landscape["population"]["path"] = str((land_base / landscape["population"]["path"]).resolve())
    (tmp / "landscape.yaml").write_text(yaml.safe_dump(landscape))
    data["risk"].update(model="advantage", landscape=str(tmp / "landscape.yaml"))
    data["suppression"].pop("audit_with", None)  # the monthly programme's policy is not beside this copy
    path = tmp / "jc-bikes.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_citibike_quarter_publishes_under_the_advantage_gate(tmp_path):
    outcome = run_release(
        str(_advantage_policy(tmp_path)), "2018-Q1", out=str(tmp_path / "out"), ledger=str(tmp_path / "ledger")
    )
    assert outcome.published, [f.message for f in outcome.failures]
    folder = Path(outcome.release_dir)
    risk = json.loads((folder / "release.json").read_text())["risk"]
    assert risk["model"] == "advantage" and risk["status"] in ("publish", "warn")
    zones = risk["zones"]
    assert {z["zone"] for z in zones} >= set("ABCDEF")
    for zone in zones:
        assert set(zone) == COLUMNS
        assert max(zone["advantage_ucb"], zone["exposed_share"] or 0) <= 0.05
        assert zone["success_with"] >= zone["success_without"]
    # each ward is shown by the day or by the week in at least 3/4 of the quarter's weeks (re-derived from files)
    cells = pd.read_parquet(folder / "cells.parquet")
    margins = pd.read_parquet(folder / "margins.parquet")
    weekly = margins[margins["level"] == "cell@1w"]
    starts = pd.to_datetime(weekly["bucket_start"], utc=True)
    all_weeks = starts.drop_duplicates()
    for ward in "ABCDEF":
        shown = set(starts[weekly["area_id"] == ward])
        days = pd.to_datetime(cells.loc[cells["cell_id"] == ward, "bucket_start"], utc=True)
        shown |= {w for w in all_weeks if ((days >= w) & (days < w + pd.Timedelta(days=7))).any()}
        assert len(shown) >= 0.75 * len(all_weeks), ward
