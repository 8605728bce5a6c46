"""Attack: the coordinates of a trace file are swapped (or of another region), so its pings pass every
per-row validation and then fall outside the geometry. Before the outside_share check, the release
published with those pings silently missing."""

from __future__ import annotations

import numpy as np

from conftest import fixture_pings, policy_dict, write_policy
from spatial_release import cli
from spatial_release.geometry import coverage

UTM18N_AREA = coverage.crs_area_of_use("EPSG:32618")


def test_diagnosis_names_swapped_axes_and_flipped_signs():
    rng = np.random.default_rng(1)
    lon, lat = rng.uniform(-74.1, -74.0, 50), rng.uniform(40.7, 40.8, 50)
    assert "latitude and longitude swapped" in coverage.diagnose(lat, lon, UTM18N_AREA)
    assert "longitude with the wrong sign" in coverage.diagnose(-lon, lat, UTM18N_AREA)
    other_region = coverage.diagnose(lon + 100, lat, UTM18N_AREA)
    assert "swapped" not in other_region and "another region" in other_region


def _release(tmp_path, frame, **source) -> tuple[int, str]:
    traces = tmp_path / "traces-2018-01.csv"
    frame.to_csv(traces, index=False)
    data = policy_dict(str(traces))
    data["source"].update(source)
    policy = write_policy(tmp_path, data)
    out = tmp_path / "out"
    code = cli.main(["release", "--policy", str(policy), "--period", "2018-Q1", "--out", str(out),
                     "--ledger", str(tmp_path / "ledger")])
    return code, out


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


def test_a_few_strays_within_the_ceiling_publish(tmp_path, capsys):
    """Control: one swapped ping of 90 (1.1 %) is within a 2 % ceiling, and the release publishes."""
    frame = fixture_pings()
    frame.loc[0, ["lon", "lat"]] = frame.loc[0, ["lat", "lon"]].to_numpy()
    code, out = _release(tmp_path, frame, max_outside_share=0.02)
    assert code == 0, capsys.readouterr().out
    assert (out / "releases" / "fixture" / "2018-Q1" / "release.json").exists()
