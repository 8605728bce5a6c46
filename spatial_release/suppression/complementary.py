"""Complementary suppression on the full linear system of a release, repaired until the LP audit passes.

Stage 1, a constraint sweep: in every relation that holds a withheld primary, make sure the primary is not
alone (it would be recovered by subtraction) and, when the parent is published, that the other withheld
children carry at least max(k - v, 1) units (else the sum of the withheld cells, published implicitly,
shows the primary to be below k). Empty children are free complements: they are already absent.
Stage 2, audit and repair: audit every component with the attacker LP; for each failing primary withhold
the published figure that binds the failing bound at the lowest cost per unit of reduced cost (the greedy
reading of a Fischetti-Salazar capacity cut), falling back to the cheapest published figure nearest to the
primary through the relations. Only the primaries that failed are re-audited (withholding more never
narrows an interval, so a primary that passed keeps passing). Every round withholds at
least one figure, so the loop ends; a round cap turns an unprotectable table into an error, never a pass.

Cost of withholding a figure: (value + 1) x a level weight (leaves 1, each level above x4, totals 1000),
so small cells are preferred over large ones and over totals. Ties break on the node key, and the solver
runs single-threaded, so the same input gives the same pattern (tests/test_golden_pattern.py pins one).

References: the attacker problem and the capacity cuts are from Fischetti and Salazar-Gonzalez, "Solving
the cell suppression problem on tabular data with linkable information", Management Science 47(7), 2001.
Statistics Norway's GaussSuppression (Langsrud; R packages SSBtools and GaussSuppression) chooses
secondaries by Gaussian elimination over the table's model matrix instead (a primary is safe from exact
disclosure when it is no linear combination of published figures; its optional `ComputeIntervals` gives
LP intervals like `audit.py`). Elimination is not used here: the sweep and the LP repair are.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from spatial_release.errors import Blocked
from spatial_release.levels import is_total
from spatial_release.progress import Progress, silent
from spatial_release.suppression.audit import AuditResult, Criterion, Interval, audit, components
from spatial_release.suppression.table import PRIMARY, PUBLISHED, SECONDARY, Table


class SuppressionError(Blocked, RuntimeError):
    """The table cannot be protected (or audited); nothing may be published."""


@dataclass
class ProtectionLog:
    sweep_secondaries: int = 0
    repair_secondaries: int = 0
    rounds: int = 0
    pruned: int = 0
    audit: AuditResult | None = None


def _weights(table: Table, level_depth: dict[str, int]) -> list[float]:
    out = []
    for i in range(len(table)):
        level = table.level[i]
        weight = 1000.0 if is_total(level) else float(4 ** level_depth.get(level, 0))
        out.append((table.value[i] + 1) * weight)
    return out


def _sort_key(table: Table, costs: list[float], node: int) -> tuple:
    return (costs[node], table.level[node], table.area[node], str(table.bucket[node]))


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


def _sweep_relation(table: Table, costs: list[float], criterion: Criterion, relation) -> int | None:
    """One suppression that a relation needs, or None when it looks locally safe."""
    members = relation.members()
    withheld = [m for m in members if table.status[m] != PUBLISHED]
    children = list(relation.children)
    for node in withheld:
        if table.status[node] != PRIMARY:
            continue
        if len(withheld) < 2:
            return _cheapest(table, costs, children) or _cheapest(table, costs, [relation.parent])
        if node == relation.parent:
            mass = sum(table.value[c] for c in children if table.status[c] != PUBLISHED)
            if mass < 1:
                return _cheapest(table, costs, children, at_least=1)
        elif table.status[relation.parent] == PUBLISHED:
            others = sum(table.value[c] for c in children if c != node and table.status[c] != PUBLISHED)
            need = criterion.upper(table.value[node]) - table.value[node]
            if others < need:
                return _cheapest(table, costs, [c for c in children if c != node], at_least=need - others) \
                    or _cheapest(table, costs, [relation.parent])
    return None


def sweep(table: Table, costs: list[float], criterion: Criterion) -> int:
    added = 0
    changed = True
    while changed:
        changed = False
        for relation in table.relations:
            while (node := _sweep_relation(table, costs, criterion, relation)) is not None:
                _withhold(table, node)
                added += 1
                changed = True
    return added


def _nearest_published(table: Table, costs: list[float], start: int, relations_of: list[list[int]]) -> int | None:
    """Breadth-first from a primary through relations and withheld nodes: the cheapest published figure in
    the first layer that has one."""
    seen_nodes, seen_rel = {start}, set()
    frontier = deque([start])
    while frontier:
        layer, next_frontier = [], deque()
        for node in frontier:
            for r in relations_of[node]:
                if r in seen_rel:
                    continue
                seen_rel.add(r)
                for member in table.relations[r].members():
                    if member in seen_nodes:
                        continue
                    seen_nodes.add(member)
                    if table.status[member] == PUBLISHED:
                        layer.append(member)
                    else:
                        next_frontier.append(member)
        if layer:
            return min(layer, key=lambda c: _sort_key(table, costs, c))
        frontier = next_frontier
    return None


def _repair_choice(table: Table, costs: list[float], failure: Interval, relations_of: list[list[int]]) -> int | None:
    binding = [(node, rc) for node, rc in failure.binding if table.status[node] == PUBLISHED]
    if binding:
        return min(binding, key=lambda item: (costs[item[0]] / item[1], _sort_key(table, costs, item[0])))[0]
    return _nearest_published(table, costs, failure.node, relations_of)


def _primaries_near(table: Table, node: int, relations_of: list[list[int]]) -> set[int]:
    """Primaries in the components of the withheld figures that share a relation with `node`."""
    seeds = {m for r in relations_of[node] for m in table.relations[r].members() if table.status[m] != PUBLISHED}
    found: set[int] = set()
    for component in components(table):
        if seeds & set(component):
            found.update(n for n in component if table.status[n] == PRIMARY)
    return found


def prune(table: Table, k: int, costs: list[float], relations_of: list[list[int]], options: dict | None,
          max_tries: int, criterion: Criterion | None = None) -> int:
    """Give back secondaries that turned out unnecessary: try publishing the costliest ones again, one at
    a time, and keep each only if every primary near it still passes the audit. Returns how many."""
    released = 0
    candidates = sorted((n for n in table.secondaries() if table.value[n] > 0), key=lambda n: -costs[n])
    for node in candidates[:max_tries]:
        table.status[node] = PUBLISHED
        near = _primaries_near(table, node, relations_of)
        result = audit(table, k, options, primaries=near, criterion=criterion) if near else None
        if result is not None and (result.errors or result.failures()):
            table.status[node] = SECONDARY
        else:
            released += 1
    return released


def protect(table: Table, k: int, level_depth: dict[str, int], max_rounds: int = 200,
            options: dict | None = None, prune_tries: int = 0,
            criterion: Criterion | None = None, progress: Progress = silent) -> ProtectionLog:
    """Withhold secondaries in `table` (statuses change in place) until the audit passes.

    `table` holds every figure with its status (primaries already marked), `k` the threshold, `level_depth`
    each level's depth in its chain (for the cost weights), `criterion` the protection levels (default
    `Criterion(k)`), `options` HiGHS options for the audits, `max_rounds` the repair cap (reaching it is a
    `SuppressionError`, never a pass), `prune_tries` how many costly secondaries the optional pruning pass
    tries to give back. Returns the `ProtectionLog` with the audit of the final pattern."""
    criterion = criterion or Criterion(k)
    costs = _weights(table, level_depth)
    log = ProtectionLog()
    log.sweep_secondaries = sweep(table, costs, criterion)
    progress("suppression: constraint sweep done")  # counts of withheld figures stay internal (issue 9)
    relations_of = table.relations_of()
    intervals: dict[int, Interval] = {}
    totals = AuditResult(k=k, criterion=criterion)
    to_audit: set[int] | None = None  # None: every primary
    while True:
        result = audit(table, k, options, primaries=to_audit, criterion=criterion, progress=progress)
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
            keys = [table.key(f.node) for f in failures[:5]]
            raise SuppressionError(f"{len(failures)} primaries still unprotected after {max_rounds} rounds: {keys}")
        log.rounds += 1
        progress(f"suppression: repair round {log.rounds}")
        to_audit = {f.node for f in failures}
        for failure in failures:
            if table.status[failure.node] == PUBLISHED:
                continue
            choice = _repair_choice(table, costs, failure, relations_of)
            if choice is None:
                raise SuppressionError(f"{table.key(failure.node)} cannot be protected: no published figure "
                                       "is connected to it")
            if table.status[choice] == PUBLISHED:
                _withhold(table, choice)
                log.repair_secondaries += 1
    # Every primary passed in the round that last audited it, and later rounds only withheld more, which
    # never narrows an interval: the merged intervals are the final pattern's audit. (The blocking check
    # audits the published files again, independently.)
    totals.intervals = [intervals[n] for n in sorted(intervals)]
    log.audit = totals
    if prune_tries:
        log.pruned = prune(table, k, costs, relations_of, options, prune_tries, criterion)
        if log.pruned:  # the pattern changed: the audit of record is a fresh one
            log.audit = audit(table, k, options, criterion=criterion)
            if not log.audit.passed:
                raise SuppressionError(f"audit failed after pruning: {log.audit.summary()}")
    return log
