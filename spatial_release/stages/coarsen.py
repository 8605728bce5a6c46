"""The finest release the risk gate allows: protect, assess the candidate, coarsen the zones over the gate, and
again (`risk.coarsen: apply` under `risk.model: advantage` or `attack`).

A zone over the gate climbs one step at a time, and only that zone (when every zone over the gate has climbed
as far as it can, its units are singled out through the other zones they visit, and every zone climbs one
step): first its cells' figures at the policy's
bucket are withheld (shown at the next rung of the time ladder where the ladder offers it, else only through
their parent areas and totals), then its figures at that rung too, and so on until the zone's cells are shown
by their parents alone, and last by the totals alone (its own parent areas and the linked zonings' areas in it
withheld too). Each step is one whole protection (k floor, complements, audit), so every
configuration tried is a consistent, audited release; nothing is cut along lines drawn from the data (a zone
is an area of the policy's risk level, a rung a bucket of its ladder). The frontier records every
configuration tried, finest first: which zones were coarsened to which rung, how many figures it published,
the zones still over the gate with their figures, and whether it passed. Each configuration is held in memory
(`ReleaseContext.hold_candidate`) and only the last one is written. Under the advantage model each configuration
is assessed for the gate's figures alone, and the one the loop keeps with the regularity attackers too (reported,
never gated). The risk step then assesses the chosen candidate as any other, reading the key sets and the
assessment kept here under the candidate's digest (`CandidateTables.digest`), which the written files give again.

The k floor and the audit need no such loop (a time ladder climbs locally where a figure is below k), and a
suppression budget is met by `suppression.climb: to_budget`; a zone that is still over the gate with every
step taken is left to the risk gate, which blocks the release.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from spatial_release.dp.frontier import DpFrontierRow
from spatial_release.history import earlier_releases, spent_figures
from spatial_release.levels import LEAF, RUNG_SEP, at_rung
from spatial_release.progress import Progress, ProgressEvent, silent
from spatial_release.release import PublicFrontier, PublicFrontierRow
from spatial_release.risk import Adversary, cumulative_risk
from spatial_release.risk.advantage import AdvantageReport, ZoneAdvantage
from spatial_release.risk.attack import AttackReport
from spatial_release.risk.landscape import load_landscape
from spatial_release.stages.advantage import advantage_params, candidate_advantage, start_recovery
from spatial_release.stages.attack import attack_candidate, attack_params, attack_success, linked_areas_of_main
from spatial_release.stages.context import Published, ReleaseContext, risk_spec, zone_population
from spatial_release.stages.keys import keep_released_keys, write_ladder_buckets, write_risk_areas
from spatial_release.stages.results import Frontier, FrontierRow

FINEST = "as counted"  # the frontier's name for the policy's own bucket everywhere


@dataclass
class Climb:
    """How far each zone has climbed: 0 shows its cells at the policy's bucket, s > 0 withholds them there and at
    the first s - 1 rungs of the time ladder."""

    steps: dict[str, int] = field(default_factory=dict)

    def name(self, ladder: list[str]) -> str:
        if not self.steps:
            return FINEST
        shown = {z: rung_name(s, ladder) for z, s in self.steps.items()}
        return "; ".join(f"zone {z} at {r}" for z, r in sorted(shown.items()))

    def keys(
        self,
        zone_cells: dict[str, list[str]],
        true_cells: pd.DataFrame,
        true_margins: pd.DataFrame,
        ladder: list[str],
        zone_areas: ZoneAreas | None = None,
    ) -> set[tuple[str, str, int]]:
        """The figures the climb withholds: (level, area, bucket in ns): a zone's cells at the policy's bucket and
        the rungs climbed past; at the last step, at every rung, its parent areas that lie inside it and the
        linked zonings' areas in it (a parent of a linked zoning that reaches into it too): the zone shows
        through the totals alone."""
        keys: set[tuple[str, str, int]] = set()
        areas = zone_areas or ZoneAreas()
        base = true_margins["level"].str.split(RUNG_SEP).str[0]
        for zone, step in self.steps.items():
            inside = (areas.parents.get(zone, set()) | areas.linked.get(zone, set())) if step > len(ladder) + 1 else set()
            if inside:
                keys |= _keys_of(true_margins[[(b, a) in inside for b, a in zip(base, true_margins["area_id"])]])
            cells = set(zone_cells.get(zone, ()))
            levels = [LEAF] + [at_rung(LEAF, r) for r in ladder[: step - 1]]
            frames = [true_cells.assign(level=LEAF, area_id=true_cells["cell_id"])] + [
                true_margins[true_margins["level"] == level] for level in levels[1:]
            ]
            for frame in frames:
                keys |= _keys_of(frame[frame["area_id"].isin(cells)])
        return keys


def _keys_of(frame: pd.DataFrame) -> set[tuple[str, str, int]]:
    instants = pd.DatetimeIndex(pd.to_datetime(frame["bucket_start"], utc=True)).as_unit("ns").asi8
    return set(zip(frame["level"], frame["area_id"], instants.tolist()))


@dataclass
class ZoneAreas:
    """Per risk zone, the (level, area) that lie in it beyond its cells: the main geometry's parent areas all of
    whose cells are in it, and the linked zonings' areas (a leaf by its representative point, a parent when one
    of its leaves is in the zone)."""

    parents: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    linked: dict[str, set[tuple[str, str]]] = field(default_factory=dict)


def _inside(
    hierarchy: pd.DataFrame, zone_of_leaf: pd.Series, out: dict[str, set[tuple[str, str]]], touching: bool = False
) -> None:
    """Add to `out` each area of each level of `hierarchy` (cell_id plus a column per level) whose leaves all lie
    in one zone (`zone_of_leaf`, by leaf id); with `touching`, to every zone one of its leaves lies in."""
    zones = zone_of_leaf.reindex(hierarchy["cell_id"]).to_numpy()
    for level in [c for c in hierarchy.columns if c != "cell_id"]:
        frame = pd.DataFrame({"area": hierarchy[level].to_numpy(), "zone": zones}).dropna().drop_duplicates()
        if not touching:
            counted = frame.groupby("area")["zone"].transform("nunique")
            frame = frame[counted == 1]
        for area, zone in zip(frame["area"], frame["zone"]):
            out.setdefault(str(zone), set()).add((level, str(area)))


def zone_areas(ctx: ReleaseContext, cells: pd.Series) -> ZoneAreas:
    """The areas of every level that lie in each risk zone (`ZoneAreas`)."""
    distinct = cells.drop_duplicates()
    found = ZoneAreas()
    _inside(ctx.locator.hierarchy(distinct), ctx.risk_zones(distinct), found.parents)
    for spec in ctx.policy.geometry.linked:
        layer = ctx.layers.linked[spec.name]
        hierarchy = layer.parent_table()
        leaves = pd.Series(hierarchy["cell_id"].drop_duplicates().to_numpy())
        main = pd.Series(linked_areas_of_main(ctx, spec.name, leaves.to_numpy()), index=leaves.to_numpy())
        known = main.dropna()
        zone_of_main = ctx.risk_zones(pd.Series(known.unique())) if len(known) else pd.Series(dtype=object)
        zone_of_leaf = known.map(zone_of_main)
        for leaf, zone in zone_of_leaf.dropna().items():
            found.linked.setdefault(str(zone), set()).add((spec.name, str(leaf)))
        _inside(hierarchy, zone_of_leaf, found.linked, touching=True)
    return found


def effective_ceiling(ctx: ReleaseContext, published: Published) -> float:
    """The largest release figure the gate lets through: the per-release ceiling, and what keeps the cumulative
    figure under the programme ceiling given the earlier releases of the population."""

    risk = risk_spec(ctx.policy)
    previous = spent_figures(earlier_releases(ctx.policy, ctx.period, published.ledger, ctx.input_digests()))
    spent = cumulative_risk(previous)
    left = 1.0 - (1.0 - risk.cumulative_ceiling) / (1.0 - spent) if spent < 1 else 0.0
    return min(risk.per_release_ceiling, left)


def over_the_gate(
    report: AttackReport, ceiling: float, adversary: Adversary, population: dict[str, float] | None
) -> dict[str, float]:
    """Zones whose attack figure (`stages.attack.attack_success`, as the gate computes it) is over `ceiling`.
    The journalist's panel share is the zone's units over its public population: every unit with a point in
    the zone, published or not, so never a smaller share than the gate's (never a laxer loop)."""
    over = {}
    for z in report.zones:
        share = min(1.0, z.units / population[z.zone]) if population and population.get(z.zone) else None
        figure = attack_success(z.linkage, z.membership, adversary, share)
        if figure > ceiling:
            over[z.zone] = figure
    return over


def gate_adversary(ctx: ReleaseContext) -> tuple[Adversary, dict[str, float] | None]:
    """The landscape's adversary and public population per zone, as the risk stage reads them."""

    path = ctx.policy.resolve(risk_spec(ctx.policy).landscape)
    landscape, _ = load_landscape(path)
    return Adversary(landscape.adversary), zone_population(ctx.policy, landscape, path, ctx.layers)


def applies(ctx: ReleaseContext, published: Published | None) -> bool:
    risk = ctx.policy.risk
    return published is not None and risk is not None and risk.model in GATED and risk.coarsen == "apply"


GATED = ("advantage", "attack")  # the models whose figures the climbing loop reads


def zones_over(
    ctx: ReleaseContext,
    ceiling: float,
    adversary: Adversary,
    population: dict[str, float] | None,
    kept: Callable[[dict[str, float]], bool] | None = None,
    progress: Progress = silent,
) -> dict[str, float]:
    """The zones over the gate of the candidate (the one the loop holds), under the policy's model: the
    advantage (each zone's gated figure, `risk.advantage.ZoneAdvantage.gated`) or the attacks' success.
    `kept`: whether the loop keeps the candidate, given its zones over the gate (None: it does). The advantage's
    regularity attackers, reported and never gated, run only on a candidate the loop keeps: the risk step then
    reads that report. `progress` hears when the assessment starts and ends (it is most of the protection
    step's time under the advantage gate), with how many zones are over the gate, never which or by how much."""
    model = risk_spec(ctx.policy).model
    progress(ProgressEvent("risk", f"risk: assessing the candidate against the {model} gate"))
    started = time.perf_counter()
    if model == "advantage":

        def over_of(zones: list[ZoneAdvantage]) -> dict[str, float]:
            return {z.zone: z.gated() for z in zones if z.gated() > ceiling}

        report = advantage_of_candidate(ctx, True if kept is None else lambda zones: kept(over_of(zones)))
        over = over_of(report.zones)
    else:
        over = over_the_gate(attack_of_candidate(ctx), ceiling, adversary, population)
    seconds = time.perf_counter() - started
    progress(
        ProgressEvent(
            "risk",
            f"risk: candidate assessed in {seconds:.1f} s, {len(over)} zone(s) over the gate",
            seconds=round(seconds, 1),
            done=True,
        )
    )
    return over


def advantage_of_candidate(
    ctx: ReleaseContext, reported: bool | Callable[[list[ZoneAdvantage]], bool] = True
) -> AdvantageReport:
    """The advantage of the candidate (the one the loop holds, else the files), from its key sets coded and kept
    as the release's key set file: the risk step reads the last pass's instead of coding them again
    (`keys.kept_keys_current`). `reported`: as `risk.advantage.assess_advantage`'s."""
    ladder = write_ladder_buckets(ctx)
    write_risk_areas(ctx)
    landscape, _ = load_landscape(ctx.policy.resolve(risk_spec(ctx.policy).landscape))
    ctx.area.risk.mkdir(parents=True, exist_ok=True)
    # the recovery reads no key set: it starts now, beside their coding, and stops if nothing reads it
    early = start_recovery(ctx, ctx.risk_zones, advantage_params(landscape))
    try:
        kept = keep_released_keys(ctx, ladder)
        return candidate_advantage(ctx, landscape, ctx.area.unit_keys, reported=reported, early=early, held=kept)
    finally:
        early.stop()


def attack_of_candidate(ctx: ReleaseContext) -> AttackReport:
    """The attacks on the candidate (the one the loop holds, else the files; every rung), with the policy's
    landscape."""
    write_ladder_buckets(ctx)
    landscape, _ = load_landscape(ctx.policy.resolve(risk_spec(ctx.policy).landscape))
    return attack_candidate(ctx, ctx.risk_zones, attack_params(landscape))


def zone_cells(ctx: ReleaseContext, cells: pd.Series) -> dict[str, list[str]]:

    zones = ctx.risk_zones(cells.drop_duplicates())
    out: dict[str, list[str]] = {}
    for cell, zone in zones.items():
        out.setdefault(str(zone), []).append(cell)
    return out


def frontier_row(
    climb: Climb, ladder: list[str], cells: int, margins: int, over: dict[str, float], ceiling: float
) -> FrontierRow:
    worst = max(over.items(), key=lambda item: (item[1], item[0]), default=None)
    return FrontierRow(
        configuration=climb.name(ladder),
        zones_coarsened=dict(sorted(climb.steps.items())),
        published_cells=cells,
        published_margins=margins,
        zones_over={z: round(f, 6) for z, f in sorted(over.items())},
        worst_zone_over=worst[0] if worst else None,
        ceiling=round(ceiling, 6),
        passed=not over,
    )


def _top(ladder: list[str]) -> int:
    """The last step of a zone: its cells, then its own parent areas withheld, so it shows through the totals."""
    return len(ladder) + 2


def can_climb(climb: Climb, zones: list[str], ladder: list[str]) -> bool:
    """Whether `climb_zones` would move a zone, with some zone over the gate: whether any zone can still climb."""
    return any(climb.steps.get(zone, 0) < _top(ladder) for zone in zones)


def climb_zones(climb: Climb, over: dict[str, float], zones: list[str], ladder: list[str], progress: Progress) -> bool:
    """One step up for every zone over the gate that can still climb. When none of them can (their units are
    singled out through the other zones they visit), one step up for every zone that can. False when no zone
    can climb any more."""
    top = _top(ladder)

    def up(candidates) -> bool:
        moved = False
        for zone in sorted(candidates):
            if climb.steps.get(zone, 0) < top:
                climb.steps[zone] = climb.steps.get(zone, 0) + 1
                moved = True
        return moved

    moved = up([z for z in over if z in zones]) or up(zones)
    if moved:
        # zones only: their figures are the candidate's, unpublished (the run log is operator-facing)
        progress(
            ProgressEvent("risk", f"risk: coarsening {climb.name(ladder)} (over the gate: zones {', '.join(sorted(over))})")
        )
    return moved


def public_frontier(rows: Frontier | None, ladder: list[str] | None = None) -> PublicFrontier | None:
    """What release.json may carry of the frontier: per configuration tried, how many zones were coarsened to
    which rung, whether it passed, which is this release (the last one tried). No zone is named (a zone
    coarsened holds units, and its cells may all be withheld) and no figure of a configuration not published
    (its counts and attack figures are facts about unpublished data). Under differential privacy, what follows
    from the policy alone of each configuration compared (`DpFrontierRow.public`)."""
    if not rows:
        return None
    last = len(rows) - 1
    return [
        row.public() if isinstance(row, DpFrontierRow) else _public_row(row, i == last, ladder) for i, row in enumerate(rows)
    ]


def _public_row(row: FrontierRow, published: bool, ladder: list[str] | None) -> PublicFrontierRow:
    steps = list(row.zones_coarsened.values())
    by_step = {s: steps.count(s) for s in sorted(set(steps))}
    shown = [f"{n} zone(s) at {rung_name(s, ladder)}" for s, n in by_step.items()]
    return PublicFrontierRow("; ".join(shown) or FINEST, row.passed, published)


def rung_name(step: int, ladder: list[str] | None) -> str:
    """What a zone climbed `step` steps shows: a rung of the time ladder, its parent areas, or the totals."""
    if ladder is None:
        return f"rung {step}"
    if step - 1 < len(ladder):
        return ladder[step - 1]
    return "parent areas only" if step == len(ladder) + 1 else "the totals only"
