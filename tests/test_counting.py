"""Counts are of distinct units per (cell, bucket), checked against a brute-force recomputation."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CELL_A, CELL_B, CELL_C, CELL_D, CELL_E, K, cell_id, policy_dict
from spatial_release import stages
from spatial_release.counting import Zoning, count_units, period_buckets
from spatial_release.period import Period
from spatial_release.policy import Policy, parse_policy

T0 = datetime(2018, 1, 10, 5, 0, tzinfo=timezone.utc)  # local midnight in New York


def _policy(measure: str, bucket: str = "1d") -> Policy:
    data = policy_dict("unused.csv", measure=measure,
                       geometry={"kind": "zones", "path": "unused.geojson", "id": "zone",
                                 "parents": [{"level": "district", "column": "district"}]},
                       time={"bucket": bucket, "timezone": "America/New_York"})
    return parse_policy(data, Path("inline.yaml"))


def _count(tmp_path: Path, located: pd.DataFrame, measure: str, bucket: str = "1d"):
    path = tmp_path / "located.parquet"
    located.to_parquet(path)
    cells = sorted(located["cell_id"].unique())
    hierarchy = pd.DataFrame({"cell_id": cells, "district": [f"d{int(c[1:]) // 2}" for c in cells]})
    zoning = Zoning("cell", "cell_id", hierarchy, ("district",), "total")
    result = count_units(_policy(measure, bucket), path, [zoning], tmp_path)
    return pd.read_parquet(result.cell_counts_path), pd.read_parquet(result.margin_counts_path), hierarchy


def _brute_force(located: pd.DataFrame, measure: str, hierarchy: pd.DataFrame):
    frame = located.copy()
    local = frame["ts"].dt.tz_convert("America/New_York")
    frame["bucket_start"] = local.dt.normalize().dt.tz_convert("UTC")
    if measure == "presence":
        per = frame.groupby(["unit", "bucket_start", "cell_id"]).size().rename("n").reset_index()
        per = per.sort_values(["unit", "bucket_start", "n", "cell_id"], ascending=[True, True, False, True])
        member = per.drop_duplicates(["unit", "bucket_start"])[["unit", "bucket_start", "cell_id"]]
    else:
        member = frame[["unit", "bucket_start", "cell_id"]].drop_duplicates()
    cells = {(c, b): len(g) for (c, b), g in member.groupby(["cell_id", "bucket_start"])}
    member = member.merge(hierarchy, on="cell_id")
    margins = {("district", d, b): g["unit"].nunique() for (d, b), g in member.groupby(["district", "bucket_start"])}
    margins.update({("total", "total", b): g["unit"].nunique() for b, g in member.groupby("bucket_start")})
    return cells, margins


def _as_dicts(cells: pd.DataFrame, margins: pd.DataFrame):
    return ({(r.cell_id, r.bucket_start): r.n for r in cells.itertuples()},
            {(r.level, r.area_id, r.bucket_start): r.n for r in margins.itertuples()})


pings = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 60), st.integers(0, 5)), min_size=1, max_size=60
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=pings, measure=st.sampled_from(["presence", "visitors"]))
def test_counts_match_brute_force(tmp_path, rows, measure):
    located = pd.DataFrame({
        "unit": [f"u{u}" for u, _, _ in rows],
        "ts": pd.to_datetime([T0 + timedelta(hours=h) for _, h, _ in rows], utc=True),
        "cell_id": [f"c{c}" for _, _, c in rows],
    })
    cells, margins, hierarchy = _count(tmp_path, located, measure)
    assert _as_dicts(cells, margins) == _brute_force(located, measure, hierarchy)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=pings)
def test_presence_is_additive_and_visitors_bounded(tmp_path, rows):
    located = pd.DataFrame({
        "unit": [f"u{u}" for u, _, _ in rows],
        "ts": pd.to_datetime([T0 + timedelta(hours=h) for _, h, _ in rows], utc=True),
        "cell_id": [f"c{c}" for _, _, c in rows],
    })
    for measure in ("presence", "visitors"):
        cells, margins, hierarchy = _count(tmp_path, located, measure)
        children = cells.merge(hierarchy, on="cell_id")
        sums = children.groupby(["district", "bucket_start"])["n"].agg(["sum", "max"])
        for r in margins[margins["level"] == "district"].itertuples():
            child = sums.loc[(r.area_id, r.bucket_start)]
            if measure == "presence":
                assert r.n == child["sum"]
            else:
                assert child["max"] <= r.n <= child["sum"]
        totals = margins[margins["level"] == "total"].set_index("bucket_start")["n"]
        distinct = located.assign(b=located["ts"].dt.tz_convert("America/New_York").dt.normalize())
        assert sorted(totals.to_list()) == sorted(distinct.groupby("b")["unit"].nunique().to_list())


def test_dominant_cell_ties_go_to_smallest_cell(tmp_path):
    located = pd.DataFrame({"unit": ["u"] * 4, "ts": pd.to_datetime([T0 + timedelta(hours=h) for h in range(4)]),
                            "cell_id": ["c3", "c1", "c3", "c1"]})
    cells, _, _ = _count(tmp_path, located, "presence")
    assert cells[["cell_id", "n"]].values.tolist() == [["c1", 1]]


def test_bucket_follows_the_policy_time_zone(tmp_path):
    # 23:30 in New York on 10 January is 04:30 UTC on the 11th: it belongs to the local day of the 10th
    located = pd.DataFrame({"unit": ["u"], "ts": pd.to_datetime(["2018-01-11T04:30:00Z"]), "cell_id": ["c0"]})
    cells, _, _ = _count(tmp_path, located, "presence")
    assert cells["bucket_start"].iloc[0] == pd.Timestamp("2018-01-10T05:00:00Z")


@pytest.mark.parametrize("bucket, first, count", [("1h", "2018-01-01T05:00", 2159), ("1d", "2018-01-01T05:00", 90),
                                                  ("1w", "2018-01-01T05:00", 13), ("6h", "2018-01-01T05:00", 360)])
def test_period_buckets(bucket, first, count):
    buckets = period_buckets(_policy("presence", bucket), Period.parse("2018-Q1"))
    # Q1 2018 has 90 days; the DST change on 11 March makes one local day 23 hours long
    assert buckets[0].astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M") == first
    assert len(buckets) == count


def test_fixture_counts_distinct_devices_not_pings(tmp_path, fixture_policy):
    period = Period.parse("2018-Q1")
    area = stages.WorkArea.for_release(tmp_path / "work", fixture_policy, period)
    stages.run_ingest(fixture_policy, period, area)
    summary = stages.run_counts(fixture_policy, area)
    cells, margins = stages.read_true_counts(area)
    counts = dict(zip(cells["cell_id"], cells["n"]))
    assert counts == {cell_id(CELL_A): K, cell_id(CELL_B): 2, cell_id(CELL_C): 1, cell_id(CELL_D): 5,
                      cell_id(CELL_E): 6}
    assert summary["units"] == 17 and summary["pings_outside_geometry"] == 0
    assert dict(zip(margins["area_id"], margins["n"]))["total"] == 17
