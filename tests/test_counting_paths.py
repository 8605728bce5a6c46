"""The counting step's shortcuts give the same results as the long ways they replace:
- hourly (even) buckets by arithmetic instead of the slot table;
- presence over one zoning whose keys compare like its ids, with keys as ranks and the dominant area found
  from (unit, bucket, area) counts (`_scan_presence_by_area`), against the generic path with its
  dictionary of ranks, on pings with ties, several areas per bucket, unsure points on cell edges and
  pings outside the period's hours;
- the pings' extent from the Parquet footers instead of a scan."""

from pathlib import Path
from typing import NoReturn

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyproj import Transformer
from support.counting_inputs import zones_policy_dict, zones_with_pings_in_no_zone
from support.fixture import policy_dict
from support.spies import spy_packing

from spatial_release import stages
from spatial_release.counting import count_pings, data_extent
from spatial_release.counting import counts as counts_module
from spatial_release.counting.buckets import bucket_slots
from spatial_release.counting.engines import open_engine
from spatial_release.counting.packed import Packing, presence_from_keys
from spatial_release.counting.plan import CompactGrid, ZoningPlan
from spatial_release.geometry.grid import cell_name
from spatial_release.period import Period
from spatial_release.policy import parse_policy
from spatial_release.progress import silent

PERIOD = Period.parse("2018-Q1")


def _policy(bucket: str = "1h", timezone: str = "America/New_York", measure: str = "presence"):
    data = policy_dict(
        "unused.csv",
        measure=measure,
        geometry={"kind": "grid", "crs": "EPSG:32618", "size_m": 250, "parents_m": [1000]},
        time={"bucket": bucket, "timezone": timezone},
    )
    return parse_policy(data, Path("inline.yaml"))


@pytest.mark.parametrize(
    "bucket, timezone",
    [
        ("1h", "America/New_York"),
        ("6h", "America/New_York"),
        ("1d", "America/New_York"),
        ("1d", "UTC"),
        ("1w", "Asia/Kolkata"),
        ("1h", "Asia/Kathmandu"),
        ("2h", "Australia/Lord_Howe"),
    ],
)
def test_bucket_arithmetic_is_the_slot_table_or_refused(bucket, timezone):
    slots = bucket_slots(_policy(bucket, timezone), PERIOD)
    even = slots.arithmetic()
    table = np.asarray(slots.slot_bucket)
    if even is None:  # days across New York's DST change, Lord Howe's half-hour shift: not even
        assert (bucket, timezone) in {("1d", "America/New_York"), ("2h", "Australia/Lord_Howe")}
        return
    offset, per = even
    assert np.array_equal((np.arange(len(table)) + offset) // per, table)


def _unused(*_: object) -> NoReturn:
    raise AssertionError("a plan's placement callables are not needed to compare its keys")


def test_compact_keys_compare_like_ids_only_when_the_digits_agree():
    for box, expected in (
        (CompactGrid(2269, 17978, 109, 111), True),  # the city: 6-digit x, 7-digit y
        (CompactGrid(390, 17978, 20, 5), False),
    ):  # x from 97,500 to 102,250: 5 and 6 digits
        plan = ZoningPlan(
            "cell", (), "total", None, _unused, _unused, _unused, grid_size=250.0, compact=box, key_bound=box.nx * box.ny
        )
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
    return pd.DataFrame(
        {
            "unit": rng.integers(0, 6, n).astype(np.int64),
            "ts": start + pd.to_timedelta(rng.integers(0, 4 * 3600, n), unit="s"),
            "lon": lon,
            "lat": lat,
        }
    )


def _outputs(result) -> list[pd.DataFrame]:
    frames = [pd.read_parquet(p) for p in (result.cell_counts_path, result.margin_counts_path, result.membership_path)]
    return [f.sort_values(list(f.columns)).reset_index(drop=True) for f in frames]


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed, unit_type",
    [(1, np.int64), (2, np.int32), (3, np.int16), (4, np.uint32), (5, np.int8), (6, np.uint8), (7, np.uint16)],
)
def test_packed_keys_and_presence_by_area_equal_the_generic_path(tmp_path, seed, unit_type, monkeypatch):
    pings = _pings(seed, 400)
    unsigned = np.issubdtype(unit_type, np.unsignedinteger)
    pings["unit"] = (pings["unit"] * 3 + (0 if unsigned else -7)).astype(unit_type)
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    policy = _policy()
    results = {}
    decided = spy_packing(monkeypatch)
    for way in ("packed", "by_area", "generic"):
        if way == "by_area":  # the SQL scan with keys as ranks
            monkeypatch.setattr(counts_module, "packing_for", lambda *args: None)
        if way == "generic":  # keys as ranks refused: the dictionary of ranks and the generic scan
            monkeypatch.setattr(ZoningPlan, "keys_sort_like_ids", property(lambda self: False))
        with open_engine("duckdb", scratch=tmp_path / f"scratch_{way}") as engine:
            results[way] = stages.count_validated_pings(policy, PERIOD, [path], tmp_path / way, engine, silent)
    assert len(decided) == 1 and decided[0] is not None  # the first way did take the packed path
    assert results["packed"].unsure_coordinates > 0
    for way in ("by_area", "generic"):
        fast, slow = results["packed"], results[way]
        for a, b in zip(_outputs(fast), _outputs(slow)):
            pd.testing.assert_frame_equal(a, b)
        assert (
            fast.groups,
            fast.units,
            fast.unit_buckets,
            fast.pings_located,
            fast.pings_outside,
            fast.unsure_coordinates,
        ) == (slow.groups, slow.units, slow.unit_buckets, slow.pings_located, slow.pings_outside, slow.unsure_coordinates)
    assert pd.read_parquet(results["packed"].membership_path)["unit"].dtype == unit_type


@pytest.mark.slow
@pytest.mark.parametrize(
    "units, why",
    [
        (lambda u: "d" + u.astype(str), "text ids"),
        (lambda u: u * 2**55, "a span of units x hours x cells over 2^62"),
        (lambda u: u.astype("Int64").where(u != 3), "a NULL unit id"),
    ],
)
def test_packed_path_declines_what_it_cannot_pack_and_the_counts_are_the_same(tmp_path, monkeypatch, units, why):
    pings = _pings(6, 300)
    reference = tmp_path / "reference.parquet"
    pings.to_parquet(reference)
    pings["unit"] = units(pings["unit"])
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    decided = spy_packing(monkeypatch)
    results = []
    for name, source in (("declined", path), ("packed", reference)):
        with open_engine("duckdb", scratch=tmp_path / f"scratch_{name}") as engine:
            results.append(stages.count_validated_pings(_policy(), PERIOD, [source], tmp_path / name, engine, silent))
    assert decided[0] is None and decided[1] is not None, why
    declined, packed = (_outputs(r) for r in results)
    for a, b in zip(declined[:2], packed[:2]):  # cells and margins: the unit ids do not show
        pd.testing.assert_frame_equal(a, b)
    assert len(declined[2]) == len(packed[2])


def _dominant_by_pandas(unit, bucket, area) -> pd.DataFrame:
    """The dominant area of every (unit, bucket), worked out the long way: most pings, ties to the smallest."""
    per = pd.DataFrame({"unit": unit, "b": bucket, "rank": area}).value_counts().rename("n").reset_index()
    per = per.sort_values(["unit", "b", "n", "rank"], ascending=[True, True, False, True])
    return per.drop_duplicates(["unit", "b"])[["unit", "b", "rank"]].reset_index(drop=True)


def _check_against_pandas(counts, unit, bucket, area) -> None:
    expected = _dominant_by_pandas(unit, bucket, area)
    pd.testing.assert_frame_equal(counts.member.to_pandas(), expected, check_dtype=False)
    leaf = expected.groupby(["rank", "b"]).size().rename("n").reset_index()
    pd.testing.assert_frame_equal(counts.leaf.to_pandas(), leaf, check_dtype=False)
    assert counts.units == expected["unit"].nunique()


def _packed(unit, bucket, area, unit_min: int, n_buckets: int, n_areas: int):
    packing = Packing(unit_min, max(n_buckets - 1, 1).bit_length(), (n_areas + 1).bit_length(), pa.int64())
    keys = np.sort(((((unit - unit_min) << packing.bucket_bits) | bucket) << packing.slot_bits) | (area + 1))
    return keys, packing


@pytest.mark.parametrize("seed", range(6))
def test_presence_from_keys_is_the_dominant_area_with_ties_to_the_smallest(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5_000))
    unit_min, n_buckets, n_areas = int(rng.integers(-50, 50)), int(rng.integers(1, 6)), int(rng.integers(1, 5))
    unit = rng.integers(unit_min, unit_min + 30, n)
    bucket, area = rng.integers(0, n_buckets, n), rng.integers(0, n_areas, n)  # few areas: many ties
    keys, packing = _packed(unit, bucket, area, unit_min, n_buckets, n_areas)
    _check_against_pandas(presence_from_keys(keys, packing), unit, bucket, area)


def test_presence_from_keys_negative_control_the_check_catches_a_tie_broken_the_wrong_way():
    """The check above would see a dominant area taken on the larger key: here two pings in area 1 and two
    in area 2 give area 1; the same result with area 2 (a tie to the larger) fails the check."""
    unit, bucket, area = np.array([0, 0, 0, 0]), np.zeros(4, np.int64), np.array([2, 1, 2, 1])
    keys, packing = _packed(unit, bucket, area, 0, 1, 3)
    counts = presence_from_keys(keys, packing)
    assert counts.member.column("rank").to_pylist() == [1]
    _check_against_pandas(counts, unit, bucket, area)
    wrong = type(counts)(
        counts.member.set_column(2, "rank", pa.array([2])), counts.leaf.set_column(0, "rank", pa.array([2])), counts.units
    )
    with pytest.raises(AssertionError):
        _check_against_pandas(wrong, unit, bucket, area)


@pytest.mark.slow
def test_one_engine_counts_twice_through_both_paths(tmp_path):
    """The packed path leaves its membership as a view of Arrow arrays, the SQL paths as a table under the
    same name: counting again on the same engine, either way round, replaces it and gives the same tables."""
    pings = _pings(7, 300)
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    policy = _policy()
    outputs = []
    with open_engine("duckdb", scratch=tmp_path / "scratch") as engine:
        plans = stages.zoning_plans(policy, engine, data_extent(engine, [path], (-88.0, -10.0, -62.0, 90.0)))
        for i, packed in enumerate((True, False, True)):
            result = count_pings(policy, PERIOD, [path], plans, tmp_path / f"out{i}", engine, packed_keys=packed)
            outputs.append(_outputs(result))
    for other in outputs[1:]:
        for a, b in zip(outputs[0], other):
            pd.testing.assert_frame_equal(a, b)


@pytest.mark.slow
def test_packed_path_on_zones_with_pings_in_no_zone_equals_the_sql_path(tmp_path, monkeypatch):
    """Zones leave pings in no area (slot 0) and unsure pings on shared edges that the exact assignment puts
    in no zone: the packed path's outside counts, outside file and tables against the SQL path's."""
    policy, path = zones_with_pings_in_no_zone(tmp_path)
    decided = spy_packing(monkeypatch)
    results = {}
    for way in ("packed", "sql"):
        if way == "sql":
            monkeypatch.setattr(counts_module, "packing_for", lambda *args: None)
        with open_engine("duckdb", scratch=tmp_path / f"scratch_{way}") as engine:
            results[way] = stages.count_validated_pings(policy, PERIOD, [path], tmp_path / way, engine, silent)
    assert decided[0] is not None
    fast, slow = results["packed"], results["sql"]
    assert fast.pings_outside > 0 and fast.unsure_coordinates > 0
    for a, b in zip(_outputs(fast), _outputs(slow)):
        pd.testing.assert_frame_equal(a, b)
    outside = [
        pd.read_parquet(r.outside_path).sort_values(["unit", "ts", "lon", "lat"]).reset_index(drop=True)
        for r in (fast, slow)
    ]
    pd.testing.assert_frame_equal(*outside)
    assert (fast.groups, fast.units, fast.unit_buckets, fast.pings_located, fast.pings_outside, fast.unsure_coordinates) == (
        slow.groups,
        slow.units,
        slow.unit_buckets,
        slow.pings_located,
        slow.pings_outside,
        slow.unsure_coordinates,
    )


@pytest.mark.slow
def test_packed_path_declines_past_the_memory_limit_and_reads_it(tmp_path, monkeypatch):
    from spatial_release.counting import packed
    from spatial_release.counting.engines import DuckDBEngine, DuckDBSettings

    limited = DuckDBEngine(DuckDBSettings(memory_limit="2GB"))
    assert 1.7 * 2**30 < packed._memory_limit(limited) < 2.0 * 10**9  # DuckDB reports '1.8 GiB'
    limited.close()
    pings = _pings(9, 200)
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    decided = spy_packing(monkeypatch)
    outputs = []
    for bytes_per_ping in (packed.BYTES_PER_PING, 10**15):  # 200 pings x 10^15 bytes: past any limit
        monkeypatch.setattr(packed, "BYTES_PER_PING", bytes_per_ping)
        with open_engine("duckdb", scratch=tmp_path / f"scratch_{bytes_per_ping}") as engine:
            outputs.append(
                _outputs(
                    stages.count_validated_pings(
                        _policy(), PERIOD, [path], tmp_path / f"out_{bytes_per_ping}", engine, silent
                    )
                )
            )
    assert decided[0] is not None and decided[1] is None
    for a, b in zip(*outputs):
        pd.testing.assert_frame_equal(a, b)


@pytest.mark.slow
def test_packed_path_declines_a_null_coordinate_which_the_sql_path_counts_outside(tmp_path, monkeypatch):
    """Ingest quarantines NULL coordinates; a caller who passes one anyway gets the SQL path's answer (the
    ping in no zone), not a zone made up from a NULL area key."""
    pings = pd.DataFrame(
        {
            "unit": np.array([1, 1, 2], np.int64),
            "ts": pd.to_datetime(["2018-02-01T10:00:00Z"] * 3),
            "lon": [-74.07, None, -74.02],
            "lat": [40.72, None, 40.72],
        }
    )
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    data = zones_policy_dict(tmp_path)
    decided = spy_packing(monkeypatch)
    with open_engine("duckdb", scratch=tmp_path / "scratch") as engine:
        result = stages.count_validated_pings(
            parse_policy(data, tmp_path / "inline.yaml"), PERIOD, [path], tmp_path / "out", engine, silent
        )
    assert decided == [None]
    assert (result.pings_located, result.pings_outside) == (2, 1)
