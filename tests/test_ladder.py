"""Time generalisation ladders: counting at every rung, the relations between rungs in the audit (with their
negative controls), which coarser figures are offered, and the utility report re-derived independently."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from support.fixture import CRS, policy_dict, write_policy
from support.ladder import ladder_pings, write_ladder_policy

from spatial_release import stages
from spatial_release.levels import LEAF, at_rung
from spatial_release.period import Period
from spatial_release.policy import PolicyError, load_policy
from spatial_release.stages import keys as keys_stage
from spatial_release.stages.count import read_true_counts
from spatial_release.suppression.audit import audit
from spatial_release.suppression.release_system import system_for
from spatial_release.suppression.table import EMPTY, PRIMARY, PUBLISHED, SECONDARY, UNION, Relation, Table

P, S, U = PRIMARY, SECONDARY, PUBLISHED


# ---- the audit across rungs: negative controls ------------------------------------------------------


def _week_and_days(week: int, days: dict[str, tuple[int, str]], week_status: str = U) -> Table:
    table = Table()
    w = table.add("cell@1w", "c", 0, week, week_status)
    kids = tuple(table.add("cell", "c", d, v, st) for d, (v, st) in days.items())
    table.relations.append(Relation(UNION, w, kids))
    return table


def test_visitors_week_equal_to_its_published_days_plus_one_withheld_day_pins_that_day():
    # Each unit visited on one day only, so week = sum of days: 12 = 4 + 5 + 3. Publishing the week beside
    # two of its days gives the third a lower bound of 12 - 9 = 3, its true value.
    table = _week_and_days(12, {"mon": (4, U), "tue": (5, U), "wed": (3, P)})
    result = audit(table, k=5)
    [interval] = result.intervals
    assert not result.passed and interval.lo == 3 and interval.failing in ("lower", "both")


def test_the_same_week_without_its_relation_would_pass_so_the_relation_is_what_fails_it():
    table = _week_and_days(12, {"mon": (4, U), "tue": (5, U), "wed": (3, P)})
    table.relations.clear()
    table.relations.append(Relation(UNION, table.index[("cell@1w", "c", 0)], (table.index[("cell", "c", "wed")],)))
    # only week >= wed and week <= wed: pinned to the week, 12 >= k, and lower bound 12 > v: still fails,
    # so build the positive control the honest way: a second withheld day takes the slack
    table = _week_and_days(12, {"mon": (4, U), "tue": (5, S), "wed": (3, P)})
    assert audit(table, k=5).passed


def test_a_week_is_at_least_each_of_its_days_so_a_small_week_caps_a_withheld_day():
    # week 4 published, day withheld: the attacker knows day <= 4 < k -> fails the upper protection
    table = _week_and_days(4, {"mon": (3, P), "tue": (2, S)})
    result = audit(table, k=5)
    assert not result.passed and all(i.up <= 4 for i in result.intervals)


# ---- the whole pipeline on a ladder ------------------------------------------------------------------


@pytest.fixture
def ladder_policy(tmp_path: Path):
    return write_ladder_policy(tmp_path)


def _run_to_candidate(policy, tmp_path: Path):
    ctx = stages.ReleaseContext(policy, Period.parse("2018-Q1"), tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    return ctx


def _presence_membership(pings: pd.DataFrame, policy) -> pd.DataFrame:
    """(device, day, cell) by the policy's presence rule, re-derived here with pandas and pyproj."""
    from pyproj import Transformer

    to_xy = Transformer.from_crs("EPSG:4326", CRS, always_xy=True)
    x, y = to_xy.transform(pings["lon"].to_numpy(), pings["lat"].to_numpy())
    size = policy.geometry.size_m
    cells = [f"{size}mE{int(a // size * size)}N{int(b // size * size)}" for a, b in zip(x, y)]
    local = pd.to_datetime(pings["when"]).dt.tz_localize("America/New_York")
    frame = pd.DataFrame({"device": pings["device"], "cell": cells, "day": local.dt.floor("D").dt.tz_convert("UTC")})
    n = frame.groupby(["device", "day", "cell"]).size().rename("n").reset_index()
    n = n.sort_values(["device", "day", "n", "cell"], ascending=[True, True, False, True])
    return n.drop_duplicates(["device", "day"])[["device", "day", "cell"]]


@pytest.mark.slow
def test_every_rung_counts_distinct_units_and_published_figures_match_the_raw_pings(ladder_policy, tmp_path):
    ctx = _run_to_candidate(ladder_policy, tmp_path)
    members = _presence_membership(ladder_pings(), ladder_policy)
    members["week"] = (
        members["day"]
        .dt.tz_convert("America/New_York")
        .dt.tz_localize(None)
        .dt.to_period("W-SUN")
        .dt.start_time.dt.tz_localize("America/New_York")
        .dt.tz_convert("UTC")
    )

    def parent(cell: str) -> str:
        e, n = map(int, cell.removeprefix("1000mE").split("N"))
        return f"2000mE{e // 2000 * 2000}N{n // 2000 * 2000}"

    members["parent"] = members["cell"].map(parent)
    expected = {}
    for level, area in ((LEAF, "cell"), ("grid_2000m", "parent")):
        for (a, b), n in members.groupby([area, "day"])["device"].nunique().items():
            expected[(level, a, b)] = n
        for (a, b), n in members.groupby([area, "week"])["device"].nunique().items():
            expected[(at_rung(level, "1w"), a, b)] = n  # distinct devices of the week, never a sum of days
        for a, n in members.groupby(area)["device"].nunique().items():
            expected[(at_rung(level, "period"), a, "period")] = n
    cells = pd.read_parquet(ctx.area.candidate / "cells.parquet")
    margins = pd.read_parquet(ctx.area.candidate / "margins.parquet")
    col = ladder_policy.count_column
    rungs = set(margins["level"])
    assert {"cell@1w", "grid_2000m@1w"} & rungs, "the ladder published no coarser figure at all"
    checked = 0
    for row in cells.itertuples(index=False):
        if getattr(row, col) > 0:
            assert getattr(row, col) == expected[(LEAF, row.cell_id, pd.Timestamp(row.bucket_start))]
            checked += 1
    for row in margins.itertuples(index=False):
        base, _, rung = row.level.partition("@")
        if base not in (LEAF, "grid_2000m"):
            continue
        key = (row.level, row.area_id, "period" if rung == "period" else pd.Timestamp(row.bucket_start))
        assert getattr(row, col) == expected[key], key
        assert getattr(row, col) >= ladder_policy.k
        checked += 1
    assert checked > 10
    # a week figure of a cell is no sum of its days where a device came back on two days
    week_sum = members.groupby(["cell", "week"])["device"].size()
    week_distinct = members.groupby(["cell", "week"])["device"].nunique()
    assert (week_sum > week_distinct).any()


@pytest.mark.slow
def test_additive_identities_hold_where_all_their_terms_are_published(ladder_policy, tmp_path):
    ctx = _run_to_candidate(ladder_policy, tmp_path)
    col = ladder_policy.count_column
    cells = pd.read_parquet(ctx.area.candidate / "cells.parquet")
    margins = pd.read_parquet(ctx.area.candidate / "margins.parquet")
    parents = margins[margins["level"] == "grid_2000m"]
    hierarchy = {f"1000mE{e}N{n}" for e in (580_000, 581_000) for n in (4_508_000, 4_509_000)}
    checked = 0
    for row in parents.itertuples(index=False):
        kids = cells[(cells["bucket_start"] == row.bucket_start) & cells["cell_id"].isin(hierarchy)]
        if len(kids) == 4:  # presence: a parent is the sum of its children at the policy's bucket
            assert int(kids[col].sum()) == getattr(row, col)
            checked += 1
    # between rungs: max(published days) <= week, and week <= sum of its days where all of them are published
    weeks = margins[margins["level"] == "cell@1w"]
    unions = 0
    for row in weeks.itertuples(index=False):
        days = cells[
            (cells["cell_id"] == row.area_id)
            & (cells["bucket_start"] >= row.bucket_start)
            & (cells["bucket_start"] < row.bucket_start + pd.Timedelta(days=7))
        ]
        assert (days[col].max() if len(days) else 0) <= getattr(row, col)
        unions += 1
    assert checked + unions > 0, "the candidate offers no identity and no week to check"


@pytest.mark.slow
def test_coarser_figures_are_offered_only_over_a_withheld_finer_figure(ladder_policy, tmp_path):
    ctx = _run_to_candidate(ladder_policy, tmp_path)
    true_cells, true_margins = stages.read_true_counts(ctx.area)
    margins = pd.read_parquet(ctx.area.candidate / "margins.parquet")
    k = ladder_policy.k
    small_days = true_cells[true_cells["n"] < k]
    small_weeks = {
        (r.area_id, r.bucket_start)
        for r in true_margins[(true_margins["level"] == "cell@1w") & (true_margins["n"] < k)].itertuples()
    }
    for row in margins[margins["level"] == "cell@1w"].itertuples(index=False):
        start = pd.Timestamp(row.bucket_start)
        under = small_days[
            (small_days["cell_id"] == row.area_id)
            & (small_days["bucket_start"] >= start)
            & (small_days["bucket_start"] < start + pd.Timedelta(days=7))
        ]
        assert len(under), f"{row.area_id} week {start} was published though none of its days is below k"
    for row in margins[margins["level"] == "cell@period"].itertuples(index=False):
        assert any(a == row.area_id for a, _ in small_weeks)


@pytest.mark.slow
def test_the_audit_of_the_published_files_models_the_rungs(ladder_policy, tmp_path):
    """Negative control on the real system: publish a withheld day back beside its published week and the
    audit of the files must fail or the figure must have been safe; adding the coarser figures changed the
    audit (relations across rungs exist and are UNION)."""
    ctx = _run_to_candidate(ladder_policy, tmp_path)
    true_cells, true_margins = stages.read_true_counts(ctx.area)
    table = system_for(true_cells, true_margins, ctx.disclosure)
    kinds = {(table.level[r.parent].partition("@")[2], r.kind) for r in table.relations if "@" in table.level[r.parent]}
    assert kinds and all(kind == UNION for _, kind in kinds)
    time_relations = [
        r for r in table.relations if table.level[r.parent] == "cell@1w" and all(table.level[c] == LEAF for c in r.children)
    ]
    assert time_relations, "no relation ties a cell's week to its days"
    assert any(table.status[c] == EMPTY for r in time_relations for c in r.children), (
        "empty days under a non-empty week must be explicit variables"
    )


def test_a_ladder_that_does_not_nest_is_refused_with_the_field(tmp_path, fixture_traces):
    data = policy_dict(str(fixture_traces))
    data["time"] = {"bucket": "2d", "timezone": "America/New_York", "ladder": ["1w"]}
    with pytest.raises(PolicyError, match="ladder"):
        load_policy(write_policy(tmp_path, data))
    data["time"] = {"bucket": "1d", "timezone": "America/New_York", "ladder": ["period", "1w"]}
    with pytest.raises(PolicyError, match="coarsest"):
        load_policy(write_policy(tmp_path, data))


@pytest.mark.slow
def test_a_ladder_release_publishes_end_to_end_with_its_report(ladder_policy, tmp_path):
    from spatial_release.cli import run_release

    outcome = run_release(str(ladder_policy.path), "2018-Q1", out=str(tmp_path / "out"), ledger=str(tmp_path / "ledger"))
    assert outcome.published, [f.message for f in outcome.failures]
    record = outcome.record
    assert record is not None and outcome.release_dir is not None
    by_level = record.counts.published_by_level
    assert by_level is not None
    assert any("@" in level for level in by_level), by_level
    margins = pd.read_parquet(outcome.release_dir / "margins.parquet")
    assert margins["level"].value_counts().to_dict() == {k: v for k, v in by_level.items() if k != LEAF}
    assert (outcome.release_dir / "report.html").is_file()
    # the risk gate saw the coarser figures: each published cell week is a key of every unit counted in it
    area = stages.ReleaseContext(ladder_policy, Period.parse("2018-Q1"), tmp_path / "out" / "work").area
    keys = keys_stage.key_set_rows(area.unit_keys)
    published_weeks = margins[margins["level"] == "cell@1w"]
    assert len(published_weeks), "the fixture publishes no cell week: the check below would prove nothing"
    week_keys = keys[keys["key"].str.contains("@1w@")]
    assert set(week_keys["cell_id"]) == set(published_weeks["area_id"])
    n_col = ladder_policy.count_column
    for row in published_weeks.itertuples(index=False):
        stamp = pd.Timestamp(row.bucket_start).strftime("%Y-%m-%dT%H:%MZ")
        units = week_keys.loc[week_keys["key"] == f"{row.area_id}@1w@{stamp}", "unit"].nunique()
        assert units == getattr(row, n_col)  # the week's key is held by exactly the units it counts


def _published_cell_rungs(ctx) -> tuple[set, set, set]:
    """The candidate's published cell keys at each rung: (cell, day), (cell, week start), cells of the period."""
    cells = pd.read_parquet(ctx.area.candidate / "cells.parquet")
    margins = pd.read_parquet(ctx.area.candidate / "margins.parquet")
    day = {(c, pd.Timestamp(b)) for c, b in zip(cells["cell_id"], cells["bucket_start"])}
    week = {
        (a, pd.Timestamp(b))
        for lv, a, b in zip(margins["level"], margins["area_id"], margins["bucket_start"])
        if lv == "cell@1w"
    }
    period = {a for lv, a in zip(margins["level"], margins["area_id"]) if lv == "cell@period"}
    return day, week, period


def _monday(start: pd.Timestamp) -> pd.Timestamp:
    """The UTC start of the New York week (Monday 00:00) holding a day bucket."""
    local = start.tz_convert("America/New_York")
    return (local - pd.Timedelta(days=local.weekday())).normalize().tz_convert("UTC")


@pytest.mark.slow
def test_utility_report_is_re_derived_independently(ladder_policy, tmp_path):
    import json

    ctx = _run_to_candidate(ladder_policy, tmp_path)
    report = json.loads((ctx.area.candidate / "manifest.json").read_text())["summary"]["utility"]
    true_cells, _ = stages.read_true_counts(ctx.area)
    published, weeks, periods = _published_cell_rungs(ctx)
    total = shown = at_day = 0
    for row in true_cells.itertuples(index=False):
        start = pd.Timestamp(row.bucket_start)
        total += row.n
        if (row.cell_id, start) in published:
            shown += row.n
            at_day += row.n
        elif (row.cell_id, _monday(start)) in weeks or row.cell_id in periods:
            shown += row.n
    zoning = report["zonings"][LEAF]
    assert zoning["unit_counts"] == total
    assert zoning["shown_at_leaf"] == pytest.approx(shown / total)
    assert zoning["finest_shown"][LEAF] == pytest.approx(at_day / total)
    assert report["headline"][LEAF]["baseline"] <= report["headline"][LEAF]["shown_at_leaf"] + 1e-12
    assert sum(s["figures"] for s in zoning["strata"]) == len(true_cells)


def _budget_policy(tmp_path: Path, budget: float):
    """The ladder pings plus one device alone in a cell of its own for the whole period: no rung of that
    cell ever reaches k, so its unit count stays unshown whatever the ladder does."""
    from pyproj import Transformer

    lon, lat = Transformer.from_crs(CRS, "EPSG:4326", always_xy=True).transform(583_500, 4_508_500)
    hermit = pd.DataFrame(
        [{"device": "hermit", "when": "2018-01-10 10:15:00", "lon": round(lon, 7), "lat": round(lat, 7), "gender": "m"}]
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    traces = tmp_path / "traces.csv"
    pd.concat([ladder_pings(), hermit], ignore_index=True).to_csv(traces, index=False)
    data = policy_dict(str(traces), k=5)
    data["time"] = {"bucket": "1d", "timezone": "America/New_York", "ladder": ["1w", "period"]}
    data["suppression"] = {"budget": budget, "climb": "to_budget"}
    return load_policy(write_policy(tmp_path, data))


def _unshown_share(ctx) -> float:
    """The main cells' unit counts shown at no rung of their cell, re-derived from the files."""
    true_cells, _ = stages.read_true_counts(ctx.area)
    day, week, period = _published_cell_rungs(ctx)
    unshown = sum(
        row.n
        for row in true_cells.itertuples(index=False)
        if (row.cell_id, pd.Timestamp(row.bucket_start)) not in day
        and (row.cell_id, _monday(pd.Timestamp(row.bucket_start))) not in week
        and row.cell_id not in period
    )
    return unshown / true_cells["n"].sum()


@pytest.mark.slow
def test_budget_as_target_climbs_only_until_the_budget_holds(tmp_path):
    probe = _run_to_candidate(_budget_policy(tmp_path / "probe", 0.99), tmp_path / "probe")
    before = _unshown_share(probe)
    margins = pd.read_parquet(probe.area.candidate / "margins.parquet")
    assert not margins["level"].str.contains("@").any(), "a budget that holds at the finest rung needs no climb"
    assert 0 < before < 0.99
    target = float(before) / 2
    ctx = _run_to_candidate(_budget_policy(tmp_path / "climb", target), tmp_path / "climb")
    ladder = stages.read_manifest(ctx.area).summary.ladder
    assert ladder is not None
    assert ladder["climb"] == "to_budget" and ladder["rounds"] >= 1 and sum(ladder["offered"].values()) >= 1
    after = _unshown_share(ctx)
    assert after <= target, (before, after, target)
    outcome = stages.check_suppression_budget(ctx)
    assert outcome.passed, outcome.summary
    levels = set(pd.read_parquet(ctx.area.candidate / "margins.parquet")["level"])
    assert {lv for lv in levels if "@" in lv} <= {"cell@1w", "cell@period"}  # only the cells climb


@pytest.mark.slow
def test_budget_that_even_the_coarsest_rung_cannot_meet_blocks_the_release(tmp_path):
    ctx = _run_to_candidate(_budget_policy(tmp_path, 0.0001), tmp_path)
    ladder = stages.read_manifest(ctx.area).summary.ladder
    assert ladder is not None
    assert not ladder["budget_holds"]
    outcome = stages.check_suppression_budget(ctx)
    assert not outcome.passed  # negative control: the budget check blocks
    assert _unshown_share(ctx) > 0.0001


@pytest.mark.slow
def test_a_blocked_risk_gate_proposes_the_ladder_rungs_with_their_figures(tmp_path):
    from spatial_release.ledger import Ledger
    from spatial_release.stages.keys import coarser_keys_sql, write_ladder_buckets

    traces = tmp_path / "traces.csv"
    ladder_pings().to_csv(traces, index=False)
    data = policy_dict(str(traces), k=5)
    data["time"] = {"bucket": "1d", "timezone": "America/New_York", "ladder": ["1w", "period"]}
    data["risk"]["per_release_ceiling"] = 0.0001  # every release blocks: the proposal must still be made
    policy = load_policy(write_policy(tmp_path, data, population=1))
    ctx = _run_to_candidate(policy, tmp_path)
    risk = stages.run_risk(ctx, Ledger(tmp_path / "ledger"))
    assert risk.status == "block" and risk.coarsening is not None
    assert [p.rung for p in risk.coarsening] == ["1w", "period"]
    assert all(p.release_figure is not None for p in risk.coarsening)
    outcome = stages.check_risk_budget(ctx)
    assert not outcome.passed and ("coarsening proposed" in outcome.summary or "no rung" in outcome.summary)
    # the keys a week release would show: exactly the units of each cell week that passes k
    import duckdb

    ladder = write_ladder_buckets(ctx)
    assert ladder is not None  # the policy has a time ladder
    keys = duckdb.connect().execute(coarser_keys_sql(ctx.area, ladder, "1w", policy.k)).df()
    _, true_margins = stages.read_true_counts(ctx.area)
    weeks = true_margins[(true_margins["level"] == "cell@1w") & (true_margins["n"] >= policy.k)]
    assert len(weeks) and keys.groupby("key")["unit"].nunique().sort_values().tolist() == sorted(weeks["n"].tolist())


@pytest.mark.slow
def test_the_policy_cost_reaches_protection_and_both_patterns_pass_the_audit(tmp_path):
    traces = tmp_path / "traces.csv"
    ladder_pings().to_csv(traces, index=False)
    for cost in ("unit_value", "cells"):
        data = policy_dict(str(traces), k=5)
        data["suppression"] = {"budget": 0.99, "cost": cost}
        folder = tmp_path / cost
        folder.mkdir()
        policy = load_policy(write_policy(folder, data))
        assert policy.suppression.cost == cost
        ctx = _run_to_candidate(policy, folder)
        assert ctx.disclosure.method.cost == cost
        assert stages.check_suppression_audit(ctx).passed


def _attack_policy(tmp_path: Path, ceiling: float, coarsen: str):
    traces = tmp_path / "traces.csv"
    ladder_pings().to_csv(traces, index=False)
    data = policy_dict(str(traces), k=5)
    data["time"] = {"bucket": "1d", "timezone": "America/New_York", "ladder": ["1w", "period"]}
    data["risk"].update(model="attack", coarsen=coarsen, per_release_ceiling=ceiling, cumulative_ceiling=1.0)
    return load_policy(write_policy(tmp_path, data))


def _climbed(tmp_path: Path, ceiling: float, coarsen: str):
    from spatial_release.ledger import Ledger
    from spatial_release.stages.context import Published

    tmp_path.mkdir(parents=True, exist_ok=True)
    policy = _attack_policy(tmp_path, ceiling, coarsen)
    ctx = stages.ReleaseContext(policy, Period.parse("2018-Q1"), tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    ledger = Ledger(tmp_path / "ledger", tmp_path / "releases")
    summary = stages.run_protect(ctx, published=Published(ledger, tmp_path / "releases"))
    return ctx, summary, stages.run_risk(ctx, ledger)


@pytest.mark.slow
def test_a_zone_over_the_attack_gate_is_shown_coarser_and_the_frontier_says_so(tmp_path):
    """risk.coarsen apply: the zone the attacks single out most is withheld at the policy's bucket and shown at
    the ladder's next rung, in a release protected and audited again; the frontier records both
    configurations, and release.json's part of it names them only. Negative control: the same policy with
    coarsen propose is blocked by the gate."""
    _, _, probe = _climbed(tmp_path / "probe", 1.0, "propose")
    figures = sorted((z.attack_success, z.zone) for z in probe.zones if z.attack_success)
    assert figures and figures[-1][0] > 0  # the fixture gives the attacks something: else the test proves nothing
    worst_figure, worst_zone = figures[-1]
    ceiling = worst_figure * 0.99
    ctx, summary, risk = _climbed(tmp_path / "apply", ceiling, "apply")
    first, *rest = summary.frontier
    assert first.configuration == "as counted" and not first.passed and first.worst_zone_over == worst_zone
    assert rest and worst_zone in rest[0].zones_coarsened
    cells = pd.read_parquet(ctx.area.candidate / "cells.parquet")
    if summary.frontier[-1].passed:
        assert risk.status != "block" and risk.release_figure <= ceiling
        climbed = {z for z, step in summary.frontier[-1].zones_coarsened.items() if step >= 1}
        assert not set(cells["cell_id"]) & climbed  # their days are withheld...
        margins = pd.read_parquet(ctx.area.candidate / "margins.parquet")
        assert set(margins.loc[margins["level"].str.startswith(LEAF + "@"), "area_id"]) & climbed  # ...shown coarser
    else:
        assert risk.status == "block"
    assert len(risk.frontier) == len(summary.frontier) and risk.frontier[0].configuration == "as counted"
    assert [row.passed for row in risk.frontier] == [row.passed for row in summary.frontier]
    assert all(set(row.to_json()) == {"configuration", "passed", "published"} for row in risk.frontier)
    zones = {z for row in summary.frontier for z in row.zones_coarsened}
    assert not any(z in row.configuration for row in risk.frontier for z in zones)  # no zone is named
    # negative control: without coarsening, the same ceiling blocks
    _, unchanged, blocked = _climbed(tmp_path / "propose", ceiling, "propose")
    assert unchanged.frontier is None and blocked.status == "block"


def test_a_week_cut_by_the_end_of_the_quarter_is_never_published_under_the_week_key(tmp_path):
    """Q1 2018 ends on Saturday 31 March: the week of Monday 26 March is cut. Its figure would be published
    under the whole week's key with six days of units, and Q2 would publish the same key with the Sunday.
    Re-derived from the files: no published week figure reaches past the period's end, the whole week before
    it is published, and the cut week's days still are."""
    traces = tmp_path / "traces.csv"
    ladder_pings("2018-03-19", 13).to_csv(traces, index=False)  # Monday 19 March to Saturday 31 March
    data = policy_dict(str(traces), k=5)
    data["time"] = {"bucket": "1d", "timezone": "America/New_York", "ladder": ["1w"]}
    policy = load_policy(write_policy(tmp_path, data))
    ctx = _run_to_candidate(policy, tmp_path)
    end = pd.Timestamp("2018-04-01", tz="America/New_York").tz_convert("UTC")
    margins = pd.read_parquet(ctx.area.candidate / "margins.parquet")
    weeks = pd.to_datetime(margins.loc[margins["level"].str.endswith("@1w"), "bucket_start"], utc=True)
    assert len(weeks), "no week figure published at all: the check below would prove nothing"
    assert (weeks + pd.Timedelta(days=7) <= end).all(), sorted(set(weeks))
    # the cut week is counted (the relations between rungs need it) and would pass k in some cell with a
    # withheld day, so only the rule keeps it out
    true_cells, true_margins = read_true_counts(ctx.area)
    cut_week = pd.Timestamp("2018-03-26", tz="America/New_York").tz_convert("UTC")
    true_cut = true_margins[
        (true_margins["level"] == "cell@1w") & (pd.to_datetime(true_margins["bucket_start"], utc=True) == cut_week)
    ]
    small_days = true_cells[
        (pd.to_datetime(true_cells["bucket_start"], utc=True) >= cut_week) & (true_cells["n"] < policy.k)
    ]
    assert (true_cut["n"] >= policy.k).any() and len(small_days)
    cells = pd.read_parquet(ctx.area.candidate / "cells.parquet")
    days = pd.to_datetime(cells["bucket_start"], utc=True)
    assert (days >= pd.Timestamp("2018-03-26", tz="America/New_York").tz_convert("UTC")).any()


def test_a_week_cut_by_the_end_of_a_month_is_withheld_at_the_policy_bucket(tmp_path):
    """A monthly release of cell-weeks: January ends inside the week of Monday 29 January. Its figures hold
    three days of units; a quarterly release of the same population would publish the whole week under the
    same key. The cut week is counted but nothing of it is published; the whole week before it is."""
    traces = tmp_path / "traces.csv"
    ladder_pings("2018-01-22", 10).to_csv(traces, index=False)  # Monday 22 to Wednesday 31 January
    data = policy_dict(str(traces), k=5)
    data["period"] = "month"
    data["time"] = {"bucket": "1w", "timezone": "America/New_York"}
    policy = load_policy(write_policy(tmp_path, data))
    ctx = stages.ReleaseContext(policy, Period.parse("2018-01"), tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    cut_week = pd.Timestamp("2018-01-29", tz="America/New_York").tz_convert("UTC")
    cells = pd.read_parquet(ctx.area.candidate / "cells.parquet")
    margins = pd.read_parquet(ctx.area.candidate / "margins.parquet")
    published = pd.concat(
        [pd.to_datetime(cells["bucket_start"], utc=True), pd.to_datetime(margins["bucket_start"], utc=True)]
    )
    assert (published < cut_week).all() and (published == cut_week - pd.Timedelta(days=7)).any()
    true_cells, _ = read_true_counts(ctx.area)
    cut_true = true_cells[pd.to_datetime(true_cells["bucket_start"], utc=True) == cut_week]
    assert (cut_true["n"] >= policy.k).any()  # publishable by k: only the rule withholds it
