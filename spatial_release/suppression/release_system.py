"""From a policy's counts to the linear system of its release, and back to published tables.

`system_for` builds the table of every figure the release could show (leaf cells, margins at every level
of every zoning, totals) with its relations; `protect_release` runs primary and complementary suppression
on it; `audit_published` rebuilds the system from the true counts and the keys actually present in the
release files, so the audit never relies on the suppressor's own pattern.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from spatial_release.progress import Progress, silent
from spatial_release.suppression.audit import AuditResult, audit
from spatial_release.suppression.complementary import ProtectionLog, protect
from spatial_release.levels import LEAF
from spatial_release.suppression.primary import ProtectedTable, structural_zero_rows
from spatial_release.suppression.rules import below_k
from spatial_release.suppression.table import (
    EQ, PRIMARY, PUBLISHED, REST, SECONDARY, Chain, Relation, Table, build_table,
)

CELL_KEY = ["cell_id", "bucket_start"]
MARGIN_KEY = ["level", "area_id", "bucket_start"]


@dataclass(frozen=True)
class Structure:
    """What an outsider knows of the release's structure, independent of the counts."""

    chains: tuple[Chain, ...]
    identities: tuple[tuple[str, str], ...] = ()  # (level a, level b): the same figure in every bucket

    def level_depth(self) -> dict[str, int]:
        depth: dict[str, int] = {}
        for chain in self.chains:
            for d, level in enumerate(chain.levels):
                depth.setdefault(level, d)
        return depth


def _leaves(cells: pd.DataFrame) -> pd.DataFrame:
    return cells.rename(columns={"cell_id": "area_id"})[["area_id", "bucket_start", "n"]]


def system_for(true_cells: pd.DataFrame, true_margins: pd.DataFrame, structure: Structure, k: int, measure: str,
               zero_keys: Iterable[tuple[str, object]] = ()) -> Table:
    table = build_table(_leaves(true_cells), true_margins, structure.chains, k, measure, zero_keys)
    for level_a, level_b in structure.identities:
        for i in range(len(table)):
            if table.level[i] == level_a:
                j = table.index.get((level_b, level_b, table.bucket[i]))
                if j is None:
                    raise ValueError(f"{level_b} has no count for bucket {table.bucket[i]} where {level_a} has one")
                table.relations.append(Relation(EQ, i, (j,), None, None, level_a))
    return table


def _frame(table: Table, nodes: list[int], leaf: bool) -> pd.DataFrame:
    frame = pd.DataFrame({
        "level": [table.level[i] for i in nodes],
        "area_id": [table.area[i] for i in nodes],
        "bucket_start": pd.to_datetime([table.bucket[i] for i in nodes], utc=True),
        "n": pd.array([table.value[i] for i in nodes], dtype="int64"),
        "reason": [table.status[i] for i in nodes],
    })
    if leaf:
        frame = frame.drop(columns="level").rename(columns={"area_id": "cell_id"})
        return frame.sort_values(CELL_KEY).reset_index(drop=True)
    return frame.sort_values(MARGIN_KEY).reset_index(drop=True)


def tables_from_status(table: Table, zeros: Iterable[str], buckets: Sequence[object],
                       true_cells: pd.DataFrame) -> ProtectedTable:
    real = [i for i in range(len(table)) if table.status[i] != REST]
    leaves = [i for i in real if table.level[i] == LEAF]
    margins = [i for i in real if table.level[i] != LEAF]
    published_leaves = [i for i in leaves if table.status[i] == PUBLISHED]
    cells = _frame(table, published_leaves, leaf=True).drop(columns="reason")
    zero_rows = structural_zero_rows(set(zeros), buckets, true_cells)
    if len(zero_rows):
        cells = pd.concat([cells, zero_rows], ignore_index=True).sort_values(CELL_KEY).reset_index(drop=True)
    zeros = frozenset(zeros)
    return ProtectedTable(
        cells=cells,
        margins=_frame(table, [i for i in margins if table.status[i] == PUBLISHED], leaf=False).drop(columns="reason"),
        withheld_cells=_frame(table, [i for i in leaves if table.status[i] != PUBLISHED], leaf=True),
        withheld_margins=_frame(table, [i for i in margins if table.status[i] != PUBLISHED], leaf=False),
        structural_zero_conflicts=int(true_cells["cell_id"].isin(zeros).sum()),
    )


def zero_keys(zeros: Iterable[str], buckets: Sequence[object]) -> list[tuple[str, object]]:
    return [(cell, pd.Timestamp(bucket)) for cell in sorted(zeros) for bucket in buckets]


def absent_listed_zero_floors(table: Table, zeros: Iterable[str], buckets: Sequence[object]) -> dict[int, int]:
    """Lower bound 1 for every withheld leaf that is a listed structural zero in a bucket of the release.

    The zeros list is public and a listed cell that holds no unit is published as 0 in every bucket, so an
    outsider who finds one absent knows it holds at least one unit. (A listed zero published as 0 is a
    known 0: it is no node of the table, and its parent's rest excludes it.) The suppressor does not model
    this: a listed zero that holds units contradicts the list, and that blocks the release on its own
    (guarantees.check_structural_zeros); the audit still sees the gap for what it is."""
    listed = {(cell, pd.Timestamp(bucket)) for cell, bucket in zero_keys(zeros, buckets)}
    return {i: 1 for i in range(len(table))
            if table.level[i] == LEAF and table.status[i] != PUBLISHED
            and (table.area[i], pd.Timestamp(table.bucket[i])) in listed}


def protect_release(true_cells: pd.DataFrame, true_margins: pd.DataFrame, structure: Structure, k: int,
                    measure: str, zeros: Iterable[str] = (), buckets: Sequence[object] = (),
                    options: dict | None = None, progress: Progress = silent,
                    ) -> tuple[ProtectedTable, ProtectionLog, Table]:
    zeros = frozenset(zeros)
    table = system_for(true_cells, true_margins, structure, k, measure, zero_keys(zeros, buckets))
    log = protect(table, k, structure.level_depth(), options=options, progress=progress)
    return tables_from_status(table, zeros, buckets, true_cells), log, table


def audit_published(true_cells: pd.DataFrame, true_margins: pd.DataFrame, published_cells: pd.DataFrame,
                    published_margins: pd.DataFrame, count_column: str, structure: Structure, k: int,
                    measure: str, zeros: Iterable[str] = (), buckets: Sequence[object] = (),
                    earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]] = (),
                    options: dict | None = None, progress: Progress = silent) -> tuple[AuditResult, Table]:
    """Audit the release as an outsider sees it: a figure is known iff its key is in a release file (this
    one or an `earlier` release of the same period, as (cells, margins) frames), with the value printed
    there; every other figure is unknown, at least 0, or at least 1 for a listed structural zero (see
    `absent_listed_zero_floors`). True counts only say which unknown figures are primaries."""
    table = system_for(true_cells, true_margins, structure, k, measure, zero_keys(frozenset(zeros), buckets))
    known: dict[tuple, int] = {}
    conflicts: list[str] = []

    def learn(key: tuple, value: int) -> None:
        if key in known and known[key] != value:
            conflicts.append(f"{key[0]} {key[1]} at {key[2]} is published as {known[key]} and as {value}")
        known.setdefault(key, value)

    for cells, margins in [(published_cells, published_margins), *earlier]:
        for row in cells.itertuples(index=False):
            learn((LEAF, row.cell_id, pd.Timestamp(row.bucket_start)), int(getattr(row, count_column)))
        for row in margins.itertuples(index=False):
            learn((row.level, row.area_id, pd.Timestamp(row.bucket_start)), int(getattr(row, count_column)))
    for i in range(len(table)):
        if table.status[i] == REST:
            continue
        key = (table.level[i], table.area[i], pd.Timestamp(table.bucket[i]))
        if key in known:
            table.status[i] = PUBLISHED
            table.value[i] = known[key]
        else:
            table.status[i] = PRIMARY if below_k(table.value[i], k) else SECONDARY
    table.floor.update(absent_listed_zero_floors(table, zeros, buckets))
    result = audit(table, k, options, progress=progress)
    result.errors.extend(f"releases contradict each other: {c}" for c in conflicts)
    return result, table


__all__ = ["Structure", "absent_listed_zero_floors", "audit_published", "protect_release", "system_for", "tables_from_status"]
