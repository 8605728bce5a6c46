"""Hostile tests of the time generalisation ladder (`time: {bucket: 1d, ladder: [1w, period]}`).

Hand-built pings, chosen adversarially, run through ingest -> counts -> protect. Then, from the published
files only (cells.parquet, margins.parquet) and the public structure (the four 1 km cells of each 2 km
parent, the days of each week, the weeks of the quarter), an attacker written here from scratch (its own
HiGHS model, not the product's Table or audit) bounds every withheld figure that is truly below k. The true
counts it is judged against are re-derived here from the pings, not read from the code under test.

Relations the attacker uses (sound for distinct-unit counts, whatever the product claims):
- day, presence: parent = sum of its 4 cells, total >= sum of the parents; visitors: max <= parent <= sum;
- every coarser rung, any measure: max(cells) <= parent <= sum(cells), total >= parent;
- time: max(days) <= week <= sum(days), max(weeks) <= period <= sum(weeks), at every level;
- every figure is an integer >= 0 (bounds are solved as MILPs, so at least as tight as the LP).
"""

from __future__ import annotations

from pathlib import Path

import highspy
import numpy as np
import pandas as pd
import pytest
from pyproj import Transformer
from support.fixture import CRS, policy_dict, write_policy

from spatial_release import stages
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.suppression.release_system import audit_published

# Whole releases: left out of the fast tier (pytest -m "not slow").
pytestmark = pytest.mark.slow

K = 5
TZ = "America/New_York"
TO_LONLAT = Transformer.from_crs(CRS, "EPSG:4326", always_xy=True)
A, B, C, D = (580_000, 4_508_000), (581_000, 4_508_000), (580_000, 4_509_000), (581_000, 4_509_000)
PARENT = "2000mE580000N4508000"
CELLS = [f"1000mE{x}N{y}" for x, y in (A, B, C, D)]
WEEK0 = pd.Timestamp("2018-01-08")  # a Monday, inside 2018-Q1
DAYS = [pd.Timestamp("2018-01-01") + pd.Timedelta(days=i) for i in range(90)]  # Q1 2018: 12 weeks + 6 days
PERIOD = pd.Timestamp("2018-01-01", tz=TZ).tz_convert("UTC")


def _utc(local_day: pd.Timestamp) -> pd.Timestamp:
    return pd.Timestamp(local_day).tz_localize(TZ).tz_convert("UTC")


def _week_of(local_day: pd.Timestamp) -> pd.Timestamp:
    return local_day - pd.Timedelta(days=local_day.weekday())


def _cid(corner) -> str:
    return f"1000mE{corner[0]}N{corner[1]}"


# ---- adversarial scenarios: (device, day offset from WEEK0, corner, pings) --------------------------------


def _scenario_lonely_and_movers() -> list[tuple[str, int, tuple, int]]:
    visits = []
    # A: device x present all week, alone on Wednesday; a0..a4 every day but Wednesday
    visits += [("x", d, A, 3) for d in range(7)]
    visits += [(f"a{i}", d, A, 3) for i in range(5) for d in range(7) if d != 2]
    # B: five devices each on exactly one day (every day below k, the week = k)
    visits += [(f"b{i}", i, B, 3) for i in range(5)]
    # a mover: B on Monday, C on Tuesday (in both cell weeks, once in the parent's week)
    visits += [("m", 0, B, 3), ("m", 1, C, 3)]
    # C: five devices every day
    visits += [(f"c{i}", d, C, 3) for i in range(5) for d in range(7)]
    # D: five devices on two days each: the week (5) differs by one from B's (6)
    visits += [(f"d{i}", i % 3, D, 3) for i in range(5)] + [(f"d{i}", 3 + i % 2, D, 3) for i in range(5)]
    # a same-day mover: 2 pings in D, 1 in B on Saturday (presence: D; visitors: both)
    visits += [("s", 5, D, 2), ("s", 5, B, 1)]
    return visits


def _scenario_two_weeks() -> list[tuple[str, int, tuple, int]]:
    """A cell below k every day of two weeks, whose weeks pass k and whose period is their sum minus one
    returning device: differencing period - week is the attack."""
    visits = []
    visits += [(f"p{i}", i, A, 3) for i in range(5)]  # week 1 of A: 5 devices, one a day
    visits += [(f"q{i}", 7 + i, A, 3) for i in range(4)]  # week 2 of A: 4 new devices...
    visits += [("p0", 12, A, 3)]  # ...and p0 back: week 2 = 5, period = 9
    visits += [(f"c{i}", d, C, 3) for i in range(6) for d in range(14)]  # C: 6 every day of both weeks
    visits += [(f"b{i}", d, B, 3) for i in range(2) for d in (0, 8)]  # B: 2 devices on two days
    return visits


def _scenario_leaver() -> list[tuple[str, int, tuple, int]]:
    """A and B hold the same five devices each day but Sunday, when one of A's devices is alone in A and
    another sits in B: the parent's week is one less than A's week plus B's. Presence (one cell a day) then
    ties the overlap of the two weeks to Sunday, the day A is below k."""
    visits = [(f"a{i}", d, A, 3) for i in range(5) for d in range(6)]
    visits += [("a0", 6, A, 3), ("a1", 6, B, 3)]
    visits += [(f"b{i}", d, B, 3) for i in range(5) for d in range(6)]
    return visits


def _scenario_calendar_edges() -> list[tuple[str, int, tuple, int]]:
    """Small days in the week of the DST change (Sunday 11 March 2018) and in the quarter's last, six-day
    week (26-31 March): the rung maps must follow local days there."""
    visits = []
    for start in (56, 77):  # Monday 5 March, Monday 26 March
        visits += [(f"e{start}_{i}", start + i, A, 3) for i in range(6)]  # one a day in A
        visits += [(f"f{start}_{i}", start + d, C, 3) for i in range(5) for d in range(6)]
        visits += [(f"g{start}", start + 5, D, 2), (f"g{start}", start + 5, A, 1)]  # Saturday: D (presence)
    visits += [("late", 82, B, 3), ("late", 6 + 56, B, 3)]  # Saturday 31 March and DST Sunday 11 March in B
    return visits


def _scenario_random(seed: int = 3) -> list[tuple[str, int, tuple, int]]:
    """Fuzz: 6-17 devices over two weeks, each stable (every day of week 1) or seen on 1-3 days, at home 75%
    of the time; on a fifth of their days they also pass one ping through another cell (visitors: a second
    visit; presence: never the dominant cell, so no ties)."""
    rng = np.random.default_rng(seed)
    corners, visits = [A, B, C, D], []
    for dev in range(int(rng.integers(6, 18))):
        home = corners[int(rng.integers(0, 4 if rng.random() < 0.6 else 2))]
        days = range(7) if rng.integers(0, 3) == 0 else rng.choice(14, size=int(rng.integers(1, 4)), replace=False)
        for d in days:
            cell = home if rng.random() < 0.75 else corners[int(rng.integers(0, 4))]
            visits.append((f"r{dev}", int(d), cell, 3))
            other = corners[int(rng.integers(0, 4))]
            if rng.random() < 0.2 and other != cell:
                visits.append((f"r{dev}", int(d), other, 1))
    return visits


def _pings(visits) -> pd.DataFrame:
    rows = []
    for device, offset, (x, y), n in visits:
        day = WEEK0 + pd.Timedelta(days=offset)
        for j in range(n):
            lon, lat = TO_LONLAT.transform(x + 100 + (150 + 200 * j) % 800, y + 100 + (250 + 150 * j) % 800)
            rows.append(
                {
                    "device": device,
                    "when": f"{day.date()} {8 + 3 * j:02d}:{10 + j:02d}:00",
                    "lon": round(lon, 7),
                    "lat": round(lat, 7),
                    "gender": "f",
                }
            )
    return pd.DataFrame(rows)


def _membership(visits, measure: str) -> pd.DataFrame:
    """(device, local day, cell) re-derived from the scenario itself: presence keeps the cell with most
    pings of the device's day (scenarios never tie), visitors keeps every visited cell."""
    frame = pd.DataFrame(visits, columns=["device", "offset", "corner", "n"])
    frame["day"] = [WEEK0 + pd.Timedelta(days=o) for o in frame["offset"]]
    frame["cell"] = [_cid(c) for c in frame["corner"]]
    frame = frame.groupby(["device", "day", "cell"], as_index=False)["n"].sum()
    if measure == "presence":
        frame = frame.sort_values(["device", "day", "n"], ascending=[True, True, False])
        assert not frame.duplicated(["device", "day", "n"]).any(), "scenario ties: ambiguous presence"
        frame = frame.drop_duplicates(["device", "day"])
    return frame[["device", "day", "cell"]]


def _true_figures(members: pd.DataFrame) -> dict[tuple, int]:
    """{(level, area, bucket as local naive start or 'period'): distinct devices}, every non-empty figure."""
    m = members.copy()
    m["week"] = m["day"].map(_week_of)
    m["parent"] = PARENT  # every scenario stays in one 2 km parent
    m["total"] = "total"
    out = {}
    for base, col in (("cell", "cell"), ("grid_2000m", "parent"), ("total", "total")):
        for (a, b), n in m.groupby([col, "day"])["device"].nunique().items():
            out[(base, a, b)] = n
        for (a, b), n in m.groupby([col, "week"])["device"].nunique().items():
            out[(f"{base}@1w", a, b)] = n
        for a, n in m.groupby(col)["device"].nunique().items():
            out[(f"{base}@period", a, "period")] = n
    return out


def _run(visits, measure: str, tmp_path: Path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    traces = tmp_path / "traces.csv"
    _pings(visits).to_csv(traces, index=False)
    data = policy_dict(str(traces), k=K, measure=measure)
    data["time"] = {"bucket": "1d", "timezone": TZ, "ladder": ["1w", "period"]}
    policy = load_policy(write_policy(tmp_path, data))
    ctx = stages.ReleaseContext(policy, Period.parse("2018-Q1"), tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    cells = pd.read_parquet(ctx.area.candidate / "cells.parquet")
    margins = pd.read_parquet(ctx.area.candidate / "margins.parquet")
    return ctx, policy, cells, margins


def _published(cells: pd.DataFrame, margins: pd.DataFrame, col: str) -> dict[tuple, int]:
    """The files as figures keyed like `_true_figures` (buckets back to local naive starts)."""
    out = {}
    for row in cells.itertuples(index=False):
        local = pd.Timestamp(row.bucket_start).tz_convert(TZ).tz_localize(None)
        out[("cell", row.cell_id, local)] = int(getattr(row, col))
    for row in margins.itertuples(index=False):
        rung = row.level.partition("@")[2]
        bucket = "period" if rung == "period" else pd.Timestamp(row.bucket_start).tz_convert(TZ).tz_localize(None)
        out[(row.level, row.area_id, bucket)] = int(getattr(row, col))
    return out


# ---- the independent attacker ----------------------------------------------------------------------------


class Attacker:
    """Every figure of the structure is a variable (no rest folding: all 4 cells x 90 days x 13 weeks x the
    period, the parent and the total at each rung); published figures are fixed."""

    def __init__(self, published: dict[tuple, int], measure: str, overlap: bool = False):
        self.published = published
        self.col: dict[tuple, int] = {}
        self._highs: highspy.Highs | None = None
        weeks = sorted({_week_of(d) for d in DAYS})
        areas = [("cell", c) for c in CELLS] + [("grid_2000m", PARENT), ("total", "total")]
        for base, area in areas:
            for d in DAYS:
                self._var((base, area, d))
            for w in weeks:
                self._var((f"{base}@1w", area, w))
            self._var((f"{base}@period", area, "period"))
        unknown = set(published) - set(self.col)
        assert not unknown, f"published figures outside the modelled structure: {sorted(unknown)[:3]}"
        self.rows: list[tuple[dict[int, float], float, float]] = []
        inf = highspy.kHighsInf
        for rung_buckets, suffix in ((DAYS, ""), (weeks, "@1w"), (["period"], "@period")):
            for b in rung_buckets:
                kids = [self.col[("cell" + suffix, c, b)] for c in CELLS]
                parent = self.col[("grid_2000m" + suffix, PARENT, b)]
                total = self.col[("total" + suffix, "total", b)]
                if suffix == "" and measure == "presence":
                    self.rows.append(({**{c: 1.0 for c in kids}, parent: -1.0}, 0.0, 0.0))
                else:
                    self.rows.append(({**{c: 1.0 for c in kids}, parent: -1.0}, 0.0, inf))
                    self.rows += [({c: 1.0, parent: -1.0}, -inf, 0.0) for c in kids]
                self.rows.append(({total: 1.0, parent: -1.0}, 0.0, inf))  # other parents: unknown, >= 0
        for base, area in areas:
            for w in weeks:
                week = self.col[(f"{base}@1w", area, w)]
                days = [self.col[(base, area, d)] for d in DAYS if _week_of(d) == w]  # the last is 6 days
                self.rows.append(({**{d: 1.0 for d in days}, week: -1.0}, 0.0, inf))
                self.rows += [({d: 1.0, week: -1.0}, -inf, 0.0) for d in days]
            period = self.col[(f"{base}@period", area, "period")]
            ws = [self.col[(f"{base}@1w", area, w)] for w in weeks]
            self.rows.append(({**{w: 1.0 for w in ws}, period: -1.0}, 0.0, inf))
            self.rows += [({w: 1.0, period: -1.0}, -inf, 0.0) for w in ws]
        if overlap:
            assert measure == "presence"
            self._overlap_cuts(weeks)

    def _overlap_cuts(self, weeks) -> None:
        """Presence only (one cell per unit per day), beyond anything the product claims to model: a unit in
        the weeks of two cells c and e was in e on some day when it was not in c, so
        |c_w & e_w| <= sum over the days d of min(c_w - c_d, e_d), and the parent's week
        P_w >= c_w + e_w - |c_w & e_w|. Written with one auxiliary y_d <= c_w - c_d, y_d <= e_d per day."""
        inf = highspy.kHighsInf
        for w in weeks:
            days = [d for d in DAYS if _week_of(d) == w]
            parent = self.col[("grid_2000m@1w", PARENT, w)]
            for c in CELLS:
                for e in CELLS:
                    if c == e:
                        continue
                    cw, ew = self.col[("cell@1w", c, w)], self.col[("cell@1w", e, w)]
                    ys = []
                    for d in days:
                        self._var(("overlap", c, e, d))
                        y = self.col[("overlap", c, e, d)]
                        ys.append(y)
                        self.rows.append(({y: 1.0, cw: -1.0, self.col[("cell", c, d)]: 1.0}, -inf, 0.0))
                        self.rows.append(({y: 1.0, self.col[("cell", e, d)]: -1.0}, -inf, 0.0))
                    self.rows.append(({parent: 1.0, cw: -1.0, ew: -1.0, **{y: 1.0 for y in ys}}, 0.0, inf))

    def _var(self, key: tuple) -> None:
        self.col[key] = len(self.col)

    def _model(self) -> highspy.Highs:
        """The attacker's integer program (published figures fixed, every relation a row), built once: each
        bound is the same program under another objective."""
        if self._highs is None:
            h = highspy.Highs()
            h.setOptionValue("output_flag", False)
            h.setOptionValue("threads", 1)
            n = len(self.col)
            lo = np.zeros(n)
            up = np.full(n, highspy.kHighsInf)
            for k_, v in self.published.items():  # (aux variables stay in [0, inf))
                lo[self.col[k_]] = up[self.col[k_]] = v
            h.addVars(n, lo, up)
            h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger))
            starts: list[int] = []
            index: list[int] = []
            values: list[float] = []
            for coefs, _, _ in self.rows:
                starts.append(len(index))
                for i in sorted(coefs):
                    index.append(i)
                    values.append(coefs[i])
            h.addRows(
                len(self.rows),
                np.array([r[1] for r in self.rows], dtype=float),
                np.array([r[2] for r in self.rows], dtype=float),
                len(index),
                np.array(starts, dtype=np.int32),
                np.array(index, dtype=np.int32),
                np.array(values, dtype=float),
            )
            self._highs = h
        return self._highs

    def bound(self, key: tuple, maximise: bool) -> float:
        h = self._model()
        h.changeColCost(self.col[key], 1.0)
        h.changeObjectiveSense(highspy.ObjSense.kMaximize if maximise else highspy.ObjSense.kMinimize)
        h.run()
        status, value = h.getModelStatus(), h.getInfo().objective_function_value
        h.changeColCost(self.col[key], 0.0)  # (after reading: a change of the model clears its status)
        if status == highspy.HighsModelStatus.kOptimal:
            return round(value, 6)
        if maximise and status in (highspy.HighsModelStatus.kUnbounded, highspy.HighsModelStatus.kUnboundedOrInfeasible):
            return float("inf")
        raise AssertionError(f"attacker model {h.modelStatusToString(status)} for {key}: the files contradict the structure")

    def interval(self, key: tuple) -> tuple[float, float]:
        return self.bound(key, False), self.bound(key, True)


def _leaks(truth: dict[tuple, int], published: dict[tuple, int], measure: str, overlap: bool = False) -> list[str]:
    attacker = Attacker(published, measure, overlap)
    out = []
    for key, v in sorted(truth.items(), key=str):
        if v >= K or key in published:
            continue
        lo, up = attacker.interval(key)
        assert lo <= v <= up, (key, v, lo, up)  # the attacker is sound: the truth is always feasible
        if lo > v - 1 or up < max(K, v + 1):
            out.append(f"{key} true {v}: attacker interval [{lo}, {up}]")
    return out


# ---- tests -----------------------------------------------------------------------------------------------

SCENARIOS = {
    "lonely_and_movers": _scenario_lonely_and_movers,
    "two_weeks": _scenario_two_weeks,
    "leaver": _scenario_leaver,
    "calendar_edges": _scenario_calendar_edges,
    "random_seed3": _scenario_random,
}
EVERY_CASE = pytest.mark.parametrize(
    "scenario, measure", [(s, m) for s in sorted(SCENARIOS) for m in ("presence", "visitors")]
)


def _released(scenario: str, measure: str, tmp_path: Path):
    """(context, count column, cells, margins, true figures re-derived here, published figures)."""
    visits = SCENARIOS[scenario]()
    ctx, policy, cells, margins = _run(visits, measure, tmp_path)
    truth = _true_figures(_membership(visits, measure))
    return ctx, policy.count_column, cells, margins, truth, _published(cells, margins, policy.count_column)


@EVERY_CASE
def test_published_figures_at_every_rung_are_the_true_distinct_counts_and_at_least_k(scenario, measure, tmp_path):
    *_, truth, published = _released(scenario, measure, tmp_path)
    coarse = [key for key in published if "@" in key[0]]
    assert coarse, "the ladder published no coarser figure: the scenario attacks nothing"
    for key, value in published.items():
        assert value == truth.get(key, 0), (key, value, truth.get(key, 0))
        assert value >= K, key
    # the quarter's last week (26-31 March) is cut by its end: never published under the week's key
    cut_week = _week_of(DAYS[-1])
    assert not [key for key in coarse if key[0].endswith("@1w") and pd.Timestamp(key[2]) in (cut_week, _utc(cut_week))]
    # each published coarser figure covers a finer figure that is truly below k, or (the period) a week cut by
    # the period's edge that holds units (offered only where needed)
    for level, area, bucket in coarse:
        base, _, rung = level.partition("@")
        if rung == "1w":
            finer = [truth.get((base, area, bucket + pd.Timedelta(days=i)), 0) for i in range(7)]
            assert any(0 < n < K for n in finer), (level, area, bucket)
        else:
            finer = [truth.get((f"{base}@1w", area, w), 0) for w in {_week_of(d) for d in DAYS}]
            cut = max(truth.get((f"{base}@1w", area, w), 0) for w in (cut_week, _utc(cut_week)))
            assert any(0 < n < K for n in finer) or cut > 0, (level, area, bucket)


@EVERY_CASE
def test_independent_attacker_cannot_narrow_any_withheld_primary(scenario, measure, tmp_path):
    *_, truth, published = _released(scenario, measure, tmp_path)
    assert any(0 < v < K for v in truth.values())
    leaks = _leaks(truth, published, measure, overlap=measure == "presence")
    assert not leaks, "\n".join(leaks)


def test_the_overlap_cut_is_stronger_than_the_claimed_relations_and_sound():
    """The attacker above is not vacuous: A holds the same 6 devices every day of a week (A's week = 6), B's
    week is 5. Under presence nobody of A's week can have been in B on any day, so the parent's week is at
    least 11; the claimed relations alone only say 7 (some day of B is >= 1, and that day's parent is A's 6
    plus it)."""
    published = {("cell", CELLS[0], WEEK0 + pd.Timedelta(days=i)): 6 for i in range(7)}
    published[("cell@1w", CELLS[0], WEEK0)] = 6
    published[("cell@1w", CELLS[1], WEEK0)] = 5
    key = ("grid_2000m@1w", PARENT, WEEK0)
    assert Attacker(published, "presence").interval(key)[0] == 7
    assert Attacker(published, "presence", overlap=True).interval(key)[0] == 11
    # and the cut is sound: 6 stayers in A, 5 in B on one day, and the parent's week is 11
    members = pd.DataFrame(
        [(f"a{i}", WEEK0 + pd.Timedelta(days=d), CELLS[0]) for i in range(6) for d in range(7)]
        + [(f"b{i}", WEEK0, CELLS[1]) for i in range(5)],
        columns=["device", "day", "cell"],
    )
    assert _true_figures(members)[key] == 11


def _republish(cells, margins, col, keys, truth):
    """The files with the true values of `keys` (local naive buckets) published back."""
    cells, margins = cells.copy(), margins.copy()
    add_c, add_m = [], []
    for level, area, bucket in keys:
        start = PERIOD if bucket == "period" else _utc(bucket)
        if level == "cell":
            add_c.append({"cell_id": area, "bucket_start": start, col: truth[(level, area, bucket)]})
        else:
            add_m.append({"level": level, "area_id": area, "bucket_start": start, col: truth[(level, area, bucket)]})
    if add_c:
        extra = pd.DataFrame(add_c)
        extra["bucket_start"] = pd.to_datetime(extra["bucket_start"], utc=True).astype(cells["bucket_start"].dtype)
        cells = pd.concat([cells, extra], ignore_index=True)
    if add_m:
        extra = pd.DataFrame(add_m)
        extra["bucket_start"] = pd.to_datetime(extra["bucket_start"], utc=True).astype(margins["bucket_start"].dtype)
        margins = pd.concat([margins, extra], ignore_index=True)
    return cells, margins


def test_negative_control_days_published_back_beside_their_week_fail_both_attackers(tmp_path):
    """Cell B's week (6) is published; its days are 2, 1, 1, 1, 1 (b0..b4 once each, the mover on Monday).
    Publishing four of them back (and the parent's weekend, so B's empty weekend is known) pins the fifth
    from below through week <= sum(days): my attacker and the product's audit of the files must both see it."""
    ctx, col, cells, margins, truth, published = _released("lonely_and_movers", "presence", tmp_path)
    b = _cid(B)
    assert published.get(("cell@1w", b, WEEK0)) == 6, "the scenario no longer publishes B's week"
    b_days = [WEEK0 + pd.Timedelta(days=i) for i in range(5)]
    assert all(("cell", b, d) not in published for d in b_days)
    # B's Saturday and Sunday are empty, but an outsider cannot tell empty from withheld: publish back every
    # figure of the parent's weekend too, so the parent identity shows B empty there
    weekend = [WEEK0 + pd.Timedelta(days=i) for i in (5, 6)]
    back = [("cell", b, d) for d in b_days[:4]]
    back += [key for key in truth if key[0] in ("cell", "grid_2000m") and key[2] in weekend and key not in published]
    cells2, margins2 = _republish(cells, margins, col, back, truth)
    published2 = _published(cells2, margins2, col)
    target = ("cell", b, b_days[4])
    lo, _ = Attacker(published2, "presence").interval(target)
    assert lo >= truth[target] == 1  # my attacker pins it from below
    true_cells, true_margins = stages.read_true_counts(ctx.area)
    result, _ = audit_published(true_cells, true_margins, cells2, margins2, ctx.disclosure)
    assert not result.passed
    # and on the files as released, the product's audit passes (so the failure above is the republishing)
    result, _ = audit_published(true_cells, true_margins, cells, margins, ctx.disclosure)
    assert result.passed, [str(i) for i in result.intervals if getattr(i, "failing", None)]


@pytest.mark.parametrize("scenario, measure", [("lonely_and_movers", "presence"), ("two_weeks", "visitors")])
def test_product_audit_agrees_with_my_attacker_when_withheld_figures_are_published_back(scenario, measure, tmp_path):
    """Negative controls in bulk: publish back each withheld figure at or above k (a secondary, or an
    unoffered coarser figure) and each withheld coarser-rung primary, one at a time, then every withheld
    figure at or above k at once; wherever my attacker then narrows a (still withheld) primary, the
    product's audit of those files must fail too. At least one republishing must break something, or the
    check proves nothing."""
    ctx, col, cells, margins, truth, published = _released(scenario, measure, tmp_path)
    true_cells, true_margins = stages.read_true_counts(ctx.area)
    above = [key for key, v in sorted(truth.items(), key=str) if v >= K and key not in published]
    coarse_primaries = [key for key, v in sorted(truth.items(), key=str) if v < K and "@" in key[0] and key not in published]
    candidates = above + coarse_primaries
    broken = 0
    for keys in [[key] for key in candidates] + [above]:  # each alone, then all those above k at once
        cells2, margins2 = _republish(cells, margins, col, keys, truth)
        leaks = _leaks(truth, _published(cells2, margins2, col), measure)
        if leaks:
            broken += 1
            result, _ = audit_published(true_cells, true_margins, cells2, margins2, ctx.disclosure)
            assert not result.passed, (keys, leaks)
    assert broken, f"no republished figure of {candidates} broke a primary: the control proves nothing"
