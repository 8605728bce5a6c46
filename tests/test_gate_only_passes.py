"""The coarsening loop reads the gate's figures of every configuration it tries and runs the regularity attackers
(reported, never gated) on the configuration it keeps alone. The gate's figures must be the same whether they
ran or not, the kept configuration's report must be the one a fresh assessment gives, and the risk step must
read it instead of assessing again."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from support.fixture import advantage_city_policy
from support.regularity import K, day_release, regular_city
from support.spies import counted

from spatial_release import stages
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.progress import event_of
from spatial_release.risk import advantage
from spatial_release.risk.advantage import AdvantageParams, AdvantageReport, ZoneAdvantage, assess_advantage
from spatial_release.stages import advantage as advantage_stage
from spatial_release.stages import coarsen
from spatial_release.stages.context import Published, ReleaseContext
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings

GATE_FIELDS = ("zone", "advantage", "advantage_ucb", "exposed", "exposed_share")


def _release():
    return day_release(regular_city(300, cells=80, days=30, seed=1), K, 5)


def _gate(report: AdvantageReport) -> list[tuple]:
    return [tuple(getattr(z, f) for f in GATE_FIELDS) + (z.gated(),) for z in report.zones]


def _without_timing(report: AdvantageReport) -> str:
    data = report.to_json()
    data.pop("seconds")
    return json.dumps(data, sort_keys=True)


def test_the_gate_figures_are_the_same_with_and_without_the_regularity_attackers():
    sets, names, counts, hidden, _ = _release()
    whole = assess_advantage(sets, names, counts, K, AdvantageParams(), 0.05, None, hidden)
    gate_only = assess_advantage(sets, names, counts, K, AdvantageParams(), 0.05, None, hidden, reported=False)
    # the fixture gives the regularity attackers something to report: else the comparison proves nothing
    assert any(z.success_with > 0 and z.regularity_targets > 0 for z in whole.zones)
    assert whole.reported and not gate_only.reported
    assert _gate(gate_only) == _gate(whole)
    assert all(z.regularity_targets == 0 for z in gate_only.zones)  # they did not run
    # a decision from the gate's figures: asked to report, the same report as asked outright
    seen: list[list[ZoneAdvantage]] = []

    def decide(zones: list[ZoneAdvantage]) -> bool:
        seen.append(zones)
        return True

    decided = assess_advantage(sets, names, counts, K, AdvantageParams(), 0.05, None, hidden, reported=decide)
    # asked once with the gate's figures, or first without the recovery's bounds (it has none here)
    assert seen and [tuple(getattr(z, f) for f in GATE_FIELDS) for z in seen[-1]] == [
        g[: len(GATE_FIELDS)] for g in _gate(whole)
    ]
    assert _without_timing(decided) == _without_timing(whole)
    declined = assess_advantage(sets, names, counts, K, AdvantageParams(), 0.05, None, hidden, reported=lambda _: False)
    assert _without_timing(declined) == _without_timing(gate_only)


def test_a_report_whose_gate_figures_moved_is_refused():
    sets, names, counts, hidden, _ = _release()
    whole = assess_advantage(sets, names, counts, K, AdvantageParams(), 0.05, None, hidden)
    advantage._same_gate(whole.zones, list(whole.zones))  # the same figures pass
    moved = [replace(whole.zones[0], advantage_ucb=whole.zones[0].advantage_ucb + 0.01), *whole.zones[1:]]
    with pytest.raises(RuntimeError, match="gate figures differ"):
        advantage._same_gate(whole.zones, moved)


@pytest.fixture(scope="module")
def climbing_city(tmp_path_factory):
    """A small city (200 persons, 1 km x 1 week, k = 5, 4 km risk zones) under the advantage gate at a ceiling
    of 0.05 with coarsening applied: the loop tries more than one configuration."""
    folder = tmp_path_factory.mktemp("gate-only-passes")
    pings = write_pings(generate_pings(SyntheticConfig(persons=200, days=21)), folder / "pings.parquet")
    path = advantage_city_policy(folder, "gate_only_passes", 1000, 4000, coarsen="apply")
    text = path.read_text().replace("per_release_ceiling: 1.0", "per_release_ceiling: 0.05")
    path.write_text(text)
    ctx = ReleaseContext(load_policy(path), Period.parse("2018-Q1"), folder / "work")
    assert ctx.policy.risk is not None and ctx.policy.risk.per_release_ceiling == 0.05
    stages.run_ingest(ctx, [pings])
    stages.run_counts(ctx)
    return ctx, folder


def _protect_counting_regularity(
    ctx: ReleaseContext, folder, monkeypatch, messages: list[str] | None = None
) -> tuple[list, int]:
    """The protection's frontier and how many zones the regularity attackers ran on, in a fresh ledger
    (`messages`: where its progress messages go)."""
    calls: list[int] = []
    monkeypatch.setattr(advantage, "_sampled_attacks", counted(advantage._sampled_attacks, calls))
    ledger = Ledger(folder / "ledger", folder / "releases")
    heard = messages if messages is not None else []
    summary = stages.run_protect(ctx, published=Published(ledger, folder / "releases"), progress=heard.append)
    return list(summary.frontier or []), len(calls)


def _risk_json(ctx: ReleaseContext, ledger: Ledger) -> str:
    data = stages.run_risk(ctx, ledger).to_json()
    data.pop("seconds", None)
    return json.dumps(data, sort_keys=True)


def _saved_whole_report(ctx: ReleaseContext) -> dict:
    return json.loads((ctx.area.root / "memo.internal.json").read_text())["results"]["advantage"]


@pytest.mark.slow
def test_the_loop_runs_the_regularity_attackers_on_the_configuration_it_keeps_alone(climbing_city, monkeypatch):
    ctx, folder = climbing_city
    messages: list[str] = []
    frontier, ran = _protect_counting_regularity(ctx, folder, monkeypatch, messages)
    assert len(frontier) >= 2  # the loop climbed: else there is no configuration it did not keep
    # the run log says when each configuration's assessment starts and ends, and how many zones it found over
    risk = [e for m in messages if (e := event_of(m)) is not None and e.step == "risk"]
    opened = [e for e in risk if str(e).startswith("risk: assessing the candidate")]
    closed = [e for e in risk if e.done]
    assert len(opened) == len(closed) == len(frontier)
    assert [f"{len(row.zones_over)} zone(s) over the gate" in str(e) for row, e in zip(frontier, closed)] == [True] * len(
        frontier
    )
    saved = _saved_whole_report(ctx)["result"]
    assert saved["reported"] and saved["zones"] and all(z["regularity_targets"] > 0 for z in saved["zones"])
    assert ran == len(saved["zones"])  # one assessment's worth of regularity attacks, not one per configuration
    monkeypatch.undo()
    ledger = Ledger(folder / "ledger", folder / "releases")
    assessed: list[int] = []
    monkeypatch.setattr(advantage_stage, "advantage_of", counted(advantage_stage.advantage_of, assessed))
    kept = _risk_json(ctx, ledger)
    monkeypatch.undo()
    assert not assessed  # the risk step read the loop's report of the configuration it kept
    # the same assessment as a fresh one of the kept configuration, with every attacker
    ctx.memo().save("advantage", None, {})
    assert _risk_json(ctx, ledger) == kept
    # a report of the gate's figures alone, saved under the whole report's name, is assessed again
    entry = _saved_whole_report(ctx)
    ctx.memo().save("advantage", entry["digest"], {**entry["result"], "reported": False})
    monkeypatch.setattr(advantage_stage, "advantage_of", counted(advantage_stage.advantage_of, assessed))
    assert _risk_json(ctx, ledger) == kept
    monkeypatch.undo()
    assert assessed == [1] and _saved_whole_report(ctx)["result"]["reported"]
    # negative control of the count: a loop that keeps (and so reports) every configuration it tries runs them
    # once per configuration (the loop climbs as before: `climb_zones` does not read `can_climb`)
    monkeypatch.setattr(coarsen, "can_climb", lambda *_: False)
    frontier_all, ran_all = _protect_counting_regularity(ctx, folder, monkeypatch)
    assert [r.configuration for r in frontier_all] == [r.configuration for r in frontier]
    assert ran_all > ran
