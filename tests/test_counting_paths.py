"""The counting step's shortcuts give the same results as the long ways they replace (issue 13, item 4):
- hourly (even) buckets by arithmetic instead of the slot table;
- presence over one zoning whose keys compare like its ids, with keys as ranks and the dominant area found
  from (unit, bucket, area) counts (`_scan_presence_by_area`), against the generic path with its
  dictionary of ranks, on pings with ties, several areas per bucket, unsure points on cell edges and
  pings outside the period's hours;
- the pings' extent from the Parquet footers instead of a scan."""

from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyproj import Transformer

from conftest import policy_dict
from spatial_release import stages
from spatial_release.counting import count_pings, data_extent
from spatial_release.counting.buckets import bucket_slots
from spatial_release.counting.engines import open_engine
from spatial_release.counting.pings import footer_extent
from spatial_release.counting.plan import CompactGrid, ZoningPlan
from spatial_release.geometry import Grid
from spatial_release.geometry.grid import cell_name
from spatial_release.period import Period
from spatial_release.policy import parse_policy
from spatial_release.progress import silent

PERIOD = Period.parse("2018-Q1")


def _policy(bucket: str = "1h", timezone: str = "America/New_York", measure: str = "presence"):
    data = policy_dict("unused.csv", measure=measure,
                       geometry={"kind": "grid", "crs": "EPSG:32618", "size_m": 250, "parents_m": [1000]},
                       time={"bucket": bucket, "timezone": timezone})
    return parse_policy(data, Path("inline.yaml"))


@pytest.mark.parametrize("bucket, timezone", [("1h", "America/New_York"), ("6h", "America/New_York"),
                                              ("1d", "America/New_York"), ("1d", "UTC"), ("1w", "Asia/Kolkata"),
                                              ("1h", "Asia/Kathmandu"), ("2h", "Australia/Lord_Howe")])
def test_bucket_arithmetic_is_the_slot_table_or_refused(bucket, timezone):
    slots = bucket_slots(_policy(bucket, timezone), PERIOD)
    even = slots.arithmetic()
    table = np.asarray(slots.slot_bucket)
    if even is None:  # days across New York's DST change, Lord Howe's half-hour shift: not even
        assert (bucket, timezone) in {("1d", "America/New_York"), ("2h", "Australia/Lord_Howe")}
        return
    offset, per = even
    assert np.array_equal((np.arange(len(table)) + offset) // per, table)


def test_compact_keys_compare_like_ids_only_when_the_digits_agree():
    grid = Grid(_policy().geometry)
    for box, expected in ((CompactGrid(2269, 17978, 109, 111), True),  # the city: 6-digit x, 7-digit y
                          (CompactGrid(390, 17978, 20, 5), False)):  # x from 97,500 to 102,250: 5 and 6 digits
        plan = ZoningPlan("cell", (), "total", None, None, None, None, grid_size=250.0, compact=box,
                          key_bound=box.nx * box.ny)
        assert plan.keys_sort_like_ids is expected
        keys = np.arange(box.nx * box.ny)
        ids = cell_name(250, *box.decode(keys)).astype(str)
        assert (list(ids) == sorted(ids)) is expected


def _pings(seed: int, n: int) -> pd.DataFrame:
    """Pings of a few units in a few hours over a handful of cells, a quarter of them on a cell edge or corner
    (unsure: assigned by pyproj), so that buckets hold one, two and three or more cells and ties."""
    rng = np.random.default_rng(seed)
    to_lonlat = Transformer.from_crs("EPSG:32618", "EPSG:4326", always_xy=True)
    ix, iy = rng.integers(0, 3, n), rng.integers(0, 3, n)
    x = 581_000.0 + ix * 250 + rng.uniform(1, 249, n)
    y = 4_509_000.0 + iy * 250 + rng.uniform(1, 249, n)
    edge = rng.random(n) < 0.25
    x[edge] = 581_000.0 + ix[edge] * 250  # on the edge itself
    corner = rng.random(n) < 0.1
    y[corner] = 4_509_000.0 + iy[corner] * 250 + rng.choice([-1e-7, 0.0, 1e-7], corner.sum())
    lon, lat = to_lonlat.transform(x, y)
    start = pd.Timestamp("2018-02-01T10:00:00Z")
    return pd.DataFrame({"unit": rng.integers(0, 6, n).astype(np.int64),
                         "ts": start + pd.to_timedelta(rng.integers(0, 4 * 3600, n), unit="s"),
                         "lon": lon, "lat": lat})


def _outputs(result) -> list[pd.DataFrame]:
    frames = [pd.read_parquet(p) for p in (result.cell_counts_path, result.margin_counts_path,
                                           result.membership_path)]
    return [f.sort_values(list(f.columns)).reset_index(drop=True) for f in frames]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_presence_by_area_equals_the_generic_path(tmp_path, seed, monkeypatch):
    pings = _pings(seed, 400)
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    policy = _policy()
    results = {}
    for way in ("by_area", "generic"):
        if way == "generic":  # keys as ranks refused: the dictionary of ranks and the generic scan
            monkeypatch.setattr(ZoningPlan, "keys_sort_like_ids", property(lambda self: False))
        with open_engine("duckdb", scratch=tmp_path / f"scratch_{way}") as engine:
            results[way] = stages.count_validated_pings(policy, PERIOD, [path], tmp_path / way, engine, silent)
    fast, slow = results["by_area"], results["generic"]
    assert fast.unsure_coordinates > 0
    for a, b in zip(_outputs(fast), _outputs(slow)):
        pd.testing.assert_frame_equal(a, b)
    assert (fast.groups, fast.units, fast.unit_buckets, fast.pings_located, fast.pings_outside) == \
        (slow.groups, slow.units, slow.unit_buckets, slow.pings_located, slow.pings_outside)


def test_extent_from_the_footers_is_the_scanned_one(tmp_path):
    pings = _pings(4, 2_000)
    path = tmp_path / "pings.parquet"
    pq.write_table(pa.Table.from_pandas(pings), path, row_group_size=300)
    scanned = (pings["lon"].min(), pings["lat"].min(), pings["lon"].max(), pings["lat"].max())
    assert footer_extent([path]) == scanned
    with open_engine("duckdb", scratch=tmp_path / "scratch") as engine:
        assert data_extent(engine, [path], (-88.0, -10.0, -62.0, 90.0)) == scanned
        # a ping beyond the usable area: the footers' extent is not the answer, the scan (inside it) is
        far = pd.concat([pings, pings.iloc[:1].assign(lon=120.0, ts=pings["ts"].iloc[0] + timedelta(seconds=1))])
        far.to_parquet(tmp_path / "far.parquet")
        assert data_extent(engine, [tmp_path / "far.parquet"], (-88.0, -10.0, -62.0, 90.0)) == scanned
    pq.write_table(pa.Table.from_pandas(pings), tmp_path / "bare.parquet", write_statistics=False)
    assert footer_extent([tmp_path / "bare.parquet"]) is None


def test_count_pings_without_the_footer_shortcut_is_the_same(tmp_path, monkeypatch):
    from spatial_release.counting import pings as pings_module

    pings = _pings(5, 300)
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    policy = _policy()
    outputs = []
    for way in ("footers", "scan"):
        if way == "scan":
            monkeypatch.setattr(pings_module, "footer_extent", lambda paths: None)
        with open_engine("duckdb", scratch=tmp_path / f"scratch_{way}") as engine:
            plans = stages.zoning_plans(policy, engine, data_extent(engine, [path], (-88.0, -10.0, -62.0, 90.0)))
            outputs.append(_outputs(count_pings(policy, PERIOD, [path], plans, tmp_path / way, engine)))
    for a, b in zip(*outputs):
        pd.testing.assert_frame_equal(a, b)
