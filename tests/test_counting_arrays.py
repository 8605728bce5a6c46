"""The packed path's scan in this process (`counting.arrayscan`: pyarrow reads the row groups, numpy projects
and keys the pings) gives what the SQL scan gives, and places every ping in its pyproj cell:
- edge points of every kind on a grid, each ping its own unit (the membership shows where it went);
- against the SQL packed scan and the SQL by-area path: the tables, the membership and the counts;
- zones with pings in no zone and unsure pings on shared edges;
- pings beyond the grid CRS's area of use (the `pings` view's filter), several files and row groups,
  millisecond instants, uneven (daily, across DST) buckets, a ping outside the period;
- the presence pass split into ranges of units over several threads;
- negative control: without the guard band, a polynomial off by a millimetre misplaces edge points."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.counting_inputs import edge_points, zones_with_pings_in_no_zone
from support.fixture import policy_dict
from support.spies import spy_packing

from spatial_release import stages
from spatial_release.counting import counts as counts_module
from spatial_release.counting import packed as packed_module
from spatial_release.counting.arrayscan import ArrayScan, ArrayZoning
from spatial_release.counting.counts import CountingError
from spatial_release.counting.engines import open_engine
from spatial_release.geometry import Grid
from spatial_release.period import Period
from spatial_release.policy import parse_policy
from spatial_release.progress import silent

PERIOD = Period.parse("2018-Q1")


def _grid_policy(bucket: str = "1h", size: int = 250, crs: str = "EPSG:32618"):
    data = policy_dict(
        "unused.csv",
        geometry={"kind": "grid", "crs": crs, "size_m": size, "parents_m": [4 * size]},
        time={"bucket": bucket, "timezone": "America/New_York"},
    )
    return parse_policy(data, Path("inline.yaml"))


def _spy_scan(monkeypatch) -> list:
    """Records each run of the scan in this process (its thread count)."""
    runs = []
    real = ArrayScan.run

    def spy(self, threads):
        runs.append(threads)
        return real(self, threads)

    monkeypatch.setattr(ArrayScan, "run", spy)
    return runs


def _count(policy, paths, out: Path, way: str = "arrays", monkeypatch=None, threads: int | None = None):
    """Counts the pings: `arrays` (the default), `sql-packed` (the packed path with the SQL scan) or
    `sql` (no packed path)."""
    if way == "sql-packed":
        monkeypatch.setattr(ArrayScan, "plan", classmethod(lambda cls, *args: None))
    if way == "sql":
        monkeypatch.setattr(counts_module, "packing_for", lambda *args: None)
    from spatial_release.counting.engines import DuckDBSettings

    with open_engine("duckdb", scratch=out / "scratch", duckdb_settings=DuckDBSettings(threads=threads)) as engine:
        return stages.count_validated_pings(policy, PERIOD, list(paths), out, engine, silent)


def _outputs(result) -> list[pd.DataFrame]:
    frames = [pd.read_parquet(p) for p in (result.cell_counts_path, result.margin_counts_path, result.membership_path)]
    return [f.sort_values(list(f.columns)).reset_index(drop=True) for f in frames]


def _figures(result) -> tuple:
    return (result.groups, result.units, result.unit_buckets, result.pings_located, result.pings_outside)


def _assert_same(fast, slow) -> None:
    for a, b in zip(_outputs(fast), _outputs(slow)):
        pd.testing.assert_frame_equal(a, b)
    assert _figures(fast) == _figures(slow)


def _random_pings(seed: int, n: int, hours: int = 6) -> pd.DataFrame:
    """n pings of 40 units over a few kilometres of the city, a tenth of them on cell edges."""
    rng = np.random.default_rng(seed)
    lon, lat = rng.uniform(-74.08, -74.02, n), rng.uniform(40.70, 40.74, n)
    edge_lon, edge_lat = edge_points("EPSG:32618", 250, n // 10, seed=seed, spread=20)
    lon[: n // 10], lat[: n // 10] = edge_lon, edge_lat
    return pd.DataFrame(
        {
            "unit": rng.integers(0, 40, n).astype(np.int64),
            "ts": pd.Timestamp("2018-02-01T10:00:00Z") + pd.to_timedelta(rng.integers(0, hours * 3600, n), unit="s"),
            "lon": lon,
            "lat": lat,
        }
    )


def test_every_ping_gets_its_pyproj_cell_through_the_array_scan(tmp_path, monkeypatch):
    lon, lat = edge_points("EPSG:32618", 250, 20_000, seed=11, spread=200)
    pings = pd.DataFrame(
        {"unit": np.arange(len(lon), dtype=np.int64), "ts": pd.Timestamp("2018-01-10T05:00Z"), "lon": lon, "lat": lat}
    )
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    runs = _spy_scan(monkeypatch)
    policy = _grid_policy()
    result = _count(policy, [path], tmp_path / "out")
    assert runs and "local polynomial" in result.methods["cell"]
    placed = pd.read_parquet(result.membership_path).set_index("unit")["cell_id"].reindex(pings["unit"])
    assert (placed.to_numpy() == Grid(policy.geometry).locate(lon, lat)).all()
    assert 0 < result.unsure_coordinates < len(lon)


def test_negative_control_without_the_guard_band_a_millimetre_misplaces_points(tmp_path, monkeypatch):
    """The test above can fail: the array scan's zoning with no guard band and its polynomial 1 mm off."""
    real = ArrayZoning.of

    def shifted(cls, plan):
        zoning = real(plan)
        assert zoning is not None and zoning.polynomial is not None  # a UTM grid: scanned with its polynomial
        poly = zoning.polynomial
        return replace(zoning, guard=0.0, polynomial=replace(poly, cx=(poly.cx[0] + 1e-3, *poly.cx[1:])))

    monkeypatch.setattr(ArrayZoning, "of", classmethod(shifted))
    lon, lat = edge_points("EPSG:32618", 250, 5_000, seed=3, spread=200)
    pings = pd.DataFrame(
        {"unit": np.arange(len(lon), dtype=np.int64), "ts": pd.Timestamp("2018-01-10T05:00Z"), "lon": lon, "lat": lat}
    )
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    policy = _grid_policy()
    result = _count(policy, [path], tmp_path / "out")
    placed = pd.read_parquet(result.membership_path).set_index("unit")["cell_id"].reindex(pings["unit"])
    assert (placed.to_numpy() != Grid(policy.geometry).locate(lon, lat)).sum() > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed, unit_type, ts_unit", [(1, np.int64, "us"), (2, np.int32, "ms"), (3, np.uint16, "us")])
def test_array_scan_equals_the_sql_scans(tmp_path, monkeypatch, seed, unit_type, ts_unit):
    pings = _random_pings(seed, 3_000)
    pings["unit"] = (pings["unit"] * 3 + (5 if np.issubdtype(unit_type, np.unsignedinteger) else -50)).astype(unit_type)
    pings["ts"] = pings["ts"].astype(f"datetime64[{ts_unit}, UTC]")
    path = tmp_path / "pings.parquet"
    pq.write_table(pa.Table.from_pandas(pings, preserve_index=False), path, row_group_size=700)
    policy = _grid_policy()
    runs = _spy_scan(monkeypatch)
    decided = spy_packing(monkeypatch)
    results = {}
    for way in ("arrays", "sql-packed", "sql"):
        results[way] = _count(policy, [path], tmp_path / way, way, monkeypatch)
    assert runs and decided[0] is not None and decided[1] is not None
    assert results["arrays"].unsure_coordinates > 0
    for way in ("sql-packed", "sql"):
        _assert_same(results["arrays"], results[way])
    assert pd.read_parquet(results["arrays"].membership_path)["unit"].dtype == unit_type


@pytest.mark.slow
def test_array_scan_on_zones_with_pings_in_no_zone(tmp_path, monkeypatch):
    policy, path = zones_with_pings_in_no_zone(tmp_path)
    runs = _spy_scan(monkeypatch)
    fast = _count(policy, [path], tmp_path / "arrays")
    assert runs and fast.pings_outside > 0 and fast.unsure_coordinates > 0
    slow = _count(policy, [path], tmp_path / "sql", "sql", monkeypatch)
    _assert_same(fast, slow)
    outside = [
        pd.read_parquet(r.outside_path).sort_values(["unit", "ts", "lon", "lat"]).reset_index(drop=True)
        for r in (fast, slow)
    ]
    pd.testing.assert_frame_equal(*outside)


def test_array_scan_with_pings_beyond_the_area_of_use_several_files_and_daily_buckets(tmp_path, monkeypatch):
    """Daily buckets in New York are uneven across the DST change (the slot table); a file with swapped
    coordinates puts pings beyond EPSG:32618's area of use, which the `pings` view filters out."""
    pings = _random_pings(4, 2_400, hours=24 * 50)  # to 23 March, past the DST change
    swapped = pings.iloc[:30].rename(columns={"lon": "lat", "lat": "lon"})
    paths = [tmp_path / f"pings{i}.parquet" for i in range(3)]
    pings.iloc[:1_200].to_parquet(paths[0])
    pd.concat([pings.iloc[1_200:], swapped]).to_parquet(paths[1])
    pings.iloc[:0].to_parquet(paths[2])  # an empty file
    policy = _grid_policy(bucket="1d")
    runs = _spy_scan(monkeypatch)
    fast = _count(policy, paths, tmp_path / "arrays")
    assert runs and fast.pings_outside == 30
    slow = _count(policy, paths, tmp_path / "sql", "sql", monkeypatch)
    _assert_same(fast, slow)
    assert len(pd.read_parquet(fast.outside_path)) == 30


def test_array_scan_refuses_a_ping_outside_the_period(tmp_path, monkeypatch):
    pings = _random_pings(5, 500)
    pings.loc[7, "ts"] = pd.Timestamp("2018-05-01T00:00:00Z")
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    runs = _spy_scan(monkeypatch)
    with pytest.raises(CountingError, match="1 ping"):
        _count(_grid_policy(), [path], tmp_path / "out")
    assert runs


def test_presence_split_over_threads_equals_one_thread(tmp_path, monkeypatch):
    """The presence pass cuts the keys into ranges of units, one per thread (`packed._unit_bounds`, here from
    200 keys on); the membership and counts are those of one thread."""
    real = packed_module._unit_bounds
    cuts = []

    def low_threshold(keys, shift, parts):
        bounds = real(np.concatenate([keys, np.full(100_000, -1, np.int64)]), shift, parts)
        cuts.append(len(bounds) - 1)
        return bounds

    monkeypatch.setattr(packed_module, "_unit_bounds", low_threshold)
    pings = _random_pings(6, 4_000, hours=48)
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    policy = _grid_policy()
    one = _count(policy, [path], tmp_path / "one", threads=1)
    three = _count(policy, [path], tmp_path / "three", threads=3)
    assert cuts == [1, 3]
    _assert_same(three, one)


@pytest.mark.slow
def test_array_path_with_a_time_ladder_equals_the_sql_path(tmp_path, monkeypatch):
    """Hours with a ladder of days and the period: the packed path's margins (sums in numpy) and its rungs
    (distinct units in SQL over its membership) against the SQL path's."""
    pings = _random_pings(7, 3_000, hours=24 * 5)
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    data = policy_dict(
        "unused.csv",
        geometry={"kind": "grid", "crs": "EPSG:32618", "size_m": 250, "parents_m": [1000]},
        time={"bucket": "1h", "timezone": "America/New_York", "ladder": ["1d", "period"]},
    )
    policy = parse_policy(data, Path("inline.yaml"))
    runs = _spy_scan(monkeypatch)
    fast = _count(policy, [path], tmp_path / "arrays")
    assert runs
    slow = _count(policy, [path], tmp_path / "sql", "sql", monkeypatch)
    _assert_same(fast, slow)
    assert pd.read_parquet(fast.margin_counts_path)["level"].str.contains("@").any()


def test_without_footer_statistics_the_sql_scan_runs_and_counts_the_same(tmp_path, monkeypatch):
    """Files written without column statistics: the packing comes from a query and the scan is the SQL one."""
    pings = _random_pings(9, 2_000)
    path, plain = tmp_path / "pings.parquet", tmp_path / "plain.parquet"
    pings.to_parquet(path)
    pq.write_table(pa.Table.from_pandas(pings, preserve_index=False), plain, write_statistics=False)
    policy = _grid_policy()
    runs = _spy_scan(monkeypatch)
    decided = spy_packing(monkeypatch)
    without = _count(policy, [plain], tmp_path / "plain")
    assert runs == [] and decided[0] is not None  # the packed path, with the SQL scan
    with_stats = _count(policy, [path], tmp_path / "stats")
    assert runs and decided[1] == decided[0]
    _assert_same(with_stats, without)
