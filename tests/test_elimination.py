"""Stage 1 by Gaussian elimination (`suppression.elimination`) and `protect` with `ProtectionMethod(stage1="gauss")`.

Each test can fail: the elimination's own guarantee (no primary exactly recoverable) is checked with the
LP audit, which knows nothing of the elimination, and with a negative control (publishing one of its
secondaries back pins a primary down); the final pattern of `protect` is checked by an independent audit.
"""

from __future__ import annotations

import random

import highspy
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tables import table_of

from spatial_release.suppression import audit as audit_module
from spatial_release.suppression.audit import ComponentModel, Criterion, audit
from spatial_release.suppression.certificate import Certificate, verify
from spatial_release.suppression.costs import costs_for
from spatial_release.suppression.elimination import eliminate, model_columns, virtual_sums
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.protection import protect
from spatial_release.suppression.table import (
    PRIMARY,
    PUBLISHED,
    SECONDARY,
    UNION,
    Relation,
    Table,
    cross_classified_table,
)

P, S, U = PRIMARY, SECONDARY, PUBLISHED


def grid_table(counts: np.ndarray, k: int, zeros_published: bool) -> Table:
    """A rows x hours table with a space hierarchy (cells -> 2 districts -> total) and hours -> day."""
    n_cells, n_hours = counts.shape
    space_parent = {f"c{i}": f"d{i % 2}" for i in range(n_cells)} | {"d0": "T", "d1": "T"}
    time_parent = {f"h{j}": "day" for j in range(n_hours)}
    space_level = {f"c{i}": "cell" for i in range(n_cells)} | {"d0": "district", "d1": "district", "T": "total"}
    time_level = {f"h{j}": "hour" for j in range(n_hours)} | {"day": "day"}
    leaf = {(f"c{i}", f"h{j}"): int(counts[i, j]) for i in range(n_cells) for j in range(n_hours) if counts[i, j] > 0}
    return cross_classified_table(leaf, space_parent, time_parent, space_level, time_level, k, zeros_published)


DEPTH = {f"{s}x{t}": a + b for s, a in (("cell", 0), ("district", 1), ("total", 2)) for t, b in (("hour", 0), ("day", 1))}


def exact_primaries(table: Table, k: int) -> list[int]:
    """Primaries the LP audit pins to one value (lo == up): exact disclosure."""
    result = audit(table, k, optimal_bounds=True, workers=1)
    assert not result.errors
    return [i.node for i in result.intervals if i.lo == i.up]


def pinned(table: Table, group: list[int]) -> bool:
    """Is the sum of `group` pinned to one value by the published figures? (LP min == max, HiGHS on every
    withheld figure; independent of the elimination.)"""
    withheld = [n for n in range(len(table)) if table.status[n] != PUBLISHED]
    model = ComponentModel(table, withheld, table.relations_of(), {})
    cols = np.array([model.column[n] for n in group], dtype=np.int32)
    model.highs.changeColsCost(len(cols), cols, np.ones(len(cols)))
    bounds = []
    for sense in (highspy.ObjSense.kMinimize, highspy.ObjSense.kMaximize):
        model.highs.changeObjectiveSense(sense)
        model.highs.run()
        status = model.highs.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            return False  # unbounded: not pinned
        bounds.append(model.highs.getInfo().objective_function_value)
    return abs(bounds[1] - bounds[0]) < 1e-6


def stage1(table: Table, k: int, reasons: dict | None = None) -> int:
    costs = costs_for(table, DEPTH)
    return eliminate(table, k, costs, lambda n: (table.level[n], table.area[n], table.bucket[n]), reasons)


SMALL = [
    np.array([[2, 9, 7], [8, 1, 6], [5, 6, 3], [7, 4, 9]]),
    np.array([[1, 1, 0], [9, 8, 7], [6, 0, 2], [7, 6, 5], [3, 12, 4]]),
    np.array([[3, 8, 8, 9], [8, 9, 7, 1], [9, 9, 2, 8], [7, 8, 9, 8]]),
]


@pytest.mark.parametrize("counts", SMALL)
def test_elimination_leaves_no_primary_exactly_recoverable(counts):
    k = 5
    table = grid_table(counts, k, zeros_published=True)  # zeros known to everybody: no free complements
    assert exact_primaries(grid_table(counts, k, zeros_published=True), k)  # primaries alone: exact
    reasons: dict[int, list[int]] = {}
    withheld = stage1(table, k, reasons)
    assert withheld == len(table.secondaries()) > 0
    assert exact_primaries(table, k) == []
    # negative control: every secondary of the elimination was necessary when chosen, and only more was
    # published after, so publishing any one back pins down one of the primaries it was withheld for
    for secondary in table.secondaries():
        table.status[secondary] = PUBLISHED
        disclosed = pinned(table, reasons[secondary])  # one primary, or a group whose sum is below k
        table.status[secondary] = SECONDARY
        assert disclosed, table.key(secondary)
    assert not any(pinned(table, group) for group in virtual_sums(table, k))


def test_two_primaries_below_k_alone_in_a_relation_get_a_complement():
    nodes = {"T": (23, U), "a": (2, P), "b": (1, P), "c": (20, U)}
    table = table_of(nodes, [("T", ["a", "b", "c"])])
    assert virtual_sums(table, 5) == [[1, 2]]
    assert stage1(table, 5) == 1  # the sum 3 < k would be published implicitly: one more figure goes
    assert table.status[table.index[("x", "c", 0)]] == S  # c (cheaper than the total)
    assert table.secondaries() == [table.index[("x", "c", 0)]]
    # negative control: when the sum reaches k the pair may protect each other, nothing more is withheld
    again = table_of(nodes, [("T", ["a", "b", "c"])])
    assert virtual_sums(again, 3) == [] and stage1(again, 3) == 0
    # and the final pattern of protect passes the audit that would have caught the sum
    final = table_of(nodes, [("T", ["a", "b", "c"])])
    protected = protect(final, 5, {}, ProtectionMethod(prune_tries=0)).audit
    assert protected is not None and protected.passed and audit(final, 5).passed


def test_model_columns_are_sums_of_non_empty_inner_figures():
    table = grid_table(np.array([[2, 0], [3, 4]]), 5, zeros_published=False)
    columns = model_columns(table)
    total = table.index[("totalxday", "T", "day")]
    assert sorted(columns[total]) == sorted(
        table.index[("cellxhour", c, h)] for c, h in (("c0", "h0"), ("c1", "h0"), ("c1", "h1"))
    )
    assert columns[table.index[("cellxhour", "c0", "h1")]] == {}  # empty: known to hold nothing


def random_counts(seed: int, cells: int = 6, hours: int = 4) -> np.ndarray:
    rng = random.Random(seed)
    return np.array([[rng.choice([0, 0, 1, 2, 3, 4, 6, 8, 11, 15]) for _ in range(hours)] for _ in range(cells)])


def test_same_input_gives_the_same_pattern(monkeypatch):
    patterns = []
    for workers in ("1", "2", "1"):
        monkeypatch.setattr(audit_module, "PARALLEL_MIN_NODES", 0)  # small tables use the pool too
        monkeypatch.setenv("SPATIAL_RELEASE_AUDIT_WORKERS", workers)
        table = grid_table(random_counts(4, cells=10, hours=5), 5, zeros_published=False)
        log = protect(table, 5, DEPTH, ProtectionMethod())
        assert log.audit is not None and log.audit.passed
        patterns.append(list(table.status))
    assert patterns[0] == patterns[1] == patterns[2]
    assert patterns[0].count(S) > 0


def test_union_relations_are_protected_by_the_sweep():
    # visitors: max(children) <= T <= sum(children); the elimination ignores UNION relations
    nodes = {"T": (3, P), "a": (2, U), "b": (1, U), "c": (1, U)}  # 3 visitors over the day, 2 + 1 + 1 per hour
    table = table_of(nodes, [("T", ["a", "b", "c"])], kind=UNION)
    assert not audit(table, 5).passed  # the primary alone is not protected: 2 <= T <= 4 < k
    log = protect(table, 5, {}, ProtectionMethod(prune_tries=0))
    assert log.audit is not None and log.audit.passed and audit(table, 5, optimal_bounds=True).passed
    assert table.secondaries()
    # mixed: an EQ hierarchy whose parents are also in a UNION relation
    mixed = table_of(
        {"T": (30, U), "A": (14, U), "B": (20, U), "a1": (3, P), "a2": (11, U), "b1": (9, U), "b2": (11, U)},
        [("A", ["a1", "a2"]), ("B", ["b1", "b2"])],
    )
    mixed.relations.append(
        Relation(UNION, mixed.index[("x", "T", 0)], (mixed.index[("x", "A", 0)], mixed.index[("x", "B", 0)]))
    )
    log = protect(mixed, 5, {}, ProtectionMethod())
    assert log.audit is not None and log.audit.passed and audit(mixed, 5, optimal_bounds=True).passed


def test_costs_are_the_callers_choice():
    table = grid_table(np.array([[2, 0], [3, 4]]), 5, zeros_published=False)
    cells = costs_for(table, DEPTH, "cells")
    assert set(cells) == {0.0, 1.0} and cells[table.index[("cellxhour", "c0", "h1")]] == 0.0
    assert costs_for(table, DEPTH, lambda t, n: 2.0 * t.value[n]) == [2.0 * v for v in table.value]
    with pytest.raises(ValueError, match="unknown cost"):
        costs_for(table, DEPTH, "free")
    with pytest.raises(ValueError, match="cost weights"):
        costs_for(table, DEPTH, [1.0])
    with pytest.raises(ValueError, match="unknown method"):
        ProtectionMethod(stage1="optimal")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    k=st.integers(3, 6),
    cost=st.sampled_from(["unit_value", "cells"]),
    prune=st.booleans(),
    compat=st.booleans(),
)
def test_final_pattern_passes_an_independent_audit(seed, k, cost, prune, compat):
    counts = random_counts(seed)
    table = grid_table(counts, k, zeros_published=False)
    criterion = Criterion(k, 10) if compat else None
    log = protect(table, k, DEPTH, ProtectionMethod(cost=cost, prune_tries=None if prune else 0), criterion=criterion)
    assert log.audit is not None and log.audit.passed
    fresh = grid_table(counts, k, zeros_published=False)  # the pattern on a table built again
    fresh.status = list(table.status)
    assert audit(fresh, k, optimal_bounds=True, criterion=criterion, workers=1).passed
    # the audit of record (after pruning: the intervals and points the pruning pass kept up to date) covers
    # every primary of the final pattern once, and its witness points certify every component of it
    assert sorted(i.node for i in log.audit.intervals) == fresh.primaries()
    inputs = {"counts": "x"}
    verification = verify(fresh, Certificate.build(table, log.audit, inputs), inputs, criterion or Criterion(k))
    assert not verification.errors and not verification.unverified
