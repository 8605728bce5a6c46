"""The DP protection's domain module: contribution bounding, OpenDP calibration, partition selection and the
consistent post-processing, each re-derived from the outputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spatial_release.dp import (
    DpParams,
    Sensitivity,
    bound_contributions,
    bounded_counts,
    calibrate,
    consistent_counts,
    consistent_ladder,
    ladder_counts,
    release_counts,
)
from spatial_release.dp.bounding import rung_membership
from spatial_release.dp.frontier import Configuration, DpFrontierRow, evaluate, shown_and_error
from spatial_release.levels import LEAF, TOTAL, rung_of, space_level

DAY0 = pd.Timestamp("2018-01-01", tz="UTC")
PARENTS = [("district", lambda a: "d" + str(int(a[1:]) // 4))]
LEVELS = [LEAF, "district", TOTAL]


def membership(units: int = 300, days: int = 10, per_unit: int = 5, cells_per_day: int = 2, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(units):
        for b in rng.choice(days, per_unit, replace=False):
            for c in rng.choice(8, cells_per_day, replace=False):
                rows.append((f"u{u}", DAY0 + pd.Timedelta(days=int(b)), f"c{c}"))
    return pd.DataFrame(rows, columns=["unit", "bucket_start", "cell_id"])


def unit_keys(counts_with: pd.DataFrame, counts_without: pd.DataFrame) -> int:
    """How many figures differ between the bounded counts with and without one unit."""
    keys = ["level", "area_id", "bucket_start"]
    merged = counts_with.merge(counts_without, on=keys, how="outer", suffixes=("_a", "_b")).fillna(0)
    diff = (merged["n_a"] - merged["n_b"]).abs()
    assert diff.max() <= 1
    return int((diff > 0).sum())


def test_bounding_keeps_at_most_b_buckets_and_c_cells_per_unit():
    rows = membership()
    kept = bound_contributions(rows, max_buckets=3, max_areas=1, seed=5)
    assert kept.groupby("unit")["bucket_start"].nunique().max() == 3
    assert kept.groupby(["unit", "bucket_start"])["cell_id"].nunique().max() == 1
    # every kept row is a row of the input
    assert len(kept.merge(rows.drop_duplicates(), how="inner")) == len(kept)
    # the input breaks both bounds (so the assertions above are not vacuous)
    assert rows.groupby("unit")["bucket_start"].nunique().min() == 5
    assert rows.groupby(["unit", "bucket_start"])["cell_id"].nunique().min() == 2


def test_bounding_is_seeded_order_free_and_per_unit():
    rows = membership()
    kept = bound_contributions(rows, 3, 1, seed=5)
    shuffled = bound_contributions(rows.sample(frac=1.0, random_state=3), 3, 1, seed=5)
    key = ["unit", "bucket_start", "cell_id"]
    pd.testing.assert_frame_equal(kept.sort_values(key, ignore_index=True), shuffled.sort_values(key, ignore_index=True))
    other_seed = bound_contributions(rows, 3, 1, seed=6)
    assert not kept.sort_values(key, ignore_index=True).equals(other_seed.sort_values(key, ignore_index=True))
    # removing a unit leaves every other unit's kept rows as they were (a stable transformation)
    without = bound_contributions(rows[rows["unit"] != "u0"], 3, 1, seed=5)
    pd.testing.assert_frame_equal(
        kept[kept["unit"] != "u0"].sort_values(key, ignore_index=True), without.sort_values(key, ignore_index=True)
    )


def test_bounding_names_missing_columns():
    with pytest.raises(ValueError, match=r"membership: columns \['cell_id'\] missing"):
        bound_contributions(membership().drop(columns="cell_id"), 1, 1, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize(("b", "c"), [(2, 1), (3, 2)])
def test_a_unit_moves_at_most_l0_figures_by_one(b, c):
    rows = membership()
    kept = bound_contributions(rows, b, c, seed=2)
    full = bounded_counts(kept, PARENTS)
    bound = Sensitivity.of(LEVELS, b, c).l0
    moved = [unit_keys(full, bounded_counts(kept[kept["unit"] != u], PARENTS)) for u in kept["unit"].unique()[:40]]
    assert max(moved) <= bound
    # the bound is reached by some unit in cells spread over districts: it is not loose by construction
    assert max(moved) >= bound - b * (c - 1)


def test_calibration_meets_the_budget_by_opendp_map_and_not_more():
    sens = Sensitivity.of(LEVELS, 2, 1)
    for params in (DpParams("approx", 1e-6, 2, 1, epsilon=1.0), DpParams("zcdp", 1e-6, 2, 1, rho=0.25)):
        cal = calibrate(params, sens)
        budget, delta = cal.spent()
        assert budget <= params.loss[0] * (1 + 1e-9) and delta <= params.delta
        # a unit touching more figures than bounded would spend more than the budget: the sensitivity matters
        wider = cal.measurement().map((sens.l0 * 2, sens.l1 * 2, 1))
        assert wider[0] > params.loss[0] or wider[1] > params.delta


def test_dp_params_refuse_missing_budget():
    with pytest.raises(ValueError, match="epsilon"):
        DpParams("approx", 1e-6, 1, 1)
    with pytest.raises(ValueError, match="delta"):
        DpParams("zcdp", 0.0, 1, 1, rho=1.0)


def test_selection_publishes_only_keys_of_the_data_above_the_threshold():
    rows = membership(units=2000, per_unit=3, cells_per_day=1)
    kept = bound_contributions(rows, 2, 1, seed=1)
    counts = bounded_counts(kept, PARENTS)
    # a rare key: one unit alone in a cell nobody else visits
    rare = pd.DataFrame({"level": [LEAF], "area_id": ["c99"], "bucket_start": [DAY0], "n": [1]})
    counts = pd.concat([counts, rare], ignore_index=True)
    cal = calibrate(DpParams("approx", 1e-6, 2, 1, epsilon=2.0), Sensitivity.of(LEVELS, 2, 1))
    released = release_counts(counts, cal).counts
    keys = ["level", "area_id", "bucket_start"]
    assert len(released.merge(counts[keys], on=keys)) == len(released)  # nothing outside the data's keys
    assert (released["n"] >= cal.threshold).all()
    assert "c99" not in set(released["area_id"])
    assert len(released) > 0.5 * len(counts)  # a dense table mostly survives
    assert released["n"].dtype == np.int64
    assert set(cal.describe()) >= {"epsilon", "delta", "scale", "threshold", "mechanism", "sensitivity"}


def published_violations(frame: pd.DataFrame, measure: str) -> int:
    """Published parents below what their published children imply (sum for presence, max for visitors)."""
    fold = "sum" if measure == "presence" else "max"
    cells = frame[frame["level"] == LEAF].assign(parent=lambda f: f["area_id"].map(PARENTS[0][1]))
    implied = cells.groupby(["parent", "bucket_start"])["n"].agg(fold).rename("floor").reset_index()
    districts = frame[frame["level"] == "district"].merge(
        implied, left_on=["area_id", "bucket_start"], right_on=["parent", "bucket_start"]
    )
    totals = frame[frame["level"] == TOTAL]
    by_bucket = frame[frame["level"] != TOTAL].groupby(["level", "bucket_start"])["n"].agg(fold).reset_index()
    tot = totals.merge(by_bucket, on="bucket_start", suffixes=("", "_lower"))
    return int((districts["n"] < districts["floor"]).sum() + (tot["n"] < tot["n_lower"]).sum() + (frame["n"] < 0).sum())


@pytest.mark.parametrize("measure", ["presence", "visitors"])
def test_post_processing_makes_margins_consistent_and_only_raises(measure):
    rng = np.random.default_rng(4)
    cells = pd.DataFrame(
        {
            "level": LEAF,
            "area_id": [f"c{i}" for i in range(8)] * 3,
            "bucket_start": np.repeat([DAY0 + pd.Timedelta(days=d) for d in range(3)], 8),
        }
    ).assign(n=rng.integers(-3, 40, 24))
    districts = pd.DataFrame(
        {
            "level": "district",
            "area_id": ["d0", "d1"] * 3,
            "bucket_start": np.repeat([DAY0 + pd.Timedelta(days=d) for d in range(3)], 2),
        }
    ).assign(n=rng.integers(0, 30, 6))
    totals = pd.DataFrame(
        {"level": TOTAL, "area_id": TOTAL, "bucket_start": [DAY0 + pd.Timedelta(days=d) for d in range(3)]}
    ).assign(n=rng.integers(0, 50, 3))
    noisy = pd.concat([cells.iloc[::2], districts, totals], ignore_index=True)  # some cells unpublished
    assert published_violations(noisy, measure) > 0  # the noisy input is inconsistent: the check can fail
    fixed = consistent_counts(noisy, PARENTS, measure)
    assert published_violations(fixed, measure) == 0
    keys = ["level", "area_id", "bucket_start"]
    both = noisy.merge(fixed, on=keys, suffixes=("_noisy", "_fixed"))
    assert len(both) == len(noisy) == len(fixed)
    assert (both["n_fixed"] >= both["n_noisy"].clip(lower=0)).all()


# a 2-day rung and the whole period over the 10 days of `membership`
RUNGS = {
    "2d": {DAY0 + pd.Timedelta(days=d): DAY0 + pd.Timedelta(days=d - d % 2) for d in range(10)},
    "period": {DAY0 + pd.Timedelta(days=d): DAY0 for d in range(10)},
}


@pytest.mark.slow
@pytest.mark.parametrize(("b", "c"), [(2, 1), (3, 2)])
def test_a_unit_moves_at_most_l0_figures_of_every_rung_by_one(b, c):
    """Each rung of a time ladder is counted from the same bounded rows: the sensitivity grows with the rungs
    (the policy's bucket's l0 alone is exceeded by the ladder's figures)."""
    kept = bound_contributions(membership(), b, c, seed=2)
    full = ladder_counts(kept, PARENTS, RUNGS)
    assert {"cell@2d", "district@period", "total@2d"} <= set(full["level"])
    moved = [unit_keys(full, ladder_counts(kept[kept["unit"] != u], PARENTS, RUNGS)) for u in kept["unit"].unique()[:25]]
    assert max(moved) <= Sensitivity.of(LEVELS, b, c, rungs=len(RUNGS)).l0
    assert max(moved) > Sensitivity.of(LEVELS, b, c).l0


def test_a_rung_counts_a_unit_once_over_its_buckets_from_the_bounded_rows():
    kept = bound_contributions(membership(), 3, 2, seed=2)
    rung = rung_membership(kept, RUNGS["period"])
    assert rung.groupby(["unit", "bucket_start"])["cell_id"].count().max() <= 3 * 2  # B x C areas at most
    assert not rung.duplicated().any() and (rung["bucket_start"] == DAY0).all()
    with pytest.raises(ValueError, match="outside the time ladder"):
        rung_membership(kept, {DAY0: DAY0})


def ladder_violations(frame: pd.DataFrame, measure: str) -> int:
    """Rung figures below what their finer rung implies (the largest of the same area in the buckets inside
    it), and within each rung the areas' violations (the policy's bucket under `measure`, rungs as visitors)."""
    steps = [(None, "2d", RUNGS["2d"]), ("2d", "period", {DAY0 + pd.Timedelta(days=d): DAY0 for d in range(0, 10, 2)})]
    rung = frame["level"].map(rung_of)
    count = published_violations(frame[rung.isna()], measure)
    for fine, coarse, coarse_of in steps:
        finer = frame[rung.isna() if fine is None else rung == fine].assign(level=lambda f: f["level"].map(space_level))
        here = frame[rung == coarse].assign(level=lambda f: f["level"].map(space_level))
        count += published_violations(here, "visitors")
        implied = finer.assign(bucket_start=finer["bucket_start"].map(coarse_of)).groupby(
            ["level", "area_id", "bucket_start"]
        )
        both = here.merge(implied["n"].max().rename("floor").reset_index(), on=["level", "area_id", "bucket_start"])
        count += int((both["n"] < both["floor"]).sum())
    return count


def test_post_processing_makes_every_rung_consistent_with_the_finer_one_and_only_raises():
    rng = np.random.default_rng(5)
    kept = bound_contributions(membership(), 3, 2, seed=2)
    truth = ladder_counts(kept, PARENTS, RUNGS)
    noisy = truth.assign(n=truth["n"] + rng.integers(-12, 13, len(truth))).sample(frac=0.8, random_state=1)
    assert ladder_violations(noisy, "presence") > 0  # the noisy input breaks the relations: the check can fail
    links = [("2d", RUNGS["2d"]), ("period", {DAY0 + pd.Timedelta(days=d): DAY0 for d in range(0, 10, 2)})]
    fixed = consistent_ladder(noisy, PARENTS, "presence", links)
    assert ladder_violations(fixed, "presence") == 0
    both = noisy.merge(fixed, on=["level", "area_id", "bucket_start"], suffixes=("_noisy", "_fixed"))
    assert len(both) == len(noisy) == len(fixed) and (both["n_fixed"] >= both["n_noisy"].clip(lower=0)).all()


def test_a_configurations_share_shown_and_error_are_measured_against_the_truth_and_never_public():
    day = [DAY0, DAY0 + pd.Timedelta(days=1)]
    truth = pd.DataFrame(
        {
            "level": [LEAF] * 4 + [TOTAL] * 2,
            "area_id": ["c0", "c1", "c0", "c1", TOTAL, TOTAL],
            "bucket_start": [*day[:1] * 2, *day[1:] * 2, *day],
        }
    ).assign(n=[10, 20, 0, 40, 30, 40])
    published = truth.iloc[[0, 3, 4]].assign(n=[15, 40, 33])  # c0 day 0 (+50 %), c1 day 1 (exact), a total (+10 %)
    figures = shown_and_error(published, truth)
    assert figures["shown"] == pytest.approx(2 / 3)  # of the 3 non-empty cell figures (c0 day 1 is empty)
    assert figures["error_median"] == pytest.approx(0.1)
    row = DpFrontierRow("1w, B=1, C=1", 1, 1, 3, [2.0, 1e-7], 1.5, 22, 4.5, **figures, published=False)
    assert {"shown", "error_median"} <= set(row.to_json())  # the internal row carries them...
    public = {"configuration", "max_buckets", "max_areas", "l0", "scale", "threshold", "interval95", "published"}
    assert set(row.public().to_json()) == public  # ...release.json's does not


@pytest.mark.slow
def test_every_configuration_is_calibrated_at_the_policys_loss():
    params = DpParams("approx", 1e-6, 2, 1, epsilon=1.0)
    rows = [
        evaluate(
            membership(units=1200),
            Configuration(rung, b, c),
            RUNGS.get(rung or ""),
            PARENTS,
            LEVELS,
            params,
            "visitors",
            3,
            name=Configuration(rung, b, c).name("1d"),
        )
        for rung, b, c in ((None, 2, 1), ("2d", 1, 2), ("period", 1, 2))
    ]
    assert [r.l0 for r in rows] == [Sensitivity.of(LEVELS, b, c).l0 for b, c in ((2, 1), (1, 2), (1, 2))]
    assert all(r.loss[0] == pytest.approx(1.0) and r.loss[1] <= 1e-6 for r in rows)
    assert rows[1].scale == rows[2].scale and rows[0].scale != rows[1].scale
    assert (
        rows[2].shown == 1.0 and rows[2].shown > rows[0].shown
    )  # every cell of the whole period, each held by about 300 units, is shown
