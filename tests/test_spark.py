"""The Spark engine gives the same counts, memberships and outside pings as DuckDB, row for row.

Spark runs as a `local[*]` session. On a user's machine without PySpark (an optional extra) these tests skip;
in CI (CI=true) PySpark and Java are installed by .ci/run, and a missing one fails instead of skipping.
"""

import os
import signal
from datetime import timedelta
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
from shapely import box
from support.counting_inputs import edge_points
from support.fixture import policy_dict
from support.spark import HAVE_SPARK, SKIP_REASON, require_spark_on_ci

from spatial_release import stages
from spatial_release.counting.engines import SparkSettings, open_engine
from spatial_release.period import Period
from spatial_release.policy import parse_policy
from spatial_release.progress import silent

require_spark_on_ci()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAVE_SPARK, reason=SKIP_REASON)]  # slow: not in the fast tier

PERIOD = Period.parse("2018-Q1")


def _run(kind: str, policy, pings: pd.DataFrame, tmp_path: Path) -> dict:
    src = tmp_path / "pings.parquet"
    pings.to_parquet(src)
    settings = SparkSettings(shuffle_partitions=4)
    with open_engine(kind, scratch=tmp_path / f"scratch_{kind}", spark_settings=settings) as engine:
        # the pipeline's way: projection fitted to the pings' extent, small keys, one-pass presence
        result = stages.count_validated_pings(policy, PERIOD, [src], tmp_path / kind, engine, silent)
    frames = {
        name: pd.read_parquet(path)
        for name, path in [
            ("cells", result.cell_counts_path),
            ("margins", result.margin_counts_path),
            ("membership", result.membership_path),
            ("outside", result.outside_path),
        ]
    }
    frames = {name: f.sort_values(list(f.columns)).reset_index(drop=True) for name, f in frames.items()}
    frames["summary"] = (
        result.groups,
        result.units,
        result.unit_buckets,
        result.pings_located,
        result.pings_outside,
        result.unsure_coordinates,
        result.linked_covers_main,
    )
    return frames


def _assert_identical(duck: dict, spark: dict) -> None:
    for name in ("cells", "margins", "membership", "outside"):
        pd.testing.assert_frame_equal(duck[name], spark[name], check_dtype=False, obj=name)
    assert duck["summary"] == spark["summary"]


def _hourly_pings_across_dst(lon: np.ndarray, lat: np.ndarray, int_ids: bool) -> pd.DataFrame:
    rng = np.random.default_rng(9)
    # around the DST change of 11 March 2018 (02:00 local does not exist) and on other days
    base = pd.Timestamp("2018-03-10T12:00:00Z")
    ts = [base + timedelta(minutes=int(m)) for m in rng.integers(0, 3 * 24 * 60, len(lon))]
    units = rng.integers(0, 400, len(lon))
    return pd.DataFrame(
        {
            "unit": units if int_ids else [f"dev-{u:05d}" for u in units],
            "ts": pd.to_datetime(ts, utc=True),
            "lon": lon,
            "lat": lat,
        }
    )


@pytest.mark.parametrize("measure, int_ids", [("presence", True), ("presence", False), ("visitors", False)])
def test_spark_grid_counts_equal_duckdb(tmp_path, measure, int_ids):
    # +-50 km (the fitted polynomial) or +-500 km (the full formula)
    lon, lat = edge_points("EPSG:32618", 250, 6000, seed=21, spread=200 if int_ids else 2000)
    pings = _hourly_pings_across_dst(lon, lat, int_ids)
    data = policy_dict(
        "unused.csv",
        measure=measure,
        geometry={"kind": "grid", "crs": "EPSG:32618", "size_m": 250, "parents_m": [1000, 4000]},
        time={"bucket": "1h", "timezone": "America/New_York"},
    )
    policy = parse_policy(data, tmp_path / "inline.yaml")
    duck, spark = _run("duckdb", policy, pings, tmp_path), _run("spark", policy, pings, tmp_path)
    assert len(duck["cells"]) > 1000 and duck["summary"][5] > 0  # a real table, with edge points resolved exactly
    _assert_identical(duck, spark)


def test_spark_zones_with_linked_zoning_and_outside_pings_equal_duckdb(tmp_path):
    main = gpd.GeoDataFrame(
        {"zone": ["z1", "z2", "z3"], "district": ["d1", "d1", "d2"]},
        geometry=[box(-74.10, 40.70, -74.05, 40.75), box(-74.05, 40.70, -74.00, 40.75), box(-74.00, 40.70, -73.95, 40.75)],
        crs="EPSG:4326",
    )
    blocks = gpd.GeoDataFrame(
        {"block": [f"b{i:03d}" for i in range(40)]},
        geometry=[
            box(
                -74.10 + 0.0375 * (i % 4),
                40.70 + 0.005 * (i // 4),
                -74.10 + 0.0375 * (i % 4 + 1),
                40.70 + 0.005 * (i // 4 + 1),
            )
            for i in range(40)
        ],
        crs="EPSG:4326",
    )
    main.to_file(tmp_path / "main.geojson", driver="GeoJSON")
    blocks.to_file(tmp_path / "blocks.geojson", driver="GeoJSON")
    rng = np.random.default_rng(3)
    n = 8000
    lon = np.concatenate([rng.uniform(-74.12, -73.93, n), np.full(200, -74.05)])
    lat = np.concatenate([rng.uniform(40.69, 40.76, n), rng.uniform(40.70, 40.75, 200)])
    pings = _hourly_pings_across_dst(lon, lat, int_ids=False)
    data = policy_dict(
        "unused.csv",
        geometry={
            "kind": "zones",
            "path": str(tmp_path / "main.geojson"),
            "id": "zone",
            "parents": [{"level": "district", "column": "district"}],
            "linked": [
                {
                    "name": "block",
                    "path": str(tmp_path / "blocks.geojson"),
                    "id": "block",
                    "parents": [{"level": "row", "prefix": 3}],
                }
            ],
        },
        time={"bucket": "1d", "timezone": "America/New_York"},
    )
    policy = parse_policy(data, tmp_path / "inline.yaml")
    duck, spark = _run("duckdb", policy, pings, tmp_path), _run("spark", policy, pings, tmp_path)
    assert duck["summary"][4] > 0 and len(duck["outside"]) == duck["summary"][4]
    assert set(duck["margins"]["level"]) >= {"block", "row", "block_total", "district", "total"}
    _assert_identical(duck, spark)


def test_a_python_worker_killed_mid_chunk_is_retried_to_the_same_results_or_fails_the_map(tmp_path):
    """kill -9 of the Python worker running a chunk of jobs: Spark runs the task again (`local[2,4]` retries
        a failed task up to 4 times, as a cluster does) and the map returns what an undisturbed run returns, in
        job order. A chunk whose worker dies on every attempt fails the map with one line that says so (the command
    line and the alert show a failed step's innermost cause, which was Py4J's "An error occurred while calling
    z:...collectAndServe."); no result of it is merged. A job's own error is that line's end."""
    from spatial_release import tasks
    from spatial_release.counting.engines import spark_session

    killed, always = tmp_path / "killed", tmp_path / "always"

    def square_dying_on_3(n: int) -> int:  # nested: shipped by value, so the executors need not import tests/
        if n == 3 and (always.exists() or not killed.exists()):
            killed.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return n * n

    runner = tasks.SparkTasks(spark_session(SparkSettings(master="local[2,4]")))
    assert list(runner.map(square_dying_on_3, range(8), chunksize=2)) == [n * n for n in range(8)]
    assert killed.exists()  # a worker did die
    always.touch()
    with pytest.raises(tasks.SparkTaskFailed) as failed:
        list(runner.map(square_dying_on_3, range(8), chunksize=2))
    # one line that names the step's job group and Spark's reason, not a Py4J call and the JVM's stack
    message = str(failed.value)
    assert message.startswith(f"a Spark task of {tasks.job_group(square_dying_on_3)} (2 job(s)) failed"), message
    assert "failed 4 times" in message and "Python worker exited unexpectedly" in message, message
    assert "\n" not in message and "at org.apache" not in message, message
    assert failed.value.__cause__ is None and failed.value.__context__ is not None  # Spark's error, kept for logs

    def square_or_fail_on_3(n: int) -> int:
        if n == 3:
            raise ValueError("an internal error, not a refusal")
        return n * n

    with pytest.raises(tasks.SparkTaskFailed, match=r"failed .*: ValueError: an internal error, not a refusal$"):
        list(runner.map(square_or_fail_on_3, range(8), chunksize=2))  # the job's own error, not PySpark's preamble
    runner.spark.stop()
