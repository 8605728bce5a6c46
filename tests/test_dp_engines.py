"""Contribution bounding under `protection.method: dp` runs as one SQL query on DuckDB and on the Spark engine
and keeps the same rows for the same seed, so the bounded counts that partition selection is offered are the
same on either engine. (The selection's noise is OpenDP's own and takes no seed: what is compared is its input.)"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.spark import HAVE_SPARK, SKIP_REASON, require_spark_on_ci

from spatial_release.counting.engines import SparkSettings, open_engine
from spatial_release.dp import bound_contributions, bounded_counts
from spatial_release.dp.bounding import bound_contributions_on

require_spark_on_ci()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAVE_SPARK, reason=SKIP_REASON)]

DAY0 = pd.Timestamp("2018-01-01 05:00", tz="UTC")
PARENTS = [("district", lambda a: "d" + str(int(a[1:]) // 4))]
B, C = 3, 2


def membership(int_ids: bool, units: int = 400, seed: int = 8) -> pd.DataFrame:
    """Each unit on 6 of 20 days in 3 of 12 cells a day: every unit breaks both bounds."""
    rng = np.random.default_rng(seed)
    rows = [
        (u if int_ids else f"dev-{u}", DAY0 + pd.Timedelta(days=int(d)), f"c{int(c)}")
        for u in range(units)
        for d in rng.choice(20, 6, replace=False)
        for c in rng.choice(12, 3, replace=False)
    ]
    return pd.DataFrame(rows, columns=["unit", "bucket_start", "cell_id"])


def normalised(kept: pd.DataFrame) -> pd.DataFrame:
    """The kept rows with the unit as text (Spark hands back its own string and integer types)."""
    frame = kept.assign(unit=kept["unit"].astype(str), cell_id=kept["cell_id"].astype(str))
    return frame.sort_values(["unit", "bucket_start", "cell_id"], ignore_index=True)


def bounded_on(kind: str, path, tmp_path, seed: int) -> pd.DataFrame:
    settings = SparkSettings(shuffle_partitions=4)
    with open_engine(kind, scratch=tmp_path / f"scratch_{kind}", spark_settings=settings) as engine:
        engine.register_parquet("membership", [path])
        return normalised(bound_contributions_on(engine, "membership", B, C, seed))


@pytest.mark.parametrize("int_ids", [True, False])
def test_bounding_on_spark_equals_duckdb_and_the_in_process_bounding_for_the_same_seed(tmp_path, int_ids):
    rows = membership(int_ids)
    path = tmp_path / "membership.parquet"
    rows.to_parquet(path)
    duck, spark = bounded_on("duckdb", path, tmp_path, seed=20180101), bounded_on("spark", path, tmp_path, seed=20180101)
    pd.testing.assert_frame_equal(duck, spark)
    pd.testing.assert_frame_equal(duck, normalised(bound_contributions(rows, B, C, seed=20180101)))
    # the bounds hold and bite: every unit had 6 days of 3 cells and keeps B days of C cells
    assert (duck.groupby("unit")["bucket_start"].nunique() == B).all()
    assert (duck.groupby(["unit", "bucket_start"])["cell_id"].nunique() == C).all()
    # the counts offered to partition selection are the same on both engines
    pd.testing.assert_frame_equal(bounded_counts(duck, PARENTS), bounded_counts(spark, PARENTS))
    # negative control: the equality is not that of a fixed choice; another seed keeps other rows on Spark
    other = bounded_on("spark", path, tmp_path, seed=20180102)
    assert len(other) == len(spark) and not other.equals(spark)


def test_the_protect_stage_bounds_on_the_spark_engine_as_in_process_for_the_same_seed(tmp_path, monkeypatch):
    """Wired through the stage: given the Spark engine, the DP protection bounds there (the in-process bounding is
    made to fail) and offers OpenDP the same bounded counts as the in-process bounding, for the policy's seed."""
    from support.dp import dp_pings, dp_policy

    from spatial_release import stages
    from spatial_release.period import Period
    from spatial_release.policy import load_policy
    from spatial_release.stages import dp as dp_stage

    traces = tmp_path / "traces.csv"
    dp_pings(devices=150).to_csv(traces, index=False)
    ctx = stages.ReleaseContext(load_policy(dp_policy(tmp_path, traces, "dps")), Period.parse("2018-Q1"), tmp_path / "w")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    offered: list[pd.DataFrame] = []
    release = dp_stage.dp_release

    def offer(counts, calibration):
        offered.append(counts)
        return release(counts, calibration)

    monkeypatch.setattr(dp_stage, "dp_release", offer)
    stages.run_protect(ctx)

    def not_in_process(*args, **kwargs):
        raise AssertionError("bounded in process although the Spark engine was given")

    monkeypatch.setattr(dp_stage, "bound_contributions", not_in_process)
    with open_engine("spark", scratch=tmp_path / "scratch", spark_settings=SparkSettings(shuffle_partitions=4)) as engine:
        stages.run_protect(ctx, engine=engine)
    in_process, on_spark = (c.sort_values(["level", "area_id", "bucket_start"], ignore_index=True) for c in offered)
    assert len(in_process) > 0 and (in_process["n"] > 0).all()
    pd.testing.assert_frame_equal(in_process, on_spark)
