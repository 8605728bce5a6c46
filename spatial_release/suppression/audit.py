"""The attacker's audit: for every withheld primary, the interval an outsider can derive from everything
published, by linear programming with HiGHS.

This is the attacker problem of Fischetti and Salazar-Gonzalez ("Solving the cell suppression problem on
tabular data with linkable information", Management Science 47(7), 2001): for a withheld cell i, minimise
and maximise y_i subject to the table's linear relations, the published figures fixed at their values
and the a-priori bounds of the withheld ones; the pattern protects i when the interval [min, max] reaches
i's protection levels (here: the `Criterion`).

One model per connected component of withheld figures (withheld nodes linked by a shared relation).
Published figures that appear in the component's relations are columns fixed at their value, so the
reduced costs say which published figure binds a bound (the repair loop uses them) and an inconsistent
published table makes the model infeasible. Each primary is minimised and maximised on the same model,
warm-started by switching the objective.

Integrality: the simplex returns a vertex. If that optimal vertex is integral, the integer optimum equals
the LP optimum; if it is fractional, the integer optimum is computed with HiGHS's MIP solver on the same
component. So the reported bounds are the attacker's integer bounds, never looser.

A primary passes when its interval meets the `Criterion` (`Criterion.passes`; by default lo <= v - 1 and
up >= max(k, v + 1): the value is neither pinned down nor shown to be below k). Infeasibility, a time-out
or any solver error is a failure, never a pass.

All cores: components are independent, so `audit` solves them in worker processes (`workers`, default
$SPATIAL_RELEASE_AUDIT_WORKERS or os.cpu_count(); serial below PARALLEL_MIN_NODES figures), or as Spark
tasks when the context's runner is Spark (`spatial_release.tasks`). Each job (a
component, or small components packed together, see PACK_NODES) goes to a worker as its own sub-table,
renumbered in the whole table's order, with the whole table's bulk cap, so its LPs are exactly those a
single worker solves on the whole table (`_solve_in_place`: the same columns and rows in the same order,
without the sub-table); results are merged in component order, so verdicts, bounds, witnesses and the
repair loop's pattern are the same whatever the worker count (tests/test_certificate.py). A big table of
independent blocks is split further up, by `suppression.blocks`, whose workers run this audit with one
worker. Processes, not threads: highspy's run() gives two HiGHS solves in two threads no parallel
speed-up, and building the models is Python anyway.

Witness points: every bound of every audited primary keeps an integral point of the attacker's feasible
set attaining it (`AuditResult.witnesses`), the raw material of the audit certificate
(`suppression.certificate`), which lets the checks verify the audit instead of solving it again.

Words (each has one meaning here):
- *optimal* bound: the attacker's own optimum, from one LP (or MIP) per bound (`Interval.bounds ==
  "optimal"`; `audit(optimal_bounds=True)` asks for it on every bound);
- *witness* bound: the value of the primary in an integral point that is feasible for the attacker and
  already clears the protection bound (`Interval.bounds == "witness"`); the attacker's true interval is
  at least as wide, which is all a pass needs, so the audit uses witnesses by default (fewer LPs);
- *integer* solve: the LP's optimal vertex was fractional, so the bound was recomputed with HiGHS's MIP
  solver (`Interval.exact_integer`, counted in `AuditResult.mips_solved`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import highspy
import numpy as np

from spatial_release import tasks
from spatial_release.progress import Progress, ProgressEvent, silent
from spatial_release.suppression.table import EQ, PUBLISHED, Table
from spatial_release.suppression.verdicts import AuditResult, Criterion, Interval

INF = highspy.kHighsInf
TOL = 1e-6
BULK_ROUNDS = 40
# A fractional bulk vertex is retried as an integer program (`ComponentModel._bulk_integer`) in components of
# at least this many withheld figures (below it the per-primary LPs are cheap).
# The work limit is a node count, not a time: single-threaded HiGHS explores the same nodes on any machine,
# so the incumbent, the next solves' warm starts and hence the repair loop's choices are the same on every
# run (a time limit made them depend on the machine's load). The time limit only guards against a
# pathological tree; reaching it never changes a verdict (each primary's bound is settled exactly after).
BULK_MIP_MIN = 500
BULK_MIP_NODES = 200
BULK_MIP_SECONDS = 300.0
OPTIMAL, WITNESS = "optimal", "witness"  # what an Interval's bounds are (see the module docstring)
WORKERS_ENV = "SPATIAL_RELEASE_AUDIT_WORKERS"
# Below this many figures in the components to solve, starting worker processes costs more than it saves.
PARALLEL_MIN_NODES = 20_000
BATCH = 2048  # jobs handed to the pool at a time (bounds the memory of the pending sub-tables)
# Small components are solved together, PACK_NODES figures to a job: one HiGHS model holding several
# components is their disjoint union (its LPs separate), so every bound and verdict is the one the component
# alone gives, while the per-model and per-solve costs are paid once per pack instead of once per component.
# A large release has tens of thousands of components of a few figures each, where the per-model overhead was
# most of the audit (bench/release_bench.py). Packs are formed from the component order alone, never from the
# number of workers, so the results stay the same whatever that number.
PACK_NODES = 1000

Point = dict  # a witness point: {node: integer value} where it differs from the node's `Table.value`


def default_workers() -> int:
    """Worker processes for the audit: $SPATIAL_RELEASE_AUDIT_WORKERS, else every core (os.cpu_count())."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if text:
        try:
            workers = int(text)
        except ValueError:
            raise ValueError(f"{WORKERS_ENV}={text!r} is not a whole number of worker processes") from None
        if workers < 1:
            raise ValueError(f"{WORKERS_ENV}={text!r}: at least one worker is needed")
        return workers
    return os.cpu_count() or 1


def inconsistent_relations(table: Table) -> list[str]:
    """Relations whose members are all published but do not add up: the table contradicts its structure."""
    problems = []
    for relation in table.relations:
        if any(table.status[m] != PUBLISHED for m in relation.members()):
            continue
        parent = table.value[relation.parent]
        children = [table.value[c] for c in relation.children]
        ok = parent == sum(children) if relation.kind == EQ else max(children, default=0) <= parent <= sum(children)
        if not ok:
            problems.append(f"published {table.key(relation.parent)} = {parent} contradicts its children {children}")
    return problems


def linked_groups(table: Table, keep: np.ndarray) -> list[np.ndarray]:
    """Connected components of the nodes where `keep` is True, linked through shared relations (only kept
    members link): in the order of their smallest node, each one's nodes ascending. Union by minimum label over
    the links between consecutive kept members of each relation, with path halving to the roots, in arrays (a
    Python loop over the figures was slow on a large release, which computes them several times)."""
    n = len(table)
    sizes = np.fromiter(
        (len(r.children) + 1 + (r.rest is not None) for r in table.relations), dtype=np.int64, count=len(table.relations)
    )
    members = np.fromiter((m for r in table.relations for m in r.members()), dtype=np.int64, count=int(sizes.sum()))
    relation = np.repeat(np.arange(len(table.relations)), sizes)
    kept = keep[members]
    members, relation = members[kept], relation[kept]
    linked = relation[1:] == relation[:-1]
    a, b = members[:-1][linked], members[1:][linked]
    label = np.arange(n)
    while True:  # each round joins the roots of every link still across two components (smaller root wins)
        la, lb = label[a], label[b]
        across = la != lb
        if not across.any():
            break
        np.minimum.at(label, np.maximum(la[across], lb[across]), np.minimum(la[across], lb[across]))
        while True:  # every node to its root
            up = label[label]
            if np.array_equal(up, label):
                break
            label = up
    nodes = np.flatnonzero(keep)
    roots = label[nodes]
    order = np.argsort(roots, kind="stable")  # components by smallest node (the root), nodes ascending in each
    nodes, roots = nodes[order], roots[order]
    return np.split(nodes, np.flatnonzero(roots[1:] != roots[:-1]) + 1) if len(nodes) else []


def components(table: Table, relations_of: list[list[int]] | None = None) -> list[list[int]]:
    """Connected components of withheld nodes, linked through shared relations: in the order of their smallest
    node, each one's nodes ascending. `relations_of` is not needed."""
    withheld = np.fromiter((status != PUBLISHED for status in table.status), dtype=bool, count=len(table))
    return [part.tolist() for part in linked_groups(table, withheld)]


class ComponentModel:
    """A HiGHS model of one component: withheld nodes free in [floor, inf) (floor 0 unless the outsider
    knows more, see Table.floor), published ones fixed at their value."""

    def __init__(self, table: Table, nodes: list[int], relations_of: list[list[int]], options: dict):
        self.table = table
        rel_ids = sorted({r for n in nodes for r in relations_of[n]})
        members = sorted({m for r in rel_ids for m in table.relations[r].members()})
        self.column = {node: c for c, node in enumerate(members)}
        self.nodes = members
        self.highs = highspy.Highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("threads", 1)
        for name, value in options.items():
            self.highs.setOptionValue(name, value)
        upper = np.array([INF if table.status[n] != PUBLISHED else table.value[n] for n in members])
        self.highs.addVars(len(members), self.floors(members), upper)
        self._add_rows([table.relations[r] for r in rel_ids])
        withheld = [n for n in members if table.status[n] != PUBLISHED]
        self._withheld_nodes = np.array(withheld, dtype=np.int64)
        self._withheld_cols = np.array([self.column[n] for n in withheld], dtype=np.int64)
        self._withheld_values = np.array([table.value[n] for n in withheld], dtype=np.int64)

    def point(self, values: np.ndarray) -> Point:
        """The witness point of an integral solution: {node: value} for every withheld node whose rounded
        value differs from `table.value` (published nodes are fixed at their value, so never differ)."""
        rounded = np.rint(values[self._withheld_cols]).astype(np.int64)
        moved = np.nonzero(rounded != self._withheld_values)[0]
        return {int(self._withheld_nodes[i]): int(rounded[i]) for i in moved}

    def floors(self, nodes: Iterable[int]) -> np.ndarray:
        """Column lower bounds: a published figure's value, else what the outsider knows (table.floor)."""
        table = self.table
        return np.array(
            [float(table.value[n]) if table.status[n] == PUBLISHED else float(table.lower_bound(n)) for n in nodes]
        )

    def _add_rows(self, relations: Iterable) -> None:
        lower: list[float] = []
        upper: list[float] = []
        starts: list[int] = []
        index: list[int] = []
        values: list[float] = []

        def row(coefs: dict[int, float], lo: float, up: float) -> None:
            starts.append(len(index))
            for node, coef in sorted(coefs.items()):
                index.append(self.column[node])
                values.append(coef)
            lower.append(lo)
            upper.append(up)

        for rel in relations:
            sums = {c: 1.0 for c in rel.children}
            if rel.rest is not None:
                sums[rel.rest] = 1.0
            if rel.kind == EQ:
                row({**sums, rel.parent: -1.0}, 0.0, 0.0)
                continue
            row({**sums, rel.parent: -1.0}, 0.0, INF)  # parent <= sum of children
            for child in rel.children:
                row({child: 1.0, rel.parent: -1.0}, -INF, 0.0)  # each child <= parent
            if rel.rest is not None and rel.rest_children is not None:
                row({rel.rest: 1.0, rel.parent: -float(rel.rest_children)}, -INF, 0.0)
        self.highs.addRows(
            len(lower),
            np.array(lower),
            np.array(upper),
            len(index),
            np.array(starts, dtype=np.int32),
            np.array(index, dtype=np.int32),
            np.array(values),
        )

    def bound(self, node: int, maximise: bool) -> tuple[str, float, np.ndarray, np.ndarray]:
        """(status, value, column values, reduced costs) of min or max of one node."""
        h = self.highs
        col = self.column[node]
        h.changeColCost(col, 1.0)
        h.changeObjectiveSense(highspy.ObjSense.kMaximize if maximise else highspy.ObjSense.kMinimize)
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kUnboundedOrInfeasible:
            # presolve could not tell which: ask the simplex without presolve
            h.setOptionValue("presolve", "off")
            h.run()
            status = h.getModelStatus()
            h.setOptionValue("presolve", "choose")
        solution = h.getSolution()
        values, duals = np.array(solution.col_value), np.array(solution.col_dual)
        objective = h.getInfo().objective_function_value
        name = h.modelStatusToString(status)
        h.changeColCost(col, 0.0)
        if status == highspy.HighsModelStatus.kOptimal:
            return "optimal", objective, values, duals
        if status == highspy.HighsModelStatus.kUnbounded and maximise:
            return "unbounded", INF, values, duals
        return name, math.nan, values, duals

    def bulk_witness(self, nodes: list[int], maximise: bool, cap: float, criterion: Criterion) -> np.ndarray | None:
        """One LP pushing every node in `nodes` towards its protection bound at once: maximise (minimise)
        their sum with each one's bound clipped at its target, max(k, v + 1) (floored at v - 1), so that the
        LP spreads the slack instead of spending it on one primary. Every variable is also capped at `cap`.
        All of these only shrink the feasible set (the true table stays inside it), so any point found is
        feasible for the attacker too. Returns the column values of an integral optimal point, or None."""
        values = self.bulk_optimum(nodes, maximise, cap, criterion, integer_fallback=True)
        if values is None or not _is_integral(values):
            return None
        return values

    def bulk_optimum(
        self, nodes: list[int], maximise: bool, cap: float, criterion: Criterion, integer_fallback: bool = False
    ) -> np.ndarray | None:
        """The column values of the bulk LP's optimum (`bulk_witness`), integral or not; None when the LP has
        no optimum. With `integer_fallback`, a fractional vertex of a model of BULK_MIP_MIN withheld figures or
        more is replaced by the integer program's incumbent (`_bulk_integer`). A caller whose model holds
        several components (their disjoint union) may read each component's part on its own: the LP
        separates, so that part is an optimum of the component's own LP."""
        h = self.highs
        withheld = [n for n in self.nodes if self.table.status[n] != PUBLISHED]
        idx = np.array([self.column[n] for n in withheld], dtype=np.int32)
        # every bound below keeps the outsider's floors: a witness below one would be a point the
        # attacker excludes, i.e. an unsound certificate
        known = self.floors(withheld)
        h.changeColsBounds(len(idx), idx, known, np.full(len(idx), cap))
        cols = np.array([self.column[n] for n in nodes], dtype=np.int32)
        own = self.floors(nodes)
        if maximise:
            targets = np.array([criterion.upper(self.table.value[n]) for n in nodes], dtype=float)
            h.changeColsBounds(len(cols), cols, own, np.maximum(targets, own))
        else:
            floors = np.array([criterion.lower(self.table.value[n]) for n in nodes], dtype=float)
            h.changeColsBounds(len(cols), cols, np.maximum(floors, own), np.full(len(cols), cap))
        h.changeColsCost(len(cols), cols, np.ones(len(cols)))
        h.changeObjectiveSense(highspy.ObjSense.kMaximize if maximise else highspy.ObjSense.kMinimize)
        h.run()
        ok = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        values = np.array(h.getSolution().col_value) if ok else None
        if integer_fallback and values is not None and not _is_integral(values) and len(idx) >= BULK_MIP_MIN:
            values = self._bulk_integer(idx)
        h.changeColsCost(len(cols), cols, np.zeros(len(cols)))
        h.changeColsBounds(len(idx), idx, known, np.full(len(idx), INF))
        return values

    def _bulk_integer(self, withheld_cols: np.ndarray) -> np.ndarray | None:
        """The bulk LP's vertex was fractional (UNION relations, several linked rungs): the same objective
        as an integer program started from the true table (an integral feasible point, so the solver always
        has an incumbent) for at most BULK_MIP_NODES branch-and-bound nodes. Any incumbent is an integral
        feasible point, which is all a witness needs; its optimality does not matter. None when the solver gives no
        feasible point."""
        h = self.highs
        kinds = np.array([highspy.HighsVarType.kInteger] * len(withheld_cols))
        h.changeColsIntegrality(len(withheld_cols), withheld_cols.astype(np.int32), kinds)
        start = highspy.HighsSolution()
        start.col_value = [float(self.table.value[n]) for n in self.nodes]
        h.setOptionValue("time_limit", BULK_MIP_SECONDS)
        h.setOptionValue("mip_max_nodes", BULK_MIP_NODES)
        try:
            h.setSolution(start)
            h.run()
            feasible = h.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible
            values = np.array(h.getSolution().col_value) if feasible else None
        finally:
            h.setOptionValue("time_limit", INF)
            h.setOptionValue("mip_max_nodes", 2**31 - 1)
            h.changeColsIntegrality(
                len(withheld_cols),
                withheld_cols.astype(np.int32),
                np.array([highspy.HighsVarType.kContinuous] * len(withheld_cols)),
            )
        return values

    def integer_point(self, node: int, maximise: bool) -> tuple[str, float, np.ndarray]:
        """(status, value, column values) of the integer (MIP) min or max of one node."""
        h = self.highs
        variables = [self.column[n] for n in self.nodes if self.table.status[n] != PUBLISHED]
        kinds = np.array([highspy.HighsVarType.kInteger] * len(variables))
        h.changeColsIntegrality(len(variables), np.array(variables, dtype=np.int32), kinds)
        try:
            status, value, values, _ = self.bound(node, maximise)
        finally:
            h.changeColsIntegrality(
                len(variables),
                np.array(variables, dtype=np.int32),
                np.array([highspy.HighsVarType.kContinuous] * len(variables)),
            )
        return status, value, values

    def toward(self, node: int, maximise: bool, target: float) -> tuple[str, float, np.ndarray]:
        """(status, value, column values) of the integer max (min) of one node capped at (floored at)
        `target`: an integral point reaching the target when one exists, else the integer optimum (the cap
        does not bind below it). The cap keeps the MIP small: it stops as soon as the target is reached."""
        h = self.highs
        col = self.column[node]
        [floor] = self.floors([node])
        if maximise:
            h.changeColBounds(col, floor, max(float(target), floor))
        else:
            h.changeColBounds(col, max(float(target), floor), INF)
        try:
            status, value, values, _ = self.bound(node, maximise)
            if status == "optimal" and not _is_integral(values):
                status, value, values = self.integer_point(node, maximise)
        finally:
            h.changeColBounds(col, floor, INF)
        return status, value, values

    def reach(self, node: int, target: float) -> Point | None:
        """An integral feasible point where `node` is at least `target`, for an upper bound the LP found
        unbounded (a ray is no point to check): maximise the node capped at the target. None if none."""
        status, value, values = self.toward(node, True, target)
        if status != "optimal" or value < target - TOL or not _is_integral(values):
            return None
        return self.point(values)


def _is_integral(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return bool(np.all(np.abs(finite - np.round(finite)) <= TOL))


def _binding(model: ComponentModel, duals: np.ndarray) -> tuple[tuple[int, float], ...]:
    table = model.table
    found = [
        (node, abs(float(duals[c])))
        for node, c in model.column.items()
        if table.status[node] == PUBLISHED and abs(duals[c]) > TOL
    ]
    return tuple(sorted(found))


def _bulk_certificates(
    model: ComponentModel, primaries: list[int], criterion: Criterion, result: AuditResult, cap: float | None = None
) -> tuple[dict[int, tuple[float, Point]], dict[int, tuple[float, Point]]]:
    """Witness points that clear the protection bounds of many primaries at once: maximise (minimise) the
    sum of the still-uncertified primaries and keep every primary whose value in that integral feasible
    point already reaches max(k, v + 1) (is at most v - 1). Sound: a feasible point is something the
    attacker cannot exclude. Whatever is left gets the attacker's optimum, one LP per bound. Each found
    bound comes with its point (one shared dict per bulk LP). `cap` caps every variable (default from the
    whole table; a component solved on its own sub-table is given the whole table's cap)."""
    table = model.table
    if cap is None:
        cap = table_cap(table, criterion)
    ups: dict[int, tuple[float, Point]] = {}
    los: dict[int, tuple[float, Point]] = {}
    for maximise, found in ((True, ups), (False, los)):
        pending = list(primaries)
        for _ in range(BULK_ROUNDS):
            if not pending:
                break
            values = model.bulk_witness(pending, maximise, cap, criterion)
            result.bulk_lps += 1
            if values is None:
                break
            newly = []
            point = model.point(values)
            for node in pending:
                v, y = table.value[node], values[model.column[node]]
                if (maximise and y >= criterion.upper(v) - TOL) or (not maximise and y <= criterion.lower(v) + TOL):
                    found[node] = (float(round(y)), point)
                    newly.append(node)
            if not newly:
                break
            pending = [n for n in pending if n not in found]
    return los, ups


def table_cap(table: Table, criterion: Criterion) -> float:
    """The cap on every variable of the bulk witness LPs (far above any value the criterion asks for)."""
    return float(max(sum(table.value), criterion.k) * 4 + 10)


def audit_component(
    model: ComponentModel,
    primaries: list[int],
    criterion: Criterion,
    result: AuditResult,
    optimal_bounds: bool = False,
    cap: float | None = None,
) -> None:
    """Audit `primaries` of one component: one `Interval` each in `result.intervals`, and in
    `result.witnesses` each primary's (lo point, up point): integral points of the attacker's feasible set
    where the primary takes the value lo (up), or a value >= the criterion's bound for an unbounded up."""
    table = model.table
    witness_lo, witness_up = ({}, {}) if optimal_bounds else _bulk_certificates(model, primaries, criterion, result, cap)
    for node in primaries:
        v = table.value[node]
        bounds, integer_solve, failed, capped = {}, False, False, False
        binding: dict[bool, tuple[tuple[int, float], ...]] = {False: (), True: ()}
        points: dict[bool, Point | None] = {False: None, True: None}
        for maximise in (False, True):
            witness = (witness_up if maximise else witness_lo).get(node)
            if witness is not None:
                bounds[maximise], points[maximise] = witness
                continue
            status, value, values, duals = model.bound(node, maximise)
            result.lps_solved += 1
            if status not in ("optimal", "unbounded"):
                reason = (
                    "infeasible: the published figures contradict the relations"
                    if status == "Infeasible"
                    else f"solver status {status}"
                )
                result.errors.append(f"{table.key(node)}: {'max' if maximise else 'min'} failed, {reason}")
                failed = True
                break
            point_values = values
            if status == "optimal" and not _is_integral(values):
                # A fractional vertex: the integer bound is at least as tight as the LP's, rounded inward.
                # If that already fails the criterion, the verdict is a failure whatever the integer optimum
                # (the reported bound is the rounded LP one: the attacker's is no looser). Otherwise only an
                # integral point at the protection bound is needed (`toward`, a capped MIP), not the optimum.
                # (`optimal_bounds` asks for the attacker's integer optimum instead: the full MIP.)
                integer_solve = True
                target = criterion.upper(v) if maximise else criterion.lower(v)
                rounded = math.floor(value + TOL) if maximise else math.ceil(value - TOL)
                if not optimal_bounds and ((rounded < target) if maximise else (rounded > target)):
                    bounds[maximise] = float(rounded)
                    binding[maximise] = _binding(model, duals)
                    continue
                if optimal_bounds:
                    status, value, point_values = model.integer_point(node, maximise)
                else:
                    status, value, point_values = model.toward(node, maximise, target)
                    capped = status == "optimal" and ((value >= target - TOL) if maximise else (value <= target + TOL))
                result.mips_solved += 1
                if status not in ("optimal", "unbounded"):
                    result.errors.append(
                        f"{table.key(node)}: integer {'max' if maximise else 'min'} failed, solver status {status}"
                    )
                    failed = True
                    break
            bounds[maximise] = value
            binding[maximise] = _binding(model, duals)
            if status == "optimal" and _is_integral(point_values):
                points[maximise] = model.point(point_values)
            elif status == "unbounded":
                points[maximise] = model.reach(node, criterion.upper(v))
                result.witness_lps += 1
        if failed:
            continue
        result.witnesses[node] = (points[False], points[True])
        lo = math.ceil(bounds[False] - TOL)
        up = INF if math.isinf(bounds[True]) else math.floor(bounds[True] + TOL)
        failing = criterion.failing(v, lo, up)
        chosen = binding[True] if failing in ("upper", "both") else binding[False] if failing == "lower" else ()
        kind = WITNESS if capped or node in witness_lo or node in witness_up else OPTIMAL
        result.intervals.append(Interval(node, v, float(lo), float(up), not failing, integer_solve, failing, chosen, kind))


@dataclass
class _Job:
    """One component, self-contained so that a worker process can solve it: its own sub-table (the
    component's figures and relations, renumbered in the same order, so the LP is the same one the whole
    table would give), the primaries to audit (sub-table numbering) and the whole table's cap."""

    table: Table
    nodes: list[int]  # sub-table node -> node of the whole table
    primaries: list[int]
    cap: float
    options: dict
    criterion: Criterion
    optimal_bounds: bool
    components: int = 1  # components packed into this job


@dataclass
class _Solved:
    intervals: list[Interval]
    errors: list[str]
    witnesses: dict[int, tuple[Point | None, Point | None]]
    lps_solved: int = 0
    bulk_lps: int = 0
    mips_solved: int = 0
    witness_lps: int = 0
    counts: dict = field(default_factory=dict)


@dataclass
class Pack:
    """One job of the audit: a component with primaries to audit, or several small ones (PACK_NODES)."""

    nodes: list[int]  # the figures of its components, component after component
    chosen: list[int]  # the primaries to audit
    components: list[list[int]]


def packs(table: Table, primaries: set[int] | None = None) -> list[Pack]:
    """The audit's jobs, in component order (see `Pack`)."""
    work: list[Pack] = []
    current = Pack([], [], [])
    for nodes in components(table):
        chosen = [n for n in nodes if table.status[n] == "primary" and (primaries is None or n in primaries)]
        if not chosen:
            continue
        current.nodes += nodes
        current.chosen += chosen
        current.components.append(nodes)
        if len(current.nodes) >= PACK_NODES:
            work.append(current)
            current = Pack([], [], [])
    if current.chosen:
        work.append(current)
    return work


def _job(
    table: Table,
    pack: Pack,
    relations_of: list[list[int]],
    cap: float,
    options: dict,
    criterion: Criterion,
    optimal_bounds: bool,
) -> _Job:
    rel_ids = sorted({r for n in pack.nodes for r in relations_of[n]})
    members = sorted({m for r in rel_ids for m in table.relations[r].members()} | set(pack.nodes))
    local = {node: i for i, node in enumerate(members)}
    sub = table.subtable(members, rel_ids)
    return _Job(sub, members, [local[n] for n in pack.chosen], cap, options, criterion, optimal_bounds, len(pack.components))


def _solve(job: _Job) -> _Solved:
    """Audit one job on its sub-table (in a worker process)."""
    table = job.table
    model = ComponentModel(
        table, [i for i in range(len(table)) if table.status[i] != PUBLISHED], table.relations_of(), job.options
    )
    comps = components(table) if job.components > 1 else []
    return _solved(model, job.primaries, comps, job.criterion, job.optimal_bounds, job.cap)


def _solve_in_place(
    table: Table,
    pack: Pack,
    relations_of: list[list[int]],
    cap: float,
    options: dict,
    criterion: Criterion,
    optimal_bounds: bool,
) -> _Solved:
    """Audit one job on the whole table (in this process): the very model `_solve` builds on its sub-table,
    whose columns and rows come in the same order, without building the sub-table or renumbering back."""
    model = ComponentModel(table, pack.nodes, relations_of, options)
    comps = pack.components if len(pack.components) > 1 else []
    return _solved(model, pack.chosen, comps, criterion, optimal_bounds, cap)


def _solved(
    model: ComponentModel,
    primaries: list[int],
    comps: list[list[int]],
    criterion: Criterion,
    optimal_bounds: bool,
    cap: float,
) -> _Solved:
    """Audit `primaries` on `model`; `comps`: the components packed into it (empty: one)."""
    result = AuditResult(k=criterion.k, criterion=criterion)
    audit_component(model, primaries, criterion, result, optimal_bounds, cap)
    witnesses = _own_component_points(comps, result.witnesses) if comps else result.witnesses
    return _Solved(
        result.intervals,
        result.errors,
        witnesses,
        result.lps_solved,
        result.bulk_lps,
        result.mips_solved,
        result.witness_lps,
    )


def _own_component_points(
    comps: list[list[int]], witnesses: dict[int, tuple[Point | None, Point | None]]
) -> dict[int, tuple[Point | None, Point | None]]:
    """Each primary's witness points restricted to its own component (the other components at their true
    values). A point of a pack moves figures of several components; restricted, it is still feasible (the
    components share no relation and the true table satisfies each), and a witness never depends on another
    component's figures, which the pruning pass and the certificate rely on (publishing a figure can only
    spoil the points of its own component). One dict per (shared point, component), as before."""
    comp_of: dict[int, int] = {}
    for c, nodes in enumerate(comps):
        for node in nodes:
            comp_of[node] = c
    # Each shared point is split once, in one pass over its items (filtering it once per component is
    # quadratic in a pack).
    split: dict[int, dict[int, Point]] = {}

    def own(point: Point | None, primary: int) -> Point | None:
        if point is None:
            return None
        parts = split.get(id(point))
        if parts is None:
            parts = split[id(point)] = {}
            for n, v in point.items():
                parts.setdefault(comp_of.get(n, -1), {})[n] = v
        return parts.setdefault(comp_of[primary], {})

    return {p: (own(lo, p), own(up, p)) for p, (lo, up) in witnesses.items()}


def renumbered(
    intervals: list[Interval], witnesses: dict[int, tuple[Point | None, Point | None]], back: Sequence[int]
) -> tuple[list[Interval], dict[int, tuple[Point | None, Point | None]]]:
    """Intervals and witness points of a sub-table (`Table.subtable`) in the whole table's numbering (`back`:
    sub-table node -> node; monotone, so every order is kept). Shared points stay shared."""

    def point(p: Point) -> Point:
        return {back[n]: v for n, v in p.items()}

    mapped_intervals = [
        Interval(
            back[i.node],
            i.value,
            i.lo,
            i.up,
            i.passed,
            i.exact_integer,
            i.failing,
            tuple((back[n], rc) for n, rc in i.binding),
            i.bounds,
        )
        for i in intervals
    ]
    mapped: dict[int, Point] = {}  # one dict per shared point, as in the worker
    mapped_witnesses = {}
    for node, (lo, up) in witnesses.items():
        pair = []
        for p in (lo, up):
            if p is not None and id(p) not in mapped:
                mapped[id(p)] = point(p)
            pair.append(None if p is None else mapped[id(p)])
        mapped_witnesses[back[node]] = (pair[0], pair[1])
    return mapped_intervals, mapped_witnesses


def _to_table(job: _Job, solved: _Solved) -> _Solved:
    """The sub-table's numbering mapped back to the whole table's."""
    intervals, witnesses = renumbered(solved.intervals, solved.witnesses, job.nodes)
    return _Solved(
        intervals, solved.errors, witnesses, solved.lps_solved, solved.bulk_lps, solved.mips_solved, solved.witness_lps
    )


def _solve_all(
    table: Table,
    work: list[Pack],
    relations_of: list[list[int]],
    cap: float,
    options: dict,
    criterion: Criterion,
    optimal_bounds: bool,
    workers: int,
) -> Iterator[tuple[Pack, _Solved]]:
    """Each job's result in the whole table's numbering, in the order of `work` whatever runs it: solved in
    place by one worker, on sub-tables (`_job`) by the context's runner (`tasks`: local processes, or Spark
    tasks) otherwise."""
    runner = tasks.runner_for(min(workers, len(work)))
    if runner is None:
        for pack in work:
            yield pack, _solve_in_place(table, pack, relations_of, cap, options, criterion, optimal_bounds)
        return
    for start in range(0, len(work), BATCH):
        batch = work[start : start + BATCH]
        jobs = [_job(table, pack, relations_of, cap, options, criterion, optimal_bounds) for pack in batch]
        chunk = max(1, len(jobs) // (runner.slots * 4))
        for pack, job, solved in zip(batch, jobs, runner.map(_solve, jobs, chunksize=chunk)):
            yield pack, _to_table(job, solved)


def audit(
    table: Table,
    k: int,
    options: dict | None = None,
    primaries: set[int] | None = None,
    optimal_bounds: bool = False,
    criterion: Criterion | None = None,
    progress: Progress = silent,
    every_s: float = 5.0,
    workers: int | None = None,
    cap: float | None = None,
) -> AuditResult:
    """Audit every withheld primary, or only those in `primaries` (the repair loop re-audits only the
    primaries that failed: withholding more figures only widens the attacker's feasible set, so a primary
    that passed keeps passing). With `optimal_bounds`, every bound is the attacker's optimum (two LPs per
    primary) instead of a witness that already clears the protection bound.

    Implements the attacker LPs of Fischetti and Salazar-Gonzalez (2001, Management Science) on each
    connected component of withheld figures; `criterion` (default `Criterion(k)`) holds the protection
    levels. Parameters: `table` (statuses and values; withheld figures are unknowns of the LP), `k`,
    `options` (HiGHS option name -> value, e.g. a time limit), `progress` (`ProgressEvent`s of step `audit`,
    every `every_s` seconds, and a closing one, `done`, that a caller whose audit is a part of its own step
    drops with `progress.without_closing`), `workers` (processes solving components in parallel; default
    `default_workers()`: the results are merged in component order, so they are the same whatever the
    number), `cap` (the bulk witness LPs' cap on every variable, default `table_cap(table)`; a sub-table is
    given its whole table's). Returns an `AuditResult`: one `Interval` per audited primary (in component
    order), its witness points and the errors; any solver status other than optimal/unbounded is an error, never a pass."""
    started = time.perf_counter()
    criterion = criterion or Criterion(k)
    workers = tasks.slots(default_workers()) if workers is None else max(1, int(workers))
    result = AuditResult(k=k, criterion=criterion)
    result.errors.extend(inconsistent_relations(table))
    relations_of = table.relations_of()
    work = packs(table, primaries)
    total = sum(len(pack.chosen) for pack in work)
    size = sum(len(pack.nodes) for pack in work)
    if size < PARALLEL_MIN_NODES:
        workers = 1
    result.workers = workers
    cap = table_cap(table, criterion) if cap is None else cap
    done, reported = 0, time.perf_counter()
    for pack, solved in _solve_all(table, work, relations_of, cap, dict(options or {}), criterion, optimal_bounds, workers):
        result.components += len(pack.components)
        result.intervals.extend(solved.intervals)
        result.errors.extend(solved.errors)
        result.witnesses.update(solved.witnesses)
        for name in ("lps_solved", "bulk_lps", "mips_solved", "witness_lps"):
            setattr(result, name, getattr(result, name) + getattr(solved, name))
        done += len(pack.chosen)
        if time.perf_counter() - reported >= every_s:
            reported = time.perf_counter()
            # shares and times only: counts of withheld primaries and components stay internal
            progress(
                ProgressEvent(
                    "audit",
                    f"audit: {done / total:.0%} of the withheld primaries, {reported - started:.0f} s",
                    share=done / total,
                    seconds=reported - started,
                )
            )
    result.seconds = time.perf_counter() - started
    if total:
        verdict = "every withheld primary protected" if not result.failures() else "some primaries NOT protected"
        progress(
            ProgressEvent(
                "audit", f"audit: done in {result.seconds:.1f} s, {verdict}", share=1.0, seconds=result.seconds, done=True
            )
        )
    return result


__all__ = [
    "AuditResult",
    "ComponentModel",
    "Criterion",
    "Interval",
    "audit",
    "audit_component",
    "components",
    "default_workers",
    "inconsistent_relations",
    "table_cap",
]
