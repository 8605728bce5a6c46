"""Stage 1 of complementary suppression by Gaussian elimination, in the manner of Statistics Norway's
GaussSuppression (Langsrud, "Secondary cell suppression by Gaussian elimination: an algorithm suitable for
handling issues with zeros and singletons", Journal of Official Statistics 40(4), 2024; R packages SSBtools
and GaussSuppression).

The table as a model matrix: every figure is a column of X, the sum of the *inner* figures it covers (an
inner figure is one that is the parent of no EQ relation: leaf cells, rest variables, and, for this stage
only, the members of UNION relations, which are not sums). A withheld primary is exactly recoverable from
the published figures iff its column lies in the span of the published columns. Candidates (published,
non-primary figures) are visited in descending cost order; each is published unless publishing it would
put a primary column, or a virtual "sum of primaries" column, into that span; then it becomes a secondary.

- Sum-of-primaries virtual columns: for every EQ relation whose primary children add up to less than k
  (two or more of them), their sum is tracked like a primary: an attacker who learns only the sum of a
  group below k learns that each member is small (tau-Argus singleton option 3; GaussSuppression's
  singleton handling; US#330 of sdcTools/UserSupport).
- Empty figures: an absent (empty) inner figure is unknown to the outsider but can never be negative, so
  it cannot carry the upward uncertainty a primary needs (max(k, v + 1) under our criterion). The
  elimination therefore treats empty inner figures as known (rows dropped): a primary is only counted as
  hidden by figures that hold units. (GaussSuppression's `secondaryZeros = FALSE` makes zeros the last
  candidates for the same reason.)
- UNION relations (visitors: max(children) <= parent <= sum(children)) are not linear identities, so the
  elimination ignores them; `complementary.protect` runs the constraint sweep on those relations.
- If a figure is the parent of several EQ relations (several zonings under one total), its column is the
  expansion through the first of them; the elimination then sees fewer identities than the attacker. That
  is harmless for the guarantee: stage 2, the LP audit-and-repair, sees every relation.

Arithmetic is exact, modulo the prime 2^31 - 1 (a dependency found mod p that does not hold over the
rationals can only make the stage withhold more, and the chance of one is negligible); the echelon form is
sparse (dicts), its pivots chosen in the rows fewest pending candidates touch (Markowitz-like), and every
order is fixed by the node order and the costs, so the same table gives the same pattern.

Stage 1 only prevents *exact* disclosure; the interval criterion (`verdicts.Criterion`) is stage 2's job.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from spatial_release.suppression.table import EQ, PRIMARY, PUBLISHED, SECONDARY, Table

MOD = 2_147_483_647  # 2^31 - 1, prime

Vector = dict  # {inner row: coefficient mod MOD}, no zero entries


def _inv(x: int) -> int:
    return pow(x, MOD - 2, MOD)


def model_columns(table: Table) -> list[Vector]:
    """Each figure's column of X over the non-empty inner figures (empty inner figures are known zeros)."""
    parent_rel: dict[int, int] = {}
    for r, rel in enumerate(table.relations):
        if rel.kind == EQ and rel.parent not in parent_rel:
            parent_rel[rel.parent] = r
    columns: list[Vector | None] = [None] * len(table)

    def expand(node: int) -> Vector:
        stack = [node]
        while stack:
            top = stack[-1]
            if columns[top] is not None:
                stack.pop()
                continue
            r = parent_rel.get(top)
            if r is None:
                columns[top] = {top: 1} if table.value[top] > 0 else {}
                stack.pop()
                continue
            members = [
                *table.relations[r].children,
                *(() if table.relations[r].rest is None else (table.relations[r].rest,)),
            ]
            pending = [m for m in members if columns[m] is None]
            if pending:
                if any(m in stack for m in pending):
                    raise ValueError(f"the EQ relations of {table.key(top)} form a cycle")
                stack.extend(pending)
                continue
            out: Vector = {}
            for m in members:
                for row, coef in columns[m].items():
                    value = (out.get(row, 0) + coef) % MOD
                    if value:
                        out[row] = value
                    else:
                        out.pop(row, None)
            columns[top] = out
            stack.pop()
        column = columns[node]
        assert column is not None  # the loop ends when node's column is set
        return column

    for node in range(len(table)):
        expand(node)
    return columns  # type: ignore[return-value]


def virtual_sums(table: Table, k: int, upper: Callable[[int], int] | None = None) -> list[list[int]]:
    """Groups of primary children (two or more) of one EQ relation whose sum, if it were known, would cap a
    member below the upper protection level it needs: `upper(v)` (default max(k, v + 1), our criterion,
    where this means a sum below k; under tau-Argus's FREQ criterion, v + max(1, p% v), rarely)."""
    upper = upper or (lambda v: max(k, v + 1))
    groups: set[tuple[int, ...]] = set()
    for rel in table.relations:
        if rel.kind != EQ:
            continue
        group = tuple(sorted(c for c in rel.children if table.status[c] == PRIMARY))
        total = sum(table.value[c] for c in group)
        if len(group) >= 2 and any(upper(table.value[c]) > total for c in group):
            groups.add(group)
    return [list(g) for g in sorted(groups)]


class Echelon:
    """The span of the published columns in sparse echelon form, and every tracked column (primaries and
    virtual sums) reduced against it (zero in every pivot row), indexed by the rows it touches."""

    def __init__(self, pending_rows: dict[int, int]):
        self.basis: dict[int, tuple[int, Vector]] = {}  # pivot row -> (age, vector)
        self.tracked: list[Vector] = []
        self.by_row: dict[int, set[int]] = {}
        self.pending_rows = pending_rows  # row -> candidates still to visit that touch it

    def track(self, vector: Vector) -> int:
        t = len(self.tracked)
        self.tracked.append(dict(vector))
        for row in vector:
            self.by_row.setdefault(row, set()).add(t)
        return t

    def reduce(self, column: Vector) -> Vector:
        vec = dict(column)
        heap = [(self.basis[row][0], row) for row in vec if row in self.basis]
        heapq.heapify(heap)
        while heap:
            _, q = heapq.heappop(heap)
            coef = vec.get(q)
            if not coef:
                continue
            _, b = self.basis[q]
            f = coef * _inv(b[q]) % MOD
            for row, bc in b.items():
                value = (vec.get(row, 0) - f * bc) % MOD
                if value:
                    if row not in vec and row in self.basis:
                        heapq.heappush(heap, (self.basis[row][0], row))
                    vec[row] = value
                else:
                    vec.pop(row, None)
        return vec

    def reveals(self, red: Vector) -> list[int]:
        """The tracked columns that adding `red` (reduced, non-zero) to the span would put in it: a tracked
        column t enters the span iff its reduced form is a multiple of `red`."""
        row = min(red, key=lambda r: (len(self.by_row.get(r, ())), r))
        inv_lead = _inv(red[row])
        found = []
        for t in sorted(self.by_row.get(row, ())):
            vec = self.tracked[t]
            if len(vec) != len(red):
                continue
            f = vec[row] * inv_lead % MOD
            if all(vec.get(r, 0) == f * c % MOD for r, c in red.items()):
                found.append(t)
        return found

    def add(self, red: Vector) -> None:
        q = min(red, key=lambda r: (self.pending_rows.get(r, 0), len(self.by_row.get(r, ())), r))
        self.basis[q] = (len(self.basis), red)
        inv = _inv(red[q])
        for t in sorted(self.by_row.get(q, ())):
            vec = self.tracked[t]
            f = vec[q] * inv % MOD
            for row, bc in red.items():
                old = vec.get(row, 0)
                value = (old - f * bc) % MOD
                if value:
                    vec[row] = value
                    if not old:
                        self.by_row.setdefault(row, set()).add(t)
                elif old:
                    del vec[row]
                    self.by_row[row].discard(t)
            if not vec:
                raise AssertionError("a tracked column entered the span of the published ones")


def eliminate(
    table: Table,
    k: int,
    costs: Sequence[float],
    order_key,
    reasons: dict[int, list[int]] | None = None,
    upper: Callable[[int], int] | None = None,
) -> int:
    """Withhold (status SECONDARY) the published figures that GaussSuppression-style elimination picks so
    that no primary and no small sum of primaries is a linear combination of published figures. `costs`
    per node (higher: published first), `order_key(node)` the deterministic tie-break. `reasons`, if given,
    receives for each secondary the primaries it was withheld for; `upper` the upper protection level
    (see `virtual_sums`). Returns how many."""
    columns = model_columns(table)
    candidates = [n for n in range(len(table)) if table.status[n] == PUBLISHED]
    candidates.sort(key=lambda n: (-costs[n], order_key(n)))
    pending: dict[int, int] = {}
    for n in candidates:
        for row in columns[n]:
            pending[row] = pending.get(row, 0) + 1
    echelon = Echelon(pending)
    owners: list[list[int]] = []  # tracked column -> the primaries it stands for
    for node in table.primaries():
        if columns[node]:
            echelon.track(columns[node])
            owners.append([node])
    for group in virtual_sums(table, k, upper):
        total: Vector = {}
        for node in group:
            for row, coef in columns[node].items():
                total[row] = (total.get(row, 0) + coef) % MOD
        total = {r: c for r, c in total.items() if c}
        if total:
            echelon.track(total)
            owners.append(group)
    withheld = 0
    for node in candidates:
        for row in columns[node]:
            pending[row] -= 1
        if not columns[node]:
            continue  # holds no unit: publishing it reveals nothing
        red = echelon.reduce(columns[node])
        if not red:
            continue  # already implied by the published figures
        revealed = echelon.reveals(red)
        if revealed:
            table.status[node] = SECONDARY
            withheld += 1
            if reasons is not None:
                reasons[node] = sorted({p for t in revealed for p in owners[t]})
        else:
            echelon.add(red)
    return withheld


__all__ = ["MOD", "Echelon", "eliminate", "model_columns", "virtual_sums"]
