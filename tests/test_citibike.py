"""The Citi Bike Jersey City Q1 2018 release, checked against an independent recomputation from the raw files.

The recomputation uses pandas and geopandas only (no DuckDB, none of the project's ingest or counting code):
it parses the three timestamp formats itself, assigns wards with a spatial join and takes each bike's
dominant ward per local week (Monday 00:00 New York, the policy's 1w buckets).
"""

import json

import geopandas as gpd
import pandas as pd
import pytest

from conftest import PROJECT_ROOT, SHARED_DATA, requires_shared
from spatial_release import cli

pytestmark = requires_shared
K = 20  # the policy's k (prosecutor adversary, see policies/jc-bikes.yaml)
TZ = "America/New_York"


def _raw_pings() -> pd.DataFrame:
    frames = []
    for month in (1, 2, 3):
        trips = pd.read_csv(SHARED_DATA / f"citibike-jc/JC-20180{month}-citibike-tripdata.csv")
        for end, prefix in (("starttime", "start"), ("stoptime", "end")):
            frames.append(pd.DataFrame({
                "bike": trips["bikeid"].astype(str),
                "local": pd.to_datetime(trips[end], format="mixed"),
                "lon": trips[f"{prefix} station longitude"],
                "lat": trips[f"{prefix} station latitude"],
            }))
    pings = pd.concat(frames, ignore_index=True)
    local = pings["local"].dt.tz_localize(TZ, nonexistent="shift_forward", ambiguous=False)
    inside = (local >= pd.Timestamp("2018-01-01", tz=TZ)) & (local < pd.Timestamp("2018-04-01", tz=TZ))
    pings, naive = pings[inside], pings.loc[inside, "local"]
    # the week's Monday in local wall time, then its UTC instant (weeks cross the March DST change)
    monday = naive.dt.normalize() - pd.to_timedelta(naive.dt.day_of_week, unit="D")
    return pings.assign(day=monday.dt.tz_localize(TZ).dt.tz_convert("UTC"))


def _expected_counts() -> tuple[dict, dict]:
    pings = _raw_pings()
    wards = gpd.read_file(SHARED_DATA / "jersey-city/jc-wards.geojson")[["ward", "geometry"]]
    points = gpd.GeoDataFrame(pings, geometry=gpd.points_from_xy(pings["lon"], pings["lat"]), crs="EPSG:4326")
    joined = gpd.sjoin(points, wards, predicate="intersects", how="inner")
    joined = joined.sort_values("ward").groupby(level=0).head(1)  # boundary points go to the smallest ward
    per = joined.groupby(["bike", "day", "ward"]).size().rename("n").reset_index()
    per = per.sort_values(["bike", "day", "n", "ward"], ascending=[True, True, False, True])
    dominant = per.drop_duplicates(["bike", "day"])
    cells = dominant.groupby(["ward", "day"])["bike"].nunique().to_dict()
    totals = dominant.groupby("day")["bike"].nunique().to_dict()
    return cells, totals


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("citibike")
    published, messages, record = cli.run_release(str(PROJECT_ROOT / "policies/jc-bikes.yaml"), "2018-Q1",
                                                  out=str(out), ledger=str(out / "ledger"))
    assert published, messages
    return out / "releases" / "jc-bikes" / "2018-Q1", record


def test_k_floor_over_devices_recomputed_from_raw_files(release):
    folder, _ = release
    cells = gpd.read_parquet(folder / "cells.parquet")
    expected, _ = _expected_counts()
    published = {(r.cell_id, r.bucket_start): r.n_devices for r in cells.itertuples()}
    # every published figure is the true number of distinct bikes, and at least k
    for key, n in published.items():
        assert expected[key] == n and n >= K, key
    # no group below k appears; groups of at least k are withheld only as complementary (secondary) cells
    assert set(published) <= {key for key, n in expected.items() if n >= K}
    assert any(n < K for n in expected.values())  # the quarter really has small groups to withhold


def test_no_withheld_ward_is_recovered_from_the_weekly_total(release):
    """An attack that needs no LP: subtract the published wards from the published weekly total. For every
    ward-week below k, the other absent wards of that day must hold at least max(k - v, 1) bikes, or the
    difference shows the withheld figure (or shows it is below k)."""
    folder, _ = release
    cells = gpd.read_parquet(folder / "cells.parquet")
    margins = pd.read_parquet(folder / "margins.parquet")
    expected, _ = _expected_counts()
    wards = sorted(gpd.read_file(SHARED_DATA / "jersey-city/jc-wards.geojson")["ward"])
    published = {(r.cell_id, r.bucket_start) for r in cells.itertuples()}
    checked = 0
    for day in {r.bucket_start for r in margins.itertuples() if r.level == "total"}:
        absent = [w for w in wards if (w, day) not in published]
        for ward in absent:
            v = expected.get((ward, day), 0)
            if 1 <= v < K:
                others = sum(expected.get((w, day), 0) for w in absent if w != ward)
                assert len(absent) >= 2 and others >= max(K - v, 1), (ward, day, v, others)
                checked += 1
    assert checked > 20


def test_margins_are_true_weekly_totals(release):
    folder, _ = release
    margins = pd.read_parquet(folder / "margins.parquet")
    _, totals = _expected_counts()
    published = {r.bucket_start: r.n_devices for r in margins.itertuples() if r.level == "total"}
    assert published == {day: n for day, n in totals.items() if n >= K}


def test_record_and_files_carry_no_identifier(release):
    folder, record = release
    assert record.unit == "devices" and record.count_column == "n_devices"
    assert record.counts.published_cells >= 13 and "primary_cells" not in record.counts.to_json()  # every week of ward E
    internal = json.loads((folder.parents[2] / "work" / "jc-bikes" / "2018-Q1" / "audit.internal.json").read_text())
    assert record.audit.passed and internal["primaries_audited"] > 500  # wards and blocks
    margins = pd.read_parquet(folder / "margins.parquet")
    assert {"block", "tract", "block_total", "total"} <= set(margins["level"])
    quasi = {"bikeid", "birth year", "gender", "usertype", "start station id", "end station id"}
    for name in ("cells.parquet", "margins.parquet"):
        assert not quasi & set(pd.read_parquet(folder / name).columns)
    text = (folder / "release.json").read_text()
    assert not any(f'"{q}"' in text for q in quasi)
    assert json.loads(text)["input"]["pings_outside_geometry"] > 0  # Manhattan and Hoboken ends, reported


def test_monthly_releases_build_a_ledger_the_review_recomputes_and_the_gate_blocks_march(tmp_path):
    from pathlib import Path

    import dagster as dg

    from spatial_release import stages
    from spatial_release.defs.resources import ReleaseSettings
    from spatial_release.defs.catalogue import programme_for
    from spatial_release.ledger import Ledger, read_ledger
    from spatial_release.risk import cumulative_risk
    from spatial_release.policy import load_policy

    policy = PROJECT_ROOT / "policies/jc-bikes-monthly.yaml"
    records = []
    for month in ("2018-01", "2018-02"):
        published, messages, record = cli.run_release(str(policy), month, out=str(tmp_path),
                                                      ledger=str(tmp_path / "ledger"))
        assert published, messages
        assert record.risk.adversary == "prosecutor"  # every bike of the fleet is in the data
        records.append(record)
    # March publishes a ward-C week: over the three-month window a bike known by four ward-weeks is singled
    # out too often (prosecutor), and the gate blocks it; nothing of March is published or recorded
    published, messages, _ = cli.run_release(str(policy), "2018-03", out=str(tmp_path),
                                             ledger=str(tmp_path / "ledger"))
    assert not published
    assert any("risk_budget" in m and "prosecutor" in m and "zone C" in m for m in messages), messages
    assert not (tmp_path / "releases" / "jc-bikes-monthly" / "2018-03").exists()
    entries = read_ledger(tmp_path / "ledger")
    assert [e["period"] for e in entries] == ["2018-01", "2018-02"]
    figures = [r.risk.release_figure for r in records]
    assert records[-1].risk.cumulative == pytest.approx(cumulative_risk(figures))
    assert records[-1].risk.window_periods == ["2018-01", "2018-02"]
    # the review job re-assesses the programme from the retained key sets and gets the same figures
    settings = ReleaseSettings(releases_dir=str(tmp_path / "releases"),
                               work_dir=str(tmp_path / "work"), ledger_dir=str(tmp_path / "ledger"),
                               alerts_dir=str(tmp_path / "alerts"))
    result = dg.materialize([programme_for(policy).review.asset], resources={"settings": settings})
    [event] = result.get_asset_materialization_events()
    reviewed = event.materialization.metadata["review"].value
    assert [r["release_figure"] for r in reviewed] == pytest.approx(figures)
    cumulative = event.materialization.metadata["risk_prosecutor_cumulative"].value  # rounded for reading
    assert cumulative == pytest.approx(cumulative_risk(figures), rel=1e-3)
    per_ward = stages.review_programme(load_policy(policy), Ledger(tmp_path / "ledger"), Path(tmp_path / "work"))
    assert len(per_ward.releases) == 2 and not per_ward.breaches
