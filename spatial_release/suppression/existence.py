"""Differencing as membership: which withheld figures the published ones prove to hold exactly one unit's worth.

The attacker knows the target was in a withheld figure w and derives, from everything published, the least
value w can take (the integer optimum of the audit's LP). Its test: "the target is in the data iff that lower
bound is at least 1". Without the target every figure it is in is one lower, and any solution of that system
plus the target's own contribution solves the real one, so lo_without >= lo_with - 1 whenever the withheld pattern
is the same (it is, for a unit without a boundary key: `tests/test_advantage_counterfactual.py`; a unit with
one is already at advantage 1 under `membership_threshold`). So the test can only tell the two releases apart on
a figure whose lower bound is *exactly 1*: at 0 it never fires with the target, at 2 or more it fires without it.

A release with no such figure gives this attacker no advantage on any unit. `figures_at_lower_bound_one` finds
them, for primaries and complements alike: the suppression audit's witness bounds cannot tell (a witness only
shows the protection bound v - 1 is reachable; a witness of 1 says nothing about whether 0 is), so each
uncertain figure gets the attacker's own bound. Cheap first: one LP per pack of components minimising the sum
of their withheld figures (an optimum integral on a component proves every figure of it that it puts at 0 can be
0), repeated on what is left; then one LP per remaining figure (an optimum above 1 proves the integer bound is at
least 2), and the integer program only where the LP leaves it open. A solver failure is reported as an error,
never as "not at 1".

Domain code: no Dagster, no files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from spatial_release.suppression.audit import PACK_NODES, TOL, ComponentModel, _is_integral, components, table_cap
from spatial_release.suppression.table import PUBLISHED, Table
from spatial_release.suppression.verdicts import Criterion

BULK_ROUNDS = 6  # sum-minimising LPs per component before one LP per figure still undecided


@dataclass(frozen=True)
class _AtZero(Criterion):
    """The bulk LP's target: push every withheld figure to its floor (0 unless the outsider knows more)."""

    def lower(self, v: int) -> int:
        return 0


@dataclass
class ExistenceResult:
    """`at_one`: withheld figures whose integer lower bound is exactly 1 (node indices, ascending); `errors`:
    figures whose bound the solver could not establish (each also counted as at 1: undecided is not safe)."""

    at_one: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    withheld: int = 0
    lps: int = 0
    mips: int = 0


def figures_at_lower_bound_one(table: Table, k: int, options: dict | None = None) -> ExistenceResult:
    """Every withheld figure of `table` (primaries and complements) whose lower bound, as an outsider derives it
    from the published figures and the table's relations and floors, is exactly 1 (see the module docstring).

    Small components are solved together, PACK_NODES figures to a model, as the audit packs them: the model is
    their disjoint union, so its LPs separate, and each component's part of an optimum is read on its own (its
    integrality included). The figures found are the ones each component alone gives; only the count of LPs
    differs."""
    result = ExistenceResult()
    relations_of = table.relations_of()
    cap = table_cap(table, Criterion(k))
    pack: list[list[int]] = []
    for nodes in components(table, relations_of):
        result.withheld += len(nodes)
        related = [n for n in nodes if relations_of[n]]
        for lone in set(nodes) - set(related):  # in no relation: the outsider knows its floor only
            if table.lower_bound(lone) == 1:
                result.at_one.append(lone)
        if related:
            pack.append(related)
            if sum(map(len, pack)) >= PACK_NODES:
                _solve_pack(table, pack, relations_of, dict(options or {}), k, cap, result)
                pack = []
    if pack:
        _solve_pack(table, pack, relations_of, dict(options or {}), k, cap, result)
    result.at_one.sort()
    return result


def _solve_pack(
    table: Table,
    pack: list[list[int]],
    relations_of: list[list[int]],
    options: dict,
    k: int,
    cap: float,
    result: ExistenceResult,
) -> None:
    model = ComponentModel(table, [n for nodes in pack for n in nodes], relations_of, options)
    # a component's free columns are its withheld figures (published ones are fixed at their value)
    parts = _PackParts(model, pack)
    pending = [n for nodes in pack for n in nodes if table.status[n] != PUBLISHED and table.lower_bound(n) < 2]
    at_zero = _Bulk(model, k, cap, result, parts).zeros(pending)
    for node in pending:
        if node in at_zero:
            continue
        lo = _integer_lower_bound(model, node, result, parts.columns_of(node))
        if lo is None or lo == 1:
            result.at_one.append(node)


class _PackParts:
    """Which component of a pack each node and each model column belongs to, so that an optimum's integrality
    is judged once per component (the same answer as judging each node's component columns on their own,
    without a pass over the component per node)."""

    def __init__(self, model: ComponentModel, pack: list[list[int]]):
        self.model = model
        self.part_of: dict[int, int] = {}
        self.columns: list[np.ndarray] = []
        self.part_of_column = np.full(len(model.nodes), -1, dtype=np.int64)
        for i, nodes in enumerate(pack):
            columns = np.array([model.column[n] for n in nodes], dtype=np.int64)
            self.columns.append(columns)
            self.part_of_column[columns] = i
            self.part_of.update(dict.fromkeys(nodes, i))

    def columns_of(self, node: int) -> np.ndarray:
        return self.columns[self.part_of[node]]

    def integral_parts(self, values: np.ndarray) -> np.ndarray:
        """Per component: whether every finite value of its columns is within TOL of an integer
        (`audit._is_integral` on the component's columns)."""
        fractional = np.isfinite(values) & (np.abs(values - np.round(values)) > TOL)
        integral = np.ones(len(self.columns), dtype=bool)
        owners = self.part_of_column[fractional]
        integral[owners[owners >= 0]] = False
        return integral


@dataclass
class _Bulk:
    model: ComponentModel
    k: int
    cap: float
    result: ExistenceResult
    parts: _PackParts

    def zeros(self, pending: list[int]) -> set[int]:
        """Figures shown able to be 0 by optima of sum-minimising LPs whose part in the figure's component is
        integral (sound: a feasible point of that component)."""
        found: set[int] = set()
        left = list(pending)
        for _ in range(BULK_ROUNDS):
            if not left:
                break
            values = self.model.bulk_optimum(left, False, self.cap, _AtZero(self.k))
            self.result.lps += 1
            if values is None:
                break
            integral = self.parts.integral_parts(values)
            column, part_of = self.model.column, self.parts.part_of
            newly = {n for n in left if values[column[n]] <= TOL and integral[part_of[n]]}
            if not newly:
                break
            found |= newly
            left = [n for n in left if n not in newly]
        return found


def _integer_lower_bound(model: ComponentModel, node: int, result: ExistenceResult, own_columns: np.ndarray) -> int | None:
    """The attacker's integer lower bound of `node` where it can be 0, 1 or more; 2 stands for "at least 2".
    None (with an error) when the solver does not answer. `own_columns`: the columns of the node's component,
    whose part of the optimum must be integral for its value to be the integer bound."""
    status, value, values, _ = model.bound(node, False)
    result.lps += 1
    if status != "optimal":
        result.errors.append(f"{model.table.key(node)}: min failed, solver status {status}")
        return None
    if value > 1 + TOL:
        return 2  # the LP bound is below the integer one
    if _is_integral(values[own_columns]):
        return int(round(value))
    status, value, _ = model.integer_point(node, False)
    result.mips += 1
    if status != "optimal":
        result.errors.append(f"{model.table.key(node)}: integer min failed, solver status {status}")
        return None
    return min(2, math.ceil(value - TOL))


__all__ = ["ExistenceResult", "figures_at_lower_bound_one"]
