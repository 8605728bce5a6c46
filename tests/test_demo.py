"""`spatial-release demo`, the README's first command, publishes a release from generated traces."""

import json

import geopandas as gpd
import pandas as pd
import pytest
from support.paths import PROJECT_ROOT

from spatial_release import cli
from spatial_release.policy.zeros import read_structural_zeros

# Whole releases: left out of the fast tier (pytest -m "not slow").
pytestmark = pytest.mark.slow


def test_demo_publishes(tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    folder = out / "releases" / "demo" / "2018-Q1"
    assert str(folder) in printed and "wall time" in printed
    record = json.loads((folder / "release.json").read_text())
    cells = gpd.read_parquet(folder / "cells.parquet")
    zeros = read_structural_zeros(PROJECT_ROOT / "policies/demo-structural-zeros.csv")
    nonzero = cells[cells["n_persons"] > 0]
    assert nonzero["n_persons"].min() >= record["k"]
    assert set(cells.loc[cells["n_persons"] == 0, "cell_id"]) == set(zeros)  # structural zeros shown as 0
    margins = pd.read_parquet(folder / "margins.parquet")
    assert set(margins["level"]) == {"grid_2000m", "grid_8000m", "total"}
    # the report beside the tables, hashed with them
    assert set(record["files"]) == {"cells.parquet", "margins.parquet", "report.png", "report.html"}
    assert (folder / "report.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert '<img src="data:image/png;base64,' in (folder / "report.html").read_text()
    # the demo refuses to wipe a folder it did not make
    other = tmp_path / "mine"
    other.mkdir()
    assert cli.main(["demo", "--out", str(other)]) == 2
    # the README's command again into the same folder: the demo's own ledger is replaced on purpose, not
    # rolled back (its pin beside the signing key goes with it); the cut last week is published by neither
    assert cli.main(["demo", "--out", str(out)]) == 0, capsys.readouterr().err
    last_week = pd.Timestamp("2018-03-26", tz="America/New_York").tz_convert("UTC")
    cells = gpd.read_parquet(folder / "cells.parquet")
    assert (pd.to_datetime(cells["bucket_start"], utc=True) < last_week).all()
