"""Attack: the coordinates of a trace file are swapped (or of another region), so its pings pass every
per-row validation and then fall outside the geometry. Before the outside_share check, the release
published with those pings silently missing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.fixture import fixture_pings, policy_dict, write_policy
from support.paths import PROJECT_ROOT, SHARED_DATA, requires_shared
from support.releases import release

from spatial_release.geometry import coverage

UTM18N_AREA = coverage.crs_area_of_use("EPSG:32618")


def test_diagnosis_names_swapped_axes_and_flipped_signs():
    rng = np.random.default_rng(1)
    lon, lat = rng.uniform(-74.1, -74.0, 50), rng.uniform(40.7, 40.8, 50)
    assert "latitude and longitude swapped" in coverage.diagnose(lat, lon, UTM18N_AREA)
    assert "longitude with the wrong sign" in coverage.diagnose(-lon, lat, UTM18N_AREA)
    other_region = coverage.diagnose(lon + 100, lat, UTM18N_AREA)
    assert "swapped" not in other_region and "another region" in other_region


def _run(capsys, policy: Path, root: Path, traces: list[Path] | None = None) -> tuple[int, str]:
    """`spatial-release release` of 2018-Q1 into `root`: exit code and everything it printed."""
    code = release(policy, root, traces=traces)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _release(tmp_path, frame, **source) -> tuple[int, Path]:
    traces = tmp_path / "traces-2018-01.csv"
    frame.to_csv(traces, index=False)
    data = policy_dict(str(traces))
    data["source"].update(source)
    return release(write_policy(tmp_path, data), tmp_path), tmp_path / "out"


@pytest.mark.slow
def test_swapped_coordinates_block_the_release_and_name_the_file(tmp_path, capsys):
    frame = fixture_pings()
    frame[["lon", "lat"]] = frame[["lat", "lon"]].to_numpy()
    code, out = _release(tmp_path, frame)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 1, text
    assert "outside_share" in text and "traces-2018-01.csv" in text
    assert "latitude and longitude swapped" in text
    assert not (out / "releases" / "fixture" / "2018-Q1").exists()
    assert not (tmp_path / "ledger" / "entries.jsonl").exists()


@pytest.mark.slow
def test_a_few_strays_within_the_ceiling_publish(tmp_path, capsys):
    """Control: one swapped ping of 90 (1.1 %) is within a 2 % ceiling, and the release publishes."""
    frame = fixture_pings()
    frame.loc[0, ["lon", "lat"]] = frame.loc[0, ["lat", "lon"]].to_numpy()
    code, out = _release(tmp_path, frame, max_outside_share=0.02)
    assert code == 0, capsys.readouterr().out
    folder = out / "releases" / "fixture" / "2018-Q1"
    record = json.loads((folder / "release.json").read_text())
    # the stray is outside (reported), never counted in a cell thousands of km away
    assert record["input"]["pings_outside_geometry"] == 1
    membership = pd.read_parquet(out / "work/fixture/2018-Q1/counts/membership.internal.parquet")
    assert not membership["cell_id"].str.contains("N-").any()
    assert membership.loc[membership["unit"] == frame.loc[0, "device"], "cell_id"].nunique() == 1


@pytest.mark.slow
def test_the_swapped_file_is_named_among_several(tmp_path, capsys):
    """Two files, the second with its axes swapped: the report attributes the outside pings to it."""
    good, bad = fixture_pings(), fixture_pings()
    bad[["lon", "lat"]] = bad[["lat", "lon"]].to_numpy()
    good.to_csv(tmp_path / "traces-2018-01.csv", index=False)
    bad.to_csv(tmp_path / "traces-2018-02.csv", index=False)
    policy = write_policy(tmp_path, policy_dict(str(tmp_path / "traces-*.csv")))
    code, text = _run(capsys, policy, tmp_path)
    assert code == 1, text
    # files are named by their place in the ingest's list (a per-device export's name is a unit id); the
    # owner-only ingest.json maps the place to the name
    import json

    files = json.loads((tmp_path / "out/work/fixture/2018-Q1/ingest/ingest.json").read_text())["files"]
    bad_place = [i for i, f in enumerate(files, 1) if f.endswith("traces-2018-02.csv")][0]
    assert f"input file {bad_place} of 2: {len(bad):,} of {len(bad):,} (100.0%)" in text
    assert f"input file {3 - bad_place} of 2: 0 of" not in text  # a file with nothing outside is not listed
    # the name is on the operator's terminal only, in the legend the command line prints
    named = [line for line in text.splitlines() if "traces-2018-02.csv" in line]
    assert named == [f"input file {bad_place} of 2 is {tmp_path / 'traces-2018-02.csv'}"], named


@pytest.mark.slow
@requires_shared
def test_a_month_of_citi_bike_trips_with_swapped_coordinates_blocks(tmp_path, capsys):
    """The reproduced attack: February 2018's trips with latitude and longitude swapped published with
    that month silently missing (34,391 pings outside the geometry). Now the release blocks and names it."""
    files = []
    for month in ("01", "02", "03"):
        trips = pd.read_csv(SHARED_DATA / f"citibike-jc/JC-2018{month}-citibike-tripdata.csv", dtype=str)
        if month == "02":
            for end in ("start", "end"):
                lon, lat = f"{end} station longitude", f"{end} station latitude"
                trips[[lon, lat]] = trips[[lat, lon]].to_numpy()
        path = tmp_path / f"JC-2018{month}-citibike-tripdata.csv"
        trips.to_csv(path, index=False)
        files.append(path)
    out = tmp_path / "out"
    code, text = _run(capsys, PROJECT_ROOT / "policies/jc-bikes.yaml", tmp_path, files)
    assert code == 1, text
    assert "outside_share" in text and "JC-201802-citibike-tripdata.csv" in text
    assert "latitude and longitude swapped" in text
    assert not (out / "releases" / "jc-bikes" / "2018-Q1").exists()


def test_no_polynomial_is_fitted_over_an_extent_where_the_projection_is_undefined():
    """Found by the attack above: a good file beside a swapped one gave an extent reaching the far side of
    the UTM zone, pyproj returned inf there, and the fit wrote NaN coefficients into the counting SQL."""
    from spatial_release.geometry.sqlproj import fitted_projection

    assert fitted_projection("EPSG:32618", (-74.1, -74.1, 40.8, 40.8)) is None
    assert fitted_projection("EPSG:32618", (-74.1, 40.6, -74.0, 40.8)) is not None  # control: a city
