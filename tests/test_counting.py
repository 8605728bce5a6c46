"""Counts are of distinct units per (cell, bucket), checked against a brute-force recomputation that places
every ping with pyproj (grids) or the STRtree (zones) directly, never with the SQL path under test."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyproj import Transformer
from support.counting_inputs import edge_points, zones_file
from support.fixture import CELL_A, CELL_B, CELL_C, CELL_D, CELL_E, K, cell_id, policy_dict
from support.spies import spy_packing

from spatial_release import stages
from spatial_release.counting import count_pings, period_buckets
from spatial_release.counting.counts import CountingError
from spatial_release.counting.engines import open_engine
from spatial_release.geometry import Grid, make_locator
from spatial_release.period import Period
from spatial_release.policy import GridGeometry, Policy, parse_policy
from spatial_release.progress import silent

T0 = datetime(2018, 1, 10, 5, 0, tzinfo=UTC)  # local midnight in New York
PERIOD = Period.parse("2018-Q1")
SIZE = 250
TO_LONLAT = Transformer.from_crs("EPSG:32618", "EPSG:4326", always_xy=True)


def _grid_policy(measure: str = "presence", bucket: str = "1d", crs: str = "EPSG:32618") -> Policy:
    data = policy_dict(
        "unused.csv",
        measure=measure,
        geometry={"kind": "grid", "crs": crs, "size_m": SIZE, "parents_m": [2 * SIZE]},
        time={"bucket": bucket, "timezone": "America/New_York"},
    )
    return parse_policy(data, Path("inline.yaml"))


def _grid(policy: Policy) -> Grid:
    """The grid of a grid policy, which places a ping with pyproj (the brute force's way)."""
    assert isinstance(policy.geometry, GridGeometry)
    return Grid(policy.geometry)


def _candidate_points() -> tuple[np.ndarray, np.ndarray]:
    """Cell interiors, exact cell edges and corners, and points a micrometre either side of an edge."""
    x0, y0 = 581_000.0, 4_509_000.0
    xs = [x0 + 10, x0 + 125, x0 + SIZE, x0 + SIZE - 1e-6, x0 + SIZE + 1e-6, x0 + 2 * SIZE + 3, x0 + 3 * SIZE]
    ys = [y0 + 10, y0 + SIZE, y0 + SIZE + 1e-6, y0 + 2 * SIZE - 1e-6, y0 + 3 * SIZE - 40]
    gx, gy = np.meshgrid(xs, ys)
    return TO_LONLAT.transform(gx.ravel(), gy.ravel())


LON, LAT = _candidate_points()


def _pings(rows, units: int | None = None) -> pd.DataFrame:
    """units: None for text ids ('u3'), else integer ids offset by it (the packed path, `counting.packed`)."""
    return pd.DataFrame(
        {
            "unit": [f"u{u}" for u, _, _ in rows] if units is None else [units + u for u, _, _ in rows],
            "ts": pd.to_datetime([T0 + timedelta(hours=h) for _, h, _ in rows], utc=True),
            "lon": [LON[p] for _, _, p in rows],
            "lat": [LAT[p] for _, _, p in rows],
        }
    )


def _count(tmp_path: Path, pings: pd.DataFrame, policy: Policy, fitted: bool = True):
    """Counts as the pipeline does (projection fitted to the pings' extent), or with the full formula."""
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    with open_engine("duckdb", scratch=tmp_path / "scratch") as engine:
        if fitted:
            result = stages.count_validated_pings(policy, PERIOD, [path], tmp_path / "out", engine, silent)
        else:
            result = count_pings(policy, PERIOD, [path], stages.zoning_plans(policy, engine), tmp_path / "out", engine)
    return result, pd.read_parquet(result.cell_counts_path), pd.read_parquet(result.margin_counts_path)


def _brute_force(pings: pd.DataFrame, cells_of_pings: np.ndarray, measure: str, parent_of) -> tuple[dict, dict]:
    frame = pings.assign(cell_id=cells_of_pings)
    frame = frame[frame["cell_id"].notna()]
    local = frame["ts"].dt.tz_convert("America/New_York")
    frame["bucket_start"] = local.dt.normalize().dt.tz_convert("UTC")
    if measure == "presence":
        per = frame.groupby(["unit", "bucket_start", "cell_id"]).size().rename("n").reset_index()
        per = per.sort_values(["unit", "bucket_start", "n", "cell_id"], ascending=[True, True, False, True])
        member = per.drop_duplicates(["unit", "bucket_start"])[["unit", "bucket_start", "cell_id"]]
    else:
        member = frame[["unit", "bucket_start", "cell_id"]].drop_duplicates()
    cells = {(c, b): len(g) for (c, b), g in member.groupby(["cell_id", "bucket_start"])}
    member = member.assign(parent=member["cell_id"].map(parent_of))
    margins = {("grid_500m", d, b): g["unit"].nunique() for (d, b), g in member.groupby(["parent", "bucket_start"])}
    margins.update({("total", "total", b): g["unit"].nunique() for b, g in member.groupby("bucket_start")})
    return cells, margins


def _as_dicts(cells: pd.DataFrame, margins: pd.DataFrame):
    return (
        {(r.cell_id, r.bucket_start): r.n for r in cells.itertuples()},
        {(r.level, r.area_id, r.bucket_start): r.n for r in margins.itertuples()},
    )


def _parent_500(cell: str) -> str:
    _, e, n = cell.replace("mE", " ").replace("N", " ").split()
    return f"500mE{int(e) // 500 * 500}N{int(n) // 500 * 500}"


pings_strategy = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 60), st.integers(0, len(LON) - 1)), min_size=1, max_size=60
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=pings_strategy,
    measure=st.sampled_from(["presence", "visitors"]),
    fitted=st.booleans(),
    units=st.sampled_from([None, 0, -3, 10**12]),
)
def test_counts_match_brute_force_with_pyproj_placement(tmp_path, rows, measure, fitted, units):
    """`fitted` (the pipeline's way, small keys) takes the packed-key path for presence with integer unit
    ids and the one-pass SQL presence path with text ids; the formula path with wide keys takes the
    two-aggregation path. Day buckets give many (unit, day) groups with 3+ cells, ties and points on cell
    edges."""
    pings = _pings(rows, units)
    policy = _grid_policy(measure)
    _, cells, margins = _count(tmp_path, pings, policy, fitted)
    exact = _grid(policy).locate(pings["lon"].to_numpy(), pings["lat"].to_numpy())
    assert _as_dicts(cells, margins) == _brute_force(pings, exact, measure, _parent_500)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=pings_strategy)
def test_presence_is_additive_and_visitors_bounded(tmp_path, rows):
    pings = _pings(rows)
    for measure in ("presence", "visitors"):
        _, cells, margins = _count(tmp_path, pings, _grid_policy(measure))
        children = cells.assign(parent=cells["cell_id"].map(_parent_500))
        sums = children.groupby(["parent", "bucket_start"])["n"].agg(["sum", "max"])
        for r in margins[margins["level"] == "grid_500m"].itertuples():
            child = sums.loc[(r.area_id, r.bucket_start)]
            if measure == "presence":
                assert r.n == child["sum"]
            else:
                assert child["max"] <= r.n <= child["sum"]
        totals = margins[margins["level"] == "total"].set_index("bucket_start")["n"]
        distinct = pings.assign(b=pings["ts"].dt.tz_convert("America/New_York").dt.normalize())
        assert sorted(totals.to_list()) == sorted(distinct.groupby("b")["unit"].nunique().to_list())


@pytest.mark.slow
@pytest.mark.parametrize(
    "crs, fitted",
    [
        ("EPSG:32618", True),
        ("EPSG:32618", False),
        ("EPSG:3035", True),
        ("EPSG:3035", False),
        ("EPSG:3857", True),
        ("EPSG:3857", False),
    ],
)
def test_every_ping_gets_pyproj_cell(tmp_path, crs, fitted):
    """Each ping is its own unit, so the membership file shows where each one was placed. `fitted`: the
    pipeline's polynomial fitted to the pings' extent; else the full formula (none for Web Mercator)."""
    # a city region (+-50 km) for the fitted polynomial; +-500 km, where no polynomial is accurate enough, else
    lon, lat = edge_points(crs, SIZE, 20_000, seed=11, spread=200 if fitted else 2000)
    pings = pd.DataFrame({"unit": [f"p{i}" for i in range(len(lon))], "ts": pd.Timestamp(T0), "lon": lon, "lat": lat})
    policy = _grid_policy(crs=crs)
    result, _, _ = _count(tmp_path, pings, policy, fitted)
    placed = pd.read_parquet(result.membership_path).set_index("unit")["cell_id"]
    exact = pd.Series(_grid(policy).locate(lon, lat), index=pings["unit"])
    assert len(placed) == len(exact)
    assert (placed.reindex(exact.index) == exact).all()
    if fitted:
        assert "local polynomial" in result.methods["cell"]
        assert 0 < result.unsure_coordinates < len(lon)
    elif crs == "EPSG:3857":  # no SQL formula for Web Mercator: everything is placed exactly, by pyproj
        assert result.unsure_coordinates == len(lon)
        assert "exact assignment of every distinct coordinate" in result.methods["cell"]
    else:
        assert 0 < result.unsure_coordinates < len(lon)


def test_sql_placement_without_the_guard_band_would_be_wrong(tmp_path, monkeypatch):
    """Negative control: with no guard band and a projection off by 1 mm (both refused in production),
    points near edges land in the wrong cell, so the test above can fail."""
    from spatial_release.counting import plan as plan_module
    from spatial_release.geometry.sqlproj import SqlProjection, candidate_projection

    real = candidate_projection(_grid(_grid_policy()).crs)
    assert real is not None  # UTM has a formula
    (x_name, x_sql), y_column = real.layers[-1]
    layers = (*real.layers[:-1], ((x_name, f"({x_sql}) + 1e-3"), y_column))
    shifted = SqlProjection(real.crs, real.method, layers, 0.0, real.area)
    monkeypatch.setattr(plan_module, "validated_projection", lambda crs, **_: shifted)
    lon, lat = edge_points("EPSG:32618", SIZE, 5_000, seed=3)
    pings = pd.DataFrame({"unit": [f"p{i}" for i in range(len(lon))], "ts": pd.Timestamp(T0), "lon": lon, "lat": lat})
    policy = _grid_policy()
    result, _, _ = _count(tmp_path, pings, policy, fitted=False)
    placed = pd.read_parquet(result.membership_path).set_index("unit")["cell_id"].reindex(pings["unit"])
    exact = _grid(policy).locate(lon, lat)
    assert (placed.to_numpy() != exact).sum() > 0


def test_validation_refuses_a_projection_off_by_a_micrometre():
    from spatial_release.geometry.sqlproj import evaluate_duckdb, validated_projection

    assert validated_projection("EPSG:32618") is not None

    def off(projection, lon, lat):
        x, y = evaluate_duckdb(projection, lon, lat)
        return x + 1e-6, y

    assert validated_projection("EPSG:32618", evaluate=off) is None
    assert validated_projection("EPSG:27700") is None  # needs a datum shift from WGS84: no plain formula


@pytest.mark.slow
@pytest.mark.parametrize("integer_units", [False, True])
def test_zone_counts_match_the_strtree_including_boundaries_and_outside(tmp_path, integer_units, monkeypatch):
    decided = spy_packing(monkeypatch)
    path = zones_file(tmp_path)
    rng = np.random.default_rng(4)
    n = 3000
    lon = np.concatenate([rng.uniform(-74.12, -73.96, n), np.full(50, -74.05), rng.uniform(-74.1, -74.0, 50)])
    lat = np.concatenate([rng.uniform(40.68, 40.79, n), rng.uniform(40.70, 40.75, 50), np.full(50, 40.75)])
    pings = pd.DataFrame(
        {
            "unit": [i % 400 if integer_units else f"u{i % 400}" for i in range(len(lon))],
            "ts": pd.to_datetime([T0 + timedelta(hours=int(h)) for h in rng.integers(0, 72, len(lon))]),
            "lon": lon,
            "lat": lat,
        }
    )
    data = policy_dict(
        "unused.csv",
        geometry={
            "kind": "zones",
            "path": str(path),
            "id": "zone",
            "parents": [{"level": "district", "column": "district"}],
        },
    )
    policy = parse_policy(data, tmp_path / "inline.yaml")
    result, cells, margins = _count(tmp_path, pings, policy)
    layer = make_locator(policy)
    exact = layer.locate(lon, lat)
    expected_cells, _ = _brute_force(pings, exact, "presence", lambda c: c)
    assert {(r.cell_id, r.bucket_start): r.n for r in cells.itertuples()} == expected_cells
    assert result.pings_outside == int(pd.isna(exact).sum()) > 0
    outside = pd.read_parquet(result.outside_path)
    assert len(outside) == result.pings_outside
    assert (pd.isna(layer.locate(outside["lon"].to_numpy(), outside["lat"].to_numpy()))).all()
    assert result.unsure_coordinates > 0  # the shared edge and the boundary lookup cells went the exact way
    assert "lookup grid" in result.methods["cell"]
    assert (decided[0] is not None) is integer_units  # integer ids: the packed path; text: the SQL one


@pytest.mark.parametrize("units", [None, 7])
def test_dominant_cell_ties_go_to_smallest_cell_id(tmp_path, units, monkeypatch):
    decided = spy_packing(monkeypatch)
    rows = [(0, 0, 5), (0, 1, 0), (0, 2, 0), (0, 3, 5)]  # two pings each in two cells, the same day
    pings = _pings(rows, units)
    _, cells, _ = _count(tmp_path, pings, _grid_policy())
    assert (decided[0] is not None) is (units is not None)
    placed = _grid(_grid_policy()).locate(pings["lon"].to_numpy(), pings["lat"].to_numpy())
    assert len(set(placed)) == 2
    assert cells[["cell_id", "n"]].values.tolist() == [[min(placed), 1]]


def test_bucket_follows_the_policy_time_zone(tmp_path):
    # 23:30 in New York on 10 January is 04:30 UTC on the 11th: it belongs to the local day of the 10th
    pings = pd.DataFrame({"unit": ["u"], "ts": pd.to_datetime(["2018-01-11T04:30:00Z"]), "lon": [LON[0]], "lat": [LAT[0]]})
    _, cells, _ = _count(tmp_path, pings, _grid_policy())
    assert cells["bucket_start"].iloc[0] == pd.Timestamp("2018-01-10T05:00:00Z")


@pytest.mark.parametrize("ids", [["u", "v"], [1, 2]])
def test_pings_outside_the_period_are_refused_not_dropped(tmp_path, ids, monkeypatch):
    decided = spy_packing(monkeypatch)
    pings = pd.DataFrame(
        {
            "unit": ids,
            "ts": pd.to_datetime(["2018-01-11T04:30:00Z", "2018-04-01T04:30:00Z"]),
            "lon": [LON[0], LON[1]],
            "lat": [LAT[0], LAT[1]],
        }
    )
    with pytest.raises(CountingError, match="1 ping\\(s\\) .* outside period 2018-Q1"):
        _count(tmp_path, pings, _grid_policy())
    assert (decided[0] is not None) is isinstance(ids[0], int)  # integer ids: refused by the packed path


@pytest.mark.parametrize(
    "bucket, first, count",
    [
        ("1h", "2018-01-01T05:00", 2159),
        ("1d", "2018-01-01T05:00", 90),
        ("1w", "2018-01-01T05:00", 13),
        ("6h", "2018-01-01T05:00", 360),
    ],
)
def test_period_buckets(bucket, first, count):
    buckets = period_buckets(_grid_policy("presence", bucket), PERIOD)
    # Q1 2018 has 90 days; the DST change on 11 March makes one local day 23 hours long
    assert buckets[0].astimezone(UTC).strftime("%Y-%m-%dT%H:%M") == first
    assert len(buckets) == count


@pytest.mark.slow
def test_fixture_counts_distinct_devices_not_pings(tmp_path, fixture_policy):
    ctx = stages.ReleaseContext(fixture_policy, PERIOD, tmp_path / "work")
    area = ctx.area
    stages.run_ingest(ctx)
    summary = stages.run_counts(ctx)
    cells, margins = stages.read_true_counts(area)
    counts = dict(zip(cells["cell_id"], cells["n"]))
    assert counts == {cell_id(CELL_A): K, cell_id(CELL_B): 2, cell_id(CELL_C): 1, cell_id(CELL_D): 5, cell_id(CELL_E): 6}
    assert summary.units == 17 and summary.pings_outside_geometry == 0
    assert dict(zip(margins["area_id"], margins["n"]))["total"] == 17
