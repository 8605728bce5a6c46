import hashlib
from datetime import date

import numpy as np
import pandas as pd
import pytest
from support.paths import PROJECT_ROOT

from spatial_release.geometry import Grid
from spatial_release.policy import GridGeometry
from spatial_release.policy.zeros import ZerosFileError, read_structural_zeros
from spatial_release.traces.synthetic import SyntheticConfig, empty_cells, generate_pings

SMALL = SyntheticConfig(persons=400, days=14, start=date(2018, 1, 1), seed=11)


@pytest.fixture(scope="module")
def pings() -> pd.DataFrame:
    return generate_pings(SMALL)


def _digest(frame: pd.DataFrame) -> str:
    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).values.tobytes()).hexdigest()


def test_seeded_and_deterministic(pings):
    assert _digest(generate_pings(SMALL)) == _digest(pings)
    assert _digest(generate_pings(SyntheticConfig(persons=400, days=14, seed=12))) != _digest(pings)


def test_bursty_devices_ping_dozens_of_times_in_one_place(pings):
    hour = pd.to_datetime(pings["local_time"]).dt.floor("h")
    per_hour = pings.groupby([pings["device_id"], hour]).size()
    assert per_hour.max() >= 20
    bursty = per_hour[per_hour >= 20].index.get_level_values(0).unique()
    assert 0 < len(bursty) < 0.2 * SMALL.persons  # some devices, not all


def test_empty_areas_stay_empty_and_match_the_published_zeros_list(pings):
    grid = Grid(GridGeometry(kind="grid", crs="EPSG:32618", size_m=500))
    cells = set(grid.locate(pings["lon"].to_numpy(), pings["lat"].to_numpy()))
    zeros = set(empty_cells(SyntheticConfig(), 500))
    assert zeros and not (cells & zeros)
    # the committed demo list is exactly what the generator designates as empty
    assert read_structural_zeros(PROJECT_ROOT / "policies/demo-structural-zeros.csv") == frozenset(zeros)


def test_periphery_is_sparse(pings):
    grid = Grid(GridGeometry(kind="grid", crs="EPSG:32618", size_m=500))
    per_cell = (
        pd.Series(grid.locate(pings["lon"].to_numpy(), pings["lat"].to_numpy()))
        .groupby(pings["device_id"].to_numpy())
        .first()
        .value_counts()
    )
    assert per_cell.max() > 10 * per_cell.median()  # a dense core and a long tail of sparse cells


def test_homes_and_work_anchors(pings):
    # most pings of a person fall within a few cells: anchors, not a random walk
    grid = Grid(GridGeometry(kind="grid", crs="EPSG:32618", size_m=500))
    cells = pd.Series(grid.locate(pings["lon"].to_numpy(), pings["lat"].to_numpy()))
    top2 = cells.groupby(pings["device_id"].to_numpy()).apply(lambda s: s.value_counts().head(2).sum() / len(s))
    assert np.median(top2) > 0.6


def test_zeros_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "zeros.csv"
    bad.write_text("cell\nx\n")
    with pytest.raises(ZerosFileError, match="zeros.csv: expected a 'cell_id' column"):
        read_structural_zeros(bad)


def test_zeros_that_are_not_cells_of_the_geometry_are_refused(tmp_path):
    import yaml

    from spatial_release import stages
    from spatial_release.policy import load_policy

    data = yaml.safe_load((PROJECT_ROOT / "policies/demo.yaml").read_text())
    (tmp_path / "zeros.csv").write_text("cell_id\n500mE583000N4507000\n250mE1000N2000\nlake\n")
    data["suppression"]["zeros"] = str(tmp_path / "zeros.csv")
    data["risk"]["landscape"] = str(PROJECT_ROOT / "policies/landscapes/demo.yaml")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ZerosFileError, match=r"2 listed cell\(s\) are not cells of the policy's geometry"):
        stages.structural_zeros(load_policy(tmp_path / "p.yaml"))
    assert stages.structural_zeros(load_policy(PROJECT_ROOT / "policies/demo.yaml"))  # the shipped list is valid


@pytest.mark.parametrize(
    "first_person",
    [0, 999_800],  # ids of 6 digits only (rows ordered on numbers); ids crossing 10^6 (ordered by pandas on text)
)
def test_the_frame_is_the_one_pandas_sorting_on_the_ids_text_gives(monkeypatch, first_person):
    from spatial_release.traces import synthetic

    config = SyntheticConfig(persons=300, days=21, first_person=first_person)
    got = generate_pings(config)
    monkeypatch.setattr(synthetic, "_pings_frame", synthetic._pings_frame_by_sorting)
    reference = generate_pings(config)
    pd.testing.assert_frame_equal(got, reference, check_exact=True)
    assert (got["device_id"].str.len() > 10).any() == (first_person > 0)  # the second case does cross 10^6
    # negative control: the same rows in another order are told apart
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(got.iloc[::-1].reset_index(drop=True), reference, check_exact=True)
