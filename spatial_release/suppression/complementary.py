"""Complementary suppression on the full linear system of a release, repaired until the LP audit passes:
`protect_whole`, the algorithm on one table (`protection.protect` chooses between it and protecting
independent blocks apart, `suppression.blocks`). How the pattern is chosen is one `ProtectionMethod`.

Stage 1 picks a first pattern, by one of two methods (`ProtectionMethod.stage1`):
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
Stage 3, optional pruning (`ProtectionMethod.prune_tries`): publish secondaries back, costliest first, when
every primary still passes (see `prune`), then take the audit of the final pattern from what pruning kept.

What a withheld figure costs is `costs.Costs`. Ties break on the unit-value cost, then the node key, and the
solver runs single-threaded, so the same input gives the same pattern (tests/test_golden_pattern.py pins one;
tests/test_elimination.py checks it across audit worker counts). On the golden table pruning turns
presence's 111 secondaries into 103 and visitors' 105 into 0: the sweep's rule for UNION relations
over-withholds, since max(children) <= parent <= sum(children) and the absent children already leave every
primary there its interval (an audit with optimal bounds passes the empty pattern).

References: the attacker problem and the capacity cuts are from Fischetti and Salazar-Gonzalez, "Solving
the cell suppression problem on tabular data with linkable information", Management Science 47(7), 2001.
The elimination is Langsrud's ("Secondary cell suppression by Gaussian elimination: an algorithm suitable
for handling issues with zeros and singletons", Journal of Official Statistics 40(4), 2024; R packages
SSBtools and GaussSuppression).
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from spatial_release.errors import Blocked
from spatial_release.progress import Progress, ProgressEvent, silent
from spatial_release.suppression.audit import (
    INF,
    TOL,
    AuditResult,
    ComponentModel,
    Criterion,
    Interval,
    Point,
    audit,
    audit_component,
    components,
    table_cap,
)
from spatial_release.suppression.costs import Costs
from spatial_release.suppression.elimination import eliminate
from spatial_release.suppression.method import GAUSS, ProtectionMethod
from spatial_release.suppression.table import EQ, PRIMARY, PUBLISHED, SECONDARY, UNION, Table

WitnessPair = tuple[Point | None, Point | None]  # a primary's (lo point, up point), see `audit`


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
    return (
        f"cannot be protected: {', '.join(named)}{more}: the audit still narrows "
        f"{'its' if len(failures) == 1 else 'their'} interval with every figure linked to "
        f"{'it' if len(failures) == 1 else 'them'} withheld, so no further suppression helps; "
        "nothing is published (a coarser cell or bucket is needed)"
    )


@dataclass
class ProtectionLog:
    sweep_secondaries: int = 0
    repair_secondaries: int = 0
    rounds: int = 0
    pruned: int = 0
    audit: AuditResult | None = None
    method: ProtectionMethod | None = None  # what ran: `method.describe()` is the release record's sentence


def _withhold(table: Table, node: int) -> None:
    if table.status[node] != PUBLISHED:
        raise AssertionError(f"node {node} is already withheld")
    table.status[node] = SECONDARY


def _cheapest(table: Table, costs: Costs, candidates: list[int], at_least: int = 0) -> int | None:
    published = [c for c in candidates if table.status[c] == PUBLISHED]
    if not published:
        return None
    enough = [c for c in published if table.value[c] >= at_least]
    pool = enough or published
    if not enough:  # nobody carries the deficit alone: take the largest, the next round adds more
        top = max(table.value[c] for c in pool)
        pool = [c for c in pool if table.value[c] == top]
    return costs.cheapest(pool)


def _first_found(node: int | None, otherwise: Callable[[], int | None]) -> int | None:
    """`node` unless None (not `node or ...`: node 0 is a figure, and treating it as "none found" withheld a
    parent instead of the cheapest child whenever the child was the table's first figure)."""
    return otherwise() if node is None else node


def _sweep_relation(table: Table, costs: Costs, criterion: Criterion, relation) -> int | None:
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
                return _first_found(
                    _cheapest(table, costs, [c for c in children if c != node], at_least=need - others),
                    lambda: _cheapest(table, costs, [relation.parent]),
                )
    return None


def sweep(table: Table, costs: Costs, criterion: Criterion, kinds: tuple[str, ...] = (EQ, UNION)) -> int:
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
        published: list[int] = []
        withheld: list[int] = []
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


def _nearest_published(table: Table, costs: Costs, start: int, relations_of: list[list[int]]) -> int | None:
    """Breadth-first from a primary through relations and withheld nodes: the cheapest published figure in
    the first layer that has one."""
    for layer, _ in _layers(table, start, relations_of):
        if layer:
            return costs.cheapest(layer)
    return None


def _repair_choice(table: Table, costs: Costs, failure: Interval, relations_of: list[list[int]]) -> int | None:
    binding = [(node, rc) for node, rc in failure.binding if table.status[node] == PUBLISHED]
    if binding:
        return min(binding, key=lambda item: (costs[item[0]] / item[1], costs.key(item[0])))[0]
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
            if maximise and not criterion.reaches_upper(v, math.floor(value + TOL)):
                return True
            if not maximise and not criterion.reaches_lower(v, math.ceil(value - TOL)):
                return True
    return False


class WitnessIndex:
    """Which primaries a pruning try can spoil, from the audit's witness points.

    A witness of a primary's bound is an integral point of the attacker's feasible set (as {node: value}
    where it leaves the true table). Publishing figure c only adds y_c = value_c, so every witness that
    leaves c at its value stays feasible and keeps its bound: only the primaries whose witness points move c
    can fail. Points are shared (one dict per bulk LP), so the index is by point: node -> ids of the points
    that move it, point id -> the primaries whose bounds rest on it. A primary without a point for some
    bound may fail on any try."""

    def __init__(self, witnesses: Mapping[int, WitnessPair], primaries: Iterable[int]):
        self.current: dict[int, WitnessPair] = {}  # primary -> its points for the current pattern
        self._moved_by: dict[int, set[int]] = {}
        self._resting: dict[int, set[int]] = {}
        self._points: dict[int, Point] = {}  # holds every indexed point, so that no id is reused
        self._unknown: set[int] = set()
        for p in primaries:
            self.set(p, witnesses.get(p, (None, None)))

    def set(self, primary: int, pair: WitnessPair) -> None:
        """`primary`'s points are now `pair` (a kept try audited it again)."""
        self._unknown.discard(primary)
        for point in self.current.get(primary, (None, None)):
            if point is not None:
                self._resting.get(id(point), set()).discard(primary)
        self.current[primary] = pair
        for point in pair:
            if point is None:
                self._unknown.add(primary)
                continue
            pid = id(point)
            if pid not in self._points:
                self._points[pid] = point
                for node in point:
                    self._moved_by.setdefault(node, set()).add(pid)
            self._resting.setdefault(pid, set()).add(primary)

    def affected_by(self, node: int) -> builtins.set[int]:  # `set` is the method above
        """The primaries whose bounds publishing `node` may narrow."""
        return {p for pid in self._moved_by.get(node, ()) for p in self._resting.get(pid, ())} | self._unknown


@dataclass
class PruneResult:
    released: int = 0  # secondaries given back
    intervals: dict[int, Interval] = field(default_factory=dict)  # the primaries audited again by kept tries
    witnesses: dict[int, WitnessPair] = field(default_factory=dict)  # every primary's points after pruning


class _Pruning:
    """The pruning pass over one pattern (see `prune`): the witness index, and one HiGHS model per component
    of the pattern at the start of the pass (publishing only splits components), built on first use, where
    publishing a figure fixes its column, so each try is warm-started."""

    def __init__(
        self,
        table: Table,
        costs: Costs,
        criterion: Criterion,
        witnesses: Mapping[int, WitnessPair],
        relations_of: list[list[int]],
        reasons: Mapping[int, list[int]],
        options: Mapping,
        cap: float,
    ):
        self.table, self.costs, self.criterion, self.cap = table, costs, criterion, cap
        self.relations_of, self.reasons = relations_of, reasons
        self.options = {"presolve": "off", **options}
        self.index = WitnessIndex(witnesses, table.primaries())
        self.comps = components(table, relations_of)
        self.comp_of = {node: c for c, nodes in enumerate(self.comps) for node in nodes}
        self.models: dict[int, ComponentModel] = {}

    def run(self, candidates: Sequence[int]) -> PruneResult:
        out = PruneResult()
        for node in candidates:
            comp = self.comp_of[node]
            affected = sorted(p for p in self.index.affected_by(node) if self.comp_of.get(p) == comp)
            if not affected:  # every witness point leaves it at its value: published with no LP at all
                self._publish(node, comp)
                out.released += 1
                continue
            result = self._try(node, comp, affected)
            if result is None:
                continue
            out.released += 1
            for p in affected:
                self.index.set(p, result.witnesses.get(p, (None, None)))
            out.intervals.update({i.node: i for i in result.intervals})
        out.witnesses = self.index.current
        return out

    def _publish(self, node: int, comp: int) -> None:
        self.table.status[node] = PUBLISHED
        model = self.models.get(comp)
        if model is not None:  # keep the component's model in step with the pattern
            model.highs.changeColBounds(model.column[node], self.table.value[node], self.table.value[node])

    def _try(self, node: int, comp: int, affected: list[int]) -> AuditResult | None:
        """Publish `node` and audit `affected`: their audit if every one still passes, else None (and `node`
        withheld again). Most tries fail, so the few primaries `node` most likely spoils go first, one LP per
        bound, stopping at the first that fails (an LP bound that fails means the integer bound fails too)."""
        table = self.table
        if comp not in self.models:
            # built before the try publishes `node`: the model's witness points must report `node`'s value
            # once the try is undone (a model built mid-try counted it as published and left it out of every
            # later point, which then broke its relation)
            self.models[comp] = ComponentModel(table, self.comps[comp], self.relations_of, self.options)
        model = self.models[comp]
        self._publish(node, comp)
        result: AuditResult | None = None
        if not _quick_failure(model, self._suspects(node), self.criterion):
            result = AuditResult(k=self.criterion.k, criterion=self.criterion)
            audit_component(model, affected, self.criterion, result, cap=self.cap)
            if result.errors or result.failures() or len(result.intervals) != len(affected):
                result = None
        if result is None:
            table.status[node] = SECONDARY
            [floor] = model.floors([node])
            model.highs.changeColBounds(model.column[node], floor, INF)
        return result

    def _suspects(self, node: int) -> list[int]:
        """The primaries `node` was withheld for (from the elimination and the repair), then the primaries
        nearest to it through the relations."""
        table = self.table
        suspects = [p for p in self.reasons.get(node, []) if table.status[p] == PRIMARY]
        return suspects + [p for p in _primaries_nearest(table, node, self.relations_of, QUICK_CHECKS) if p not in suspects]


def prune(
    table: Table,
    costs: Costs,
    criterion: Criterion,
    witnesses: Mapping[int, WitnessPair],
    *,
    method: ProtectionMethod = ProtectionMethod(),
    reasons: Mapping[int, list[int]] | None = None,
    options: Mapping | None = None,
    relations_of: list[list[int]] | None = None,
) -> PruneResult:
    """Give back secondaries that turned out unnecessary: try publishing the costliest ones again, one at a
    time (at most `method.prune_tries`; None: every non-empty secondary), and keep each only if every
    primary still passes. `witnesses`: the audit's points for the current pattern, which must pass.

    Cheap because of the witness points (`WitnessIndex`): only the primaries whose points move a candidate
    are audited again, often none, and only a try that survives the quick checks (`_Pruning._try`) gets the
    full audit of every affected primary.

    The result's intervals and witnesses keep the audit up to date: a kept try replaces the interval and
    points of every primary it audited; every other primary keeps a witness point that leaves the published
    figure at its value, so its interval still holds (its bounds are attained by a point of the smaller
    feasible set, and an optimal bound stays optimal there). With the intervals of the pattern before
    pruning, they are the audit of the pruned pattern, and its certificate's points."""
    relations_of = table.relations_of() if relations_of is None else relations_of
    cap = table_cap(table, criterion) if method.cap is None else method.cap
    pruning = _Pruning(table, costs, criterion, witnesses, relations_of, reasons or {}, options or {}, cap)
    candidates = sorted((n for n in table.secondaries() if table.value[n] > 0), key=costs.key, reverse=True)
    if method.prune_tries is not None:
        candidates = candidates[: method.prune_tries]
    return pruning.run(candidates)


def _first_pattern(
    table: Table, k: int, costs: Costs, criterion: Criterion, stage1: str, reasons: dict[int, list[int]], progress: Progress
) -> int:
    """Stage 1: withhold a first pattern by elimination or by the sweep; returns how many were withheld."""
    if stage1 == GAUSS:
        withheld = eliminate(table, k, costs.cost, lambda n: (-costs.unit[n], *costs.key(n)[2:]), reasons, criterion.upper)
        withheld += sweep(table, costs, criterion, kinds=(UNION,))
        progress(ProgressEvent("suppression", "suppression: Gaussian elimination done"))
        return withheld
    withheld = sweep(table, costs, criterion)
    progress(ProgressEvent("suppression", "suppression: constraint sweep done"))  # counts of withheld figures stay internal
    return withheld


def _add_round(totals: AuditResult, result: AuditResult, intervals: dict[int, Interval]) -> None:
    """One round's audit into the running totals."""
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


def _repair(
    table: Table, costs: Costs, failures: list[Interval], relations_of: list[list[int]], reasons: dict[int, list[int]]
) -> int:
    """One repair round: for each failure, withhold the published figure its failing bound rests on (or the
    nearest one). Returns how many were withheld; none is a refusal (`unprotectable`).

    Each failure's interval is that of the pattern at the start of the round, and the repairs of the
    failures before it in this round may have withheld every published figure around it (a sparse bucket:
    the cells, their parents and the bucket total all withheld): finding nothing left to withhold is then
    no verdict, the next round's audit says whether it is protected now. Only a round that can withhold
    nothing at all, for failures audited on the current pattern, is a refusal."""
    withheld = 0
    for failure in failures:
        if table.status[failure.node] == PUBLISHED:
            continue
        choice = _repair_choice(table, costs, failure, relations_of)
        if choice is not None and table.status[choice] == PUBLISHED:
            reasons[choice] = [failure.node]
            _withhold(table, choice)
            withheld += 1
    if not withheld:
        raise SuppressionError(unprotectable(table, failures))
    return withheld


def _audit_and_repair(
    table: Table,
    k: int,
    costs: Costs,
    criterion: Criterion,
    method: ProtectionMethod,
    options: Mapping | None,
    relations_of: list[list[int]],
    reasons: dict[int, list[int]],
    log: ProtectionLog,
    progress: Progress,
) -> dict[int, Interval]:
    """Stage 2: audit, repair the failures, audit them again, until every primary passes. Sets `log.audit`
    (the audit of the final pattern) and returns its intervals by primary."""
    intervals: dict[int, Interval] = {}
    totals = AuditResult(k=k, criterion=criterion)
    to_audit: set[int] | None = None  # None: every primary
    while True:
        result = audit(
            table,
            k,
            dict(options or {}),
            primaries=to_audit,
            criterion=criterion,
            progress=progress,
            workers=method.workers,
            cap=method.cap,
        )
        _add_round(totals, result, intervals)
        failures = sorted((i for i in intervals.values() if not i.passed), key=lambda i: i.node)
        if not failures:
            break
        if log.rounds >= method.max_rounds:
            keys = ", ".join(figure_name(table, f.node) for f in failures[:5])
            raise SuppressionError(f"{len(failures)} primaries still unprotected after {method.max_rounds} rounds: {keys}")
        log.rounds += 1
        progress(ProgressEvent("suppression", f"suppression: repair round {log.rounds}"))
        to_audit = {f.node for f in failures}
        log.repair_secondaries += _repair(table, costs, failures, relations_of, reasons)
    # Every primary passed in the round that last audited it, and later rounds only withheld more, which
    # never narrows an interval: the merged intervals are the final pattern's audit. (The blocking check
    # audits the published files again, independently.)
    totals.intervals = [intervals[n] for n in sorted(intervals)]
    log.audit = totals
    return intervals


def protect_whole(
    table: Table,
    k: int,
    level_depth: dict[str, int],
    method: ProtectionMethod = ProtectionMethod(),
    *,
    criterion: Criterion | None = None,
    options: Mapping | None = None,
    progress: Progress = silent,
) -> ProtectionLog:
    """`protection.protect` on the whole table at once (no split into blocks): the algorithm itself."""
    criterion = criterion or Criterion(k)
    costs = Costs.of(table, level_depth, method.cost)
    log = ProtectionLog(method=method)
    reasons: dict[int, list[int]] = {}  # secondary -> the primaries it was withheld for (pruning checks them first)
    log.sweep_secondaries = _first_pattern(table, k, costs, criterion, method.stage1, reasons, progress)
    relations_of = table.relations_of()
    intervals = _audit_and_repair(table, k, costs, criterion, method, options, relations_of, reasons, log, progress)
    if method.prunes:
        totals = log.audit
        if totals is None:  # _audit_and_repair sets it
            raise RuntimeError("the protection log does not record the audit before pruning")
        pruned = prune(
            table,
            costs,
            criterion,
            totals.witnesses,
            method=method,
            reasons=reasons,
            options=options,
            relations_of=relations_of,
        )
        log.pruned = pruned.released
        # The audit of record is the pruned pattern's: the intervals and witness points pruning kept up to
        # date, rather than solving the whole table again. The blocking check verifies every witness point
        # against the published files (`suppression.certificate`) and re-solves any component it cannot
        # certify, so a wrong point can cost time, never a pass.
        intervals.update(pruned.intervals)
        totals.witnesses.update(pruned.witnesses)
        totals.intervals = [intervals[n] for n in sorted(intervals) if table.status[n] == PRIMARY]
        if not totals.passed:
            raise SuppressionError(f"audit failed after pruning: {totals.summary()}")
    return log


__all__ = [
    "ProtectionLog",
    "PruneResult",
    "SuppressionError",
    "WitnessIndex",
    "figure_name",
    "protect_whole",
    "prune",
    "sweep",
    "unprotectable",
]
