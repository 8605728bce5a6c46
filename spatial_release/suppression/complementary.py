"""Complementary suppression on the full linear system of a release, repaired until the LP audit passes.

Stage 1 picks a first pattern, by one of two methods (`protect(method=...)`):
- "gauss": Gaussian elimination in the manner of Statistics Norway's GaussSuppression
  (`suppression.elimination`): candidates in descending cost order are published unless that would make a
  primary, or a sum of primaries below the protection level, a linear combination of published figures.
  It sees the EQ relations only; on UNION relations (visitors: max(children) <= parent <= sum(children),
  not linear identities) the constraint sweep below runs instead.
- "sweep": a constraint sweep on every relation: in every relation that holds a withheld primary, make
  sure the primary is not alone (it would be recovered by subtraction) and, when the parent is published,
  that the other withheld children carry at least max(k - v, 1) units (else the sum of the withheld cells,
  published implicitly, shows the primary to be below k). Empty children are free complements: they are
  already absent.
Stage 2, audit and repair (the guarantee, whatever stage 1 did): audit every component with the attacker
LP; for each failing primary withhold the published figure that binds the failing bound at the lowest cost
per unit of reduced cost (the greedy reading of a Fischetti-Salazar capacity cut), falling back to the
cheapest published figure nearest to the primary through the relations. Only the primaries that failed are
re-audited (withholding more never narrows an interval, so a primary that passed keeps passing). Every
round withholds at least one figure, so the loop ends; a round cap turns an unprotectable table into an
error, never a pass, and so does a round that finds nothing left to withhold for primaries failing on the
current pattern (`unprotectable`: a named refusal, a `Blocked`). A failure whose surroundings an earlier
repair of the same round withheld is no such case: its interval is stale, and the next round audits it.
Stage 3, optional pruning (`prune_tries`): publish secondaries back, costliest first, when every primary
still passes (see `prune`), then audit the final pattern afresh.

Cost of withholding a figure (`protect(cost=...)`, see `costs_for`): by default (value + 1) x a level
weight (leaves 1, each level above x4, totals 1000), so small cells are preferred over large ones and over
totals; "cells" counts figures instead; or the caller's own weights. Ties break on the unit-value cost,
then the node key, and the solver runs single-threaded, so the same input gives the same pattern
(tests/test_golden_pattern.py pins one; tests/test_elimination.py checks it across audit worker counts).

What releases should use (`RELEASE_METHOD`): measured with bench/suppression_bench.py (k = 5, 20,000
persons, a 500 m x hour table with 2 km / 8 km / total and day margins), elimination + repair withholds
81 non-empty figures where the sweep + repair withholds 135, and pruning gives back the few the repair
over-withheld in seconds; see RELEASE_METHOD for the numbers behind pruning by default.

References: the attacker problem and the capacity cuts are from Fischetti and Salazar-Gonzalez, "Solving
the cell suppression problem on tabular data with linkable information", Management Science 47(7), 2001.
The elimination is Langsrud's ("Secondary cell suppression by Gaussian elimination: an algorithm suitable
for handling issues with zeros and singletons", Journal of Official Statistics 40(4), 2024; R packages
SSBtools and GaussSuppression).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from spatial_release.errors import Blocked
from spatial_release.levels import is_total
from spatial_release.progress import Progress, silent
from spatial_release.suppression.audit import (INF, TOL, AuditResult, ComponentModel, Criterion, Interval, Point, audit,
                                              audit_component, components, table_cap)
from spatial_release.suppression.elimination import eliminate
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.table import EQ, PRIMARY, PUBLISHED, SECONDARY, UNION, Table


# The keywords releases should pass to `protect` (release_system.protect_release). `protect`'s own defaults
# stay the historical ones (sweep, no pruning) so that a caller that names nothing gets the pattern it got.
# Elimination: on the k = 5 benchmark table (bench/suppression_bench.py --persons 20000) 84 non-empty
# secondaries (5,576 units) in 2.2 s, where the sweep needs 135 (13,619 units) in 6.0 s; in release mode
# (1-D per bucket, --release-mode --persons 20000 --days 2) both give the same 128.
# Pruning on by default: it now costs seconds (witness points skip the primaries a candidate cannot
# affect; most tries are rejected by a few warm-started LPs), it never weakens the guarantee (the pruned
# pattern is audited afresh, and a failing audit is an error), and it gives back what the repair
# over-withheld: 3 of 84 at k = 5 (+4 s, median of 3 runs 5.6 s in all), 14 of 97 at k = 10 (+18 s; the
# old pass took 75-156 s), none in release mode (+0.4 s of 12 s). On the golden table
# (tests/test_golden_pattern.py) it turns presence's 111 secondaries into 103 and visitors' 105 into 0:
# the sweep's rule for UNION relations over-withholds, since max(children) <= parent <= sum(children)
# and the absent children already leave every primary there its interval (an audit with optimal bounds
# passes the empty pattern).
RELEASE_METHOD = {"method": "gauss", "prune_tries": None}


class SuppressionError(Blocked, RuntimeError):
    """The table cannot be protected (or audited); nothing may be published."""


def figure_name(table: Table, node: int) -> str:
    """A figure as a refusal names it: its level, area and bucket (never its count, which stays internal)."""
    key = table.key(node)
    return f"{key['level']} {key['area_id']} at {key['bucket_start']}"


def unprotectable(table: Table, failures: Sequence[Interval], limit: int = 5) -> str:
    """The refusal of primaries that fail the audit on the current pattern while no published figure is left
    that binds their failing bound or is linked to them: withholding more cannot widen their intervals (what
    pins them is structure an outsider knows, e.g. a public lower bound). Names the figures and the failing
    bound, never a count or a bound's value."""
    named = [f"{figure_name(table, f.node)} ({f.failing or 'both'} bound)" for f in failures[:limit]]
    more = f" and {len(failures) - limit} more" if len(failures) > limit else ""
    return (f"cannot be protected: {', '.join(named)}{more}: the audit still narrows "
            f"{'its' if len(failures) == 1 else 'their'} interval with every figure linked to "
            f"{'it' if len(failures) == 1 else 'them'} withheld, so no further suppression helps; "
            "nothing is published (a coarser cell or bucket is needed)")


@dataclass
class ProtectionLog:
    sweep_secondaries: int = 0
    repair_secondaries: int = 0
    rounds: int = 0
    pruned: int = 0
    audit: AuditResult | None = None
    method: ProtectionMethod | None = None  # what ran: `method.describe()` is the release record's sentence


UNIT_VALUE, CELLS = "unit_value", "cells"
SWEEP, GAUSS = "sweep", "gauss"


def _weights(table: Table, level_depth: dict[str, int]) -> list[float]:
    """The "unit_value" cost: (value + 1) x the level weight (leaves 1, each level above x4, totals 1000)."""
    out = []
    for i in range(len(table)):
        level = table.level[i]
        weight = 1000.0 if is_total(level) else float(4 ** level_depth.get(level, 0))
        out.append((table.value[i] + 1) * weight)
    return out


Cost = str | Callable[[Table, int], float] | Sequence[float]


def costs_for(table: Table, level_depth: dict[str, int], cost: Cost = UNIT_VALUE) -> list[float]:
    """The information lost by withholding each figure, as the caller chooses:
    - "unit_value" (default): (value + 1) x level weight, so small cells go before large ones and totals;
    - "cells": every non-empty figure costs 1, empty ones 0 (minimise the number of figures withheld);
    - a callable `cost(table, node) -> float`, or a sequence of one non-negative weight per node.
    Ties (and, under "cells", the order among equal costs) fall back to the unit-value cost, then the key."""
    if isinstance(cost, str):
        if cost == UNIT_VALUE:
            return _weights(table, level_depth)
        if cost == CELLS:
            return [1.0 if v > 0 else 0.0 for v in table.value]
        raise ValueError(f"unknown cost {cost!r}: give 'unit_value', 'cells', a callable or one weight per node")
    if callable(cost):
        out = [float(cost(table, i)) for i in range(len(table))]
    else:
        out = [float(c) for c in cost]
        if len(out) != len(table):
            raise ValueError(f"{len(out)} cost weights for {len(table)} figures")
    if any(not (c >= 0) for c in out):  # also catches NaN
        raise ValueError("costs must be non-negative numbers")
    return out


class Costs(list):
    """Per-node costs, with the unit-value cost kept alongside as the first tie-break."""

    def __init__(self, costs: Sequence[float], unit: Sequence[float]):
        super().__init__(costs)
        self.unit = list(unit)


def _sort_key(table: Table, costs: list[float], node: int) -> tuple:
    unit = getattr(costs, "unit", costs)
    return (costs[node], unit[node], table.level[node], table.area[node], str(table.bucket[node]))


def _withhold(table: Table, node: int) -> None:
    if table.status[node] != PUBLISHED:
        raise AssertionError(f"node {node} is already withheld")
    table.status[node] = SECONDARY


def _cheapest(table: Table, costs: list[float], candidates: list[int], at_least: int = 0) -> int | None:
    published = [c for c in candidates if table.status[c] == PUBLISHED]
    if not published:
        return None
    enough = [c for c in published if table.value[c] >= at_least]
    pool = enough or published
    if not enough:  # nobody carries the deficit alone: take the largest, the next round adds more
        top = max(table.value[c] for c in pool)
        pool = [c for c in pool if table.value[c] == top]
    return min(pool, key=lambda c: _sort_key(table, costs, c))


def _first_found(node: int | None, otherwise: Callable[[], int | None]) -> int | None:
    """`node` unless None (not `node or ...`: node 0 is a figure, and treating it as "none found" withheld a
    parent instead of the cheapest child whenever the child was the table's first figure)."""
    return otherwise() if node is None else node


def _sweep_relation(table: Table, costs: list[float], criterion: Criterion, relation) -> int | None:
    """One suppression that a relation needs, or None when it looks locally safe."""
    members = relation.members()
    withheld = [m for m in members if table.status[m] != PUBLISHED]
    children = list(relation.children)
    for node in withheld:
        if table.status[node] != PRIMARY:
            continue
        if len(withheld) < 2:
            return _first_found(_cheapest(table, costs, children), lambda: _cheapest(table, costs, [relation.parent]))
        if node == relation.parent:
            mass = sum(table.value[c] for c in children if table.status[c] != PUBLISHED)
            if mass < 1:
                return _cheapest(table, costs, children, at_least=1)
        elif table.status[relation.parent] == PUBLISHED:
            others = sum(table.value[c] for c in children if c != node and table.status[c] != PUBLISHED)
            need = criterion.upper(table.value[node]) - table.value[node]
            if others < need:
                return _first_found(_cheapest(table, costs, [c for c in children if c != node], at_least=need - others),
                                    lambda: _cheapest(table, costs, [relation.parent]))
    return None


def sweep(table: Table, costs: list[float], criterion: Criterion, kinds: tuple[str, ...] = (EQ, UNION)) -> int:
    """Repeat until nothing changes: in every relation of the given kinds, withhold what it needs."""
    added = 0
    changed = True
    relations = [r for r in table.relations if r.kind in kinds]
    while changed:
        changed = False
        for relation in relations:
            while (node := _sweep_relation(table, costs, criterion, relation)) is not None:
                _withhold(table, node)
                added += 1
                changed = True
    return added


def _layers(table: Table, start: int, relations_of: list[list[int]]) -> Iterator[tuple[list[int], list[int]]]:
    """Breadth-first from `start` through relations and withheld nodes: per layer, (published figures met,
    withheld figures met, which the next layer starts from)."""
    seen_nodes, seen_rel = {start}, set()
    frontier = [start]
    while frontier:
        published, withheld = [], []
        for node in frontier:
            for r in relations_of[node]:
                if r in seen_rel:
                    continue
                seen_rel.add(r)
                for member in table.relations[r].members():
                    if member in seen_nodes:
                        continue
                    seen_nodes.add(member)
                    (published if table.status[member] == PUBLISHED else withheld).append(member)
        yield published, withheld
        frontier = withheld


def _nearest_published(table: Table, costs: list[float], start: int, relations_of: list[list[int]]) -> int | None:
    """Breadth-first from a primary through relations and withheld nodes: the cheapest published figure in
    the first layer that has one."""
    for layer, _ in _layers(table, start, relations_of):
        if layer:
            return min(layer, key=lambda c: _sort_key(table, costs, c))
    return None


def _repair_choice(table: Table, costs: list[float], failure: Interval, relations_of: list[list[int]]) -> int | None:
    binding = [(node, rc) for node, rc in failure.binding if table.status[node] == PUBLISHED]
    if binding:
        return min(binding, key=lambda item: (costs[item[0]] / item[1], _sort_key(table, costs, item[0])))[0]
    return _nearest_published(table, costs, failure.node, relations_of)


QUICK_CHECKS = 6  # primaries nearest to a pruning candidate that are checked first, one LP per bound


def _primaries_nearest(table: Table, start: int, relations_of: list[list[int]], limit: int) -> list[int]:
    """Up to `limit` primaries, breadth-first from `start` through relations and withheld figures."""
    found: list[int] = []
    for _, withheld in _layers(table, start, relations_of):
        found += [m for m in withheld if table.status[m] == PRIMARY]
        if len(found) >= limit:
            break
    return found[:limit]


def _quick_failure(model: ComponentModel, primaries: list[int], criterion: Criterion) -> bool:
    """True if one of `primaries` fails on its LP bounds (the integer bounds are at least as narrow)."""
    table = model.table
    for p in primaries:
        if p not in model.column:
            continue
        v = table.value[p]
        for maximise in (True, False):
            status, value, _, _ = model.bound(p, maximise)
            if status == "unbounded":
                continue
            if status != "optimal":
                return True  # let the try fail; the pattern keeps the secondary
            if (maximise and math.floor(value + TOL) < criterion.upper(v)) or \
                    (not maximise and math.ceil(value - TOL) > criterion.lower(v)):
                return True
    return False


def prune(table: Table, k: int, costs: list[float], relations_of: list[list[int]], options: dict | None,
          max_tries: int | None, criterion: Criterion | None = None,
          witnesses: dict[int, tuple[Point | None, Point | None]] | None = None,
          reasons: dict[int, list[int]] | None = None, intervals: dict[int, Interval] | None = None,
          cap: float | None = None) -> int:
    """Give back secondaries that turned out unnecessary: try publishing the costliest ones again, one at a
    time, and keep each only if every primary still passes. Returns how many were given back.

    Cheap because of the audit's witness points: a witness of a primary's bound is an integral point of the
    attacker's feasible set (as {node: value} where it leaves the true table). Publishing figure c only adds
    y_c = value_c, so every witness that leaves c at its value stays feasible and keeps its bound: only the
    primaries whose witness points move c can fail, and only they are audited again (often none: then c is
    published with no LP at all). The LPs run on one HiGHS model per component of the pattern at the start
    of the pass (publishing only splits components), where publishing c fixes c's column, so each try is
    warm-started. Most tries fail, so each is first tried on a few primaries only, one LP per bound, and
    stops at the first that fails (an LP bound that fails means the integer bound fails too): the
    primaries the secondary was withheld for (`reasons`, from the elimination and the repair), then the
    primaries nearest to it through the relations. Only a try that survives gets the full audit of every
    affected primary. `witnesses`: the audit's points for the current pattern (None: audit first).
    `max_tries` bounds the candidates visited (None: every non-empty secondary), costliest first.

    `intervals` (primary -> Interval of the current pattern, with `witnesses`) are kept up to date: a try that
    is kept replaces the interval and witness points of every primary it audited; every other primary keeps a
    witness point that leaves the published figure at its value, so its interval still holds (its bounds are
    attained by a point of the smaller feasible set, and an optimal bound stays optimal there). They are then
    the audit of the pruned pattern, and `witnesses` its certificate's points. `cap`: as `audit`'s."""
    criterion = criterion or Criterion(k)
    if witnesses is None:
        first = audit(table, k, options, criterion=criterion, workers=1)
        if first.errors or first.failures():
            raise SuppressionError(f"prune needs a passing pattern: {first.summary()}")
        witnesses = first.witnesses
    # Witness points are shared (one dict per bulk LP), so the index is by point: node -> ids of the points
    # that move it, point id -> the primaries whose bounds rest on it.
    moved_by: dict[int, set[int]] = {}
    resting: dict[int, set[int]] = {}
    points: dict[int, Point] = {}
    unknown: set[int] = set()  # primaries without a witness point for some bound: audited on every try

    def index(primary: int, pair: tuple[Point | None, Point | None]) -> None:
        for point in pair:
            if point is None:
                unknown.add(primary)
                continue
            pid = id(point)
            if pid not in points:
                points[pid] = point
                for node in point:
                    moved_by.setdefault(node, set()).add(pid)
            resting.setdefault(pid, set()).add(primary)

    def unindex(primary: int) -> None:
        unknown.discard(primary)
        for point in current.get(primary, (None, None)):
            if point is not None:
                resting.get(id(point), set()).discard(primary)

    def affected_by(node: int) -> set[int]:
        return {p for pid in moved_by.get(node, ()) for p in resting.get(pid, ())} | unknown

    current = {p: witnesses.get(p, (None, None)) for p in table.primaries()}
    for p, pair in current.items():
        index(p, pair)
    comp_of: dict[int, int] = {}
    comps = components(table, relations_of)
    for c, nodes in enumerate(comps):
        for node in nodes:
            comp_of[node] = c
    models: dict[int, ComponentModel] = {}
    cap = table_cap(table, criterion) if cap is None else cap
    candidates = sorted((n for n in table.secondaries() if table.value[n] > 0),
                        key=lambda n: _sort_key(table, costs, n), reverse=True)
    if max_tries is not None:
        candidates = candidates[:max_tries]
    released = 0
    for node in candidates:
        comp = comp_of[node]
        affected = sorted(p for p in affected_by(node) if comp_of.get(p) == comp)
        if not affected:
            table.status[node] = PUBLISHED
            released += 1
            if comp in models:  # keep the component's model in step with the pattern
                models[comp].highs.changeColBounds(models[comp].column[node], table.value[node], table.value[node])
            continue
        if comp not in models:
            # built before the try publishes `node`: the model's witness points must report `node`'s value
            # once the try is undone (a model built mid-try counted it as published and left it out of every
            # later point, which then broke its relation)
            models[comp] = ComponentModel(table, comps[comp], relations_of, {"presolve": "off", **(options or {})})
        table.status[node] = PUBLISHED
        model = models[comp]
        col = model.column[node]
        model.highs.changeColBounds(col, table.value[node], table.value[node])
        suspects = [p for p in (reasons or {}).get(node, []) if table.status[p] == PRIMARY]
        suspects += [p for p in _primaries_nearest(table, node, relations_of, QUICK_CHECKS) if p not in suspects]
        if _quick_failure(model, suspects, criterion):
            failed = True
        else:
            result = AuditResult(k=k, criterion=criterion)
            audit_component(model, affected, criterion, result, cap=cap)
            failed = bool(result.errors or result.failures() or len(result.intervals) != len(affected))
        if failed:
            table.status[node] = SECONDARY
            [floor] = model.floors([node])
            model.highs.changeColBounds(col, floor, INF)
            continue
        released += 1
        for p in affected:
            unindex(p)
            current[p] = result.witnesses.get(p, (None, None))
            index(p, current[p])
        if intervals is not None:
            intervals.update({i.node: i for i in result.intervals})
    witnesses.update(current)
    return released


def protect(table: Table, k: int, level_depth: dict[str, int], max_rounds: int = 200,
            options: dict | None = None, prune_tries: int | None = 0,
            criterion: Criterion | None = None, progress: Progress = silent, *,
            method: str = SWEEP, cost: Cost = UNIT_VALUE, workers: int | None = None,
            cap: float | None = None) -> ProtectionLog:
    """Withhold secondaries in `table` (statuses change in place) until the audit passes.

    `table` holds every figure with its status (primaries already marked), `k` the threshold, `level_depth`
    each level's depth in its chain (for the cost weights), `criterion` the protection levels (default
    `Criterion(k)`), `options` HiGHS options for the audits, `max_rounds` the repair cap (reaching it is a
    `SuppressionError`, never a pass), `prune_tries` how many costly secondaries the pruning pass tries to
    give back (0: no pruning; None: every non-empty secondary). `method` is stage 1: "sweep" (the
    constraint sweep on every relation) or "gauss" (Gaussian elimination on the EQ relations,
    `suppression.elimination`, then the sweep on the UNION relations only, which are not linear
    identities). `cost` is what a withheld figure costs (see `costs_for`). Stage 2, audit and repair, is
    the same for both and keeps the guarantee. The defaults are the historical behaviour; releases should
    pass `**RELEASE_METHOD` (elimination and pruning; the measurements are next to it). `workers`: processes
    for the audit and, on a table of several independent blocks, for whole blocks (`suppression.blocks`; the
    pattern is the same whatever the number); default `audit.default_workers()`. `cap`: the bulk witness
    LPs' cap (see `audit`; a block is given its whole table's). Returns the `ProtectionLog` with the audit of
    the final pattern."""
    from spatial_release.suppression import blocks  # it runs `protect_whole` on each block

    kwargs = dict(max_rounds=max_rounds, options=options, prune_tries=prune_tries, criterion=criterion,
                  progress=progress, method=method, cost=cost, workers=workers, cap=cap)
    if blocks.worth_splitting(table, prune_tries):
        return blocks.protect_blocks(table, k, level_depth, **kwargs)
    return protect_whole(table, k, level_depth, **kwargs)


def protect_whole(table: Table, k: int, level_depth: dict[str, int], max_rounds: int = 200,
                  options: dict | None = None, prune_tries: int | None = 0,
                  criterion: Criterion | None = None, progress: Progress = silent, *,
                  method: str = SWEEP, cost: Cost = UNIT_VALUE, workers: int | None = None,
                  cap: float | None = None) -> ProtectionLog:
    """`protect` on the whole table at once (no split into blocks): the algorithm itself."""
    criterion = criterion or Criterion(k)
    costs = Costs(costs_for(table, level_depth, cost), _weights(table, level_depth))
    log = ProtectionLog(method=ProtectionMethod(stage1=method, prune_tries=prune_tries, cost=cost,
                                                max_rounds=max_rounds, workers=workers, cap=cap))
    reasons: dict[int, list[int]] = {}  # secondary -> the primaries it was withheld for (pruning checks them first)
    if method == GAUSS:
        log.sweep_secondaries = eliminate(table, k, costs, lambda n: (-costs.unit[n], *_sort_key(table, costs, n)[2:]),
                                          reasons, criterion.upper)
        log.sweep_secondaries += sweep(table, costs, criterion, kinds=(UNION,))
        progress("suppression: Gaussian elimination done")
    elif method == SWEEP:
        log.sweep_secondaries = sweep(table, costs, criterion)
        progress("suppression: constraint sweep done")  # counts of withheld figures stay internal (issue 9)
    else:
        raise ValueError(f"unknown method {method!r}: give 'sweep' or 'gauss'")
    relations_of = table.relations_of()
    intervals: dict[int, Interval] = {}
    totals = AuditResult(k=k, criterion=criterion)
    to_audit: set[int] | None = None  # None: every primary
    while True:
        result = audit(table, k, options, primaries=to_audit, criterion=criterion, progress=progress,
                       workers=workers, cap=cap)
        if result.errors:
            raise SuppressionError("; ".join(result.errors[:5]))
        for name in ("lps_solved", "bulk_lps", "mips_solved", "witness_lps", "seconds"):
            setattr(totals, name, getattr(totals, name) + getattr(result, name))
        totals.components = max(totals.components, result.components)
        totals.workers = result.workers
        intervals.update({i.node: i for i in result.intervals})
        # A witness point of an earlier round stays a feasible point of the final pattern once the figures
        # withheld since then take their values (the point's {node: value} leaves them at it).
        totals.witnesses.update(result.witnesses)
        failures = sorted((i for i in intervals.values() if not i.passed), key=lambda i: i.node)
        if not failures:
            break
        if log.rounds >= max_rounds:
            keys = ", ".join(figure_name(table, f.node) for f in failures[:5])
            raise SuppressionError(f"{len(failures)} primaries still unprotected after {max_rounds} rounds: {keys}")
        log.rounds += 1
        progress(f"suppression: repair round {log.rounds}")
        to_audit = {f.node for f in failures}
        # Each failure's interval is that of the pattern at the start of the round, and the repairs of the
        # failures before it in this round may have withheld every published figure around it (a sparse
        # bucket: the cells, their parents and the bucket total all withheld): finding nothing left to
        # withhold is then no verdict, the next round's audit says whether it is protected now. Only a round
        # that can withhold nothing at all, for failures audited on the current pattern, is a refusal.
        withheld_now = 0
        for failure in failures:
            if table.status[failure.node] == PUBLISHED:
                continue
            choice = _repair_choice(table, costs, failure, relations_of)
            if choice is not None and table.status[choice] == PUBLISHED:
                reasons[choice] = [failure.node]
                _withhold(table, choice)
                log.repair_secondaries += 1
                withheld_now += 1
        if not withheld_now:
            raise SuppressionError(unprotectable(table, failures))
    # Every primary passed in the round that last audited it, and later rounds only withheld more, which
    # never narrows an interval: the merged intervals are the final pattern's audit. (The blocking check
    # audits the published files again, independently.)
    totals.intervals = [intervals[n] for n in sorted(intervals)]
    log.audit = totals
    if prune_tries is None or prune_tries > 0:
        log.pruned = prune(table, k, costs, relations_of, options, prune_tries, criterion, totals.witnesses,
                           reasons, intervals, cap)
        # The audit of record is the pruned pattern's: the intervals and witness points `prune` kept up to date
        # (re-solving the whole table again took 72 s of a 10 M-ping release). The blocking check verifies
        # every witness point against the published files (`suppression.certificate`) and re-solves any
        # component it cannot certify, so a wrong point can cost time, never a pass.
        totals.intervals = [intervals[n] for n in sorted(intervals) if table.status[n] == PRIMARY]
        if not totals.passed:
            raise SuppressionError(f"audit failed after pruning: {totals.summary()}")
    return log
