"""Protection block by block (`suppression.blocks`): a table of independent blocks (one per bucket
without a time ladder) is protected chunk by chunk, in worker processes, with the pattern the whole table
gets; every pattern passes an independent audit; the result is the same with 1 and 2 workers; a relation
that links two blocks makes them one; a failure in a worker's chunk is an error in the caller."""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from support.golden_pattern import GOLDEN, STRUCTURE, ZEROS, K, pattern, render, true_counts
from support.tables import INPUTS, assert_same_pattern_and_certificate, copy_table, one_row_per_bucket

from spatial_release.suppression import blocks, complementary
from spatial_release.suppression.audit import Criterion, audit
from spatial_release.suppression.certificate import Certificate, verify
from spatial_release.suppression.complementary import SuppressionError, protect_whole
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.protection import protect
from spatial_release.suppression.release_system import DisclosureSpec, system_for
from spatial_release.suppression.table import EQ, PRIMARY, PUBLISHED, Relation, Table, TablePack


@pytest.fixture
def split_everything(monkeypatch):
    """Blocks for every table, one block to a chunk: the most splitting the module can do."""
    monkeypatch.setattr(blocks, "BLOCKS_MIN_NODES", 0)
    monkeypatch.setattr(blocks, "CHUNK_NODES", 1)


def spied_chunks(monkeypatch) -> list:
    """How many chunks each call of `protect_blocks` actually protected (what `_chunks` gave it)."""
    calls: list = []
    real = blocks._chunks

    def spy(table, found):
        chunks = real(table, found)
        calls.append(len(chunks))
        return chunks

    monkeypatch.setattr(blocks, "_chunks", spy)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_blocks_give_the_pinned_golden_pattern(split_everything, monkeypatch, workers):
    """The golden table (three weekly buckets: three blocks) split into one chunk per block gives, under both
    measures, exactly the pattern pinned in tests/golden/suppression_pattern.csv for the whole table."""
    monkeypatch.setenv("SPATIAL_RELEASE_AUDIT_WORKERS", workers)
    chunks = spied_chunks(monkeypatch)
    text = render([*pattern("presence"), *pattern("visitors")])  # `pattern` also runs an independent audit
    assert chunks == [3, 3], "each measure's table was protected as three chunks"
    assert text == GOLDEN.read_text()


def bigger_counts(buckets: int, seed: int, measure: str = "presence") -> tuple[pd.DataFrame, pd.DataFrame, DisclosureSpec]:
    """The golden fixture's grid over `buckets` hourly buckets, with other random counts."""
    hours = [pd.Timestamp("2018-01-01T05:00:00Z") + pd.Timedelta(hours=h) for h in range(buckets)]
    leaves, margins = true_counts(measure, seed=seed, buckets=hours)
    return leaves, margins, DisclosureSpec(STRUCTURE, K, measure, frozenset(ZEROS), tuple(hours))


# the release method (elimination, pruning) and the constraint sweep without pruning, under EQ (presence) and
# UNION (visitors) relations; seeds 1 and 4 under the sweep are tables on which the split differs from the
# whole table if the sweep takes node 0 for "none found"
RELEASE, SWEEP = ProtectionMethod.release(), ProtectionMethod.sweep()
CASES = [
    ("presence", RELEASE, 1),
    ("presence", RELEASE, 2),
    ("visitors", RELEASE, 3),
    ("presence", SWEEP, 1),
    ("presence", SWEEP, 4),
    ("visitors", SWEEP, 1),
]


@pytest.mark.slow
@pytest.mark.parametrize("measure, method, seed", CASES)
def test_blocks_match_the_whole_table_and_pass_an_independent_audit(split_everything, monkeypatch, measure, method, seed):
    leaves, margins, spec = bigger_counts(buckets=4, seed=seed, measure=measure)
    level_depth = spec.structure.level_depth()
    whole = system_for(leaves, margins, spec)
    split = system_for(leaves, margins, spec)
    chunks = spied_chunks(monkeypatch)
    log_whole = protect_whole(whole, K, level_depth, replace(method, workers=1))
    log_split = protect(split, K, level_depth, replace(method, workers=2))
    assert chunks == [4]
    assert split.status == whole.status
    assert split.secondaries() or measure == "visitors", "the fixture needs complementary suppression"
    assert log_split.audit is not None and log_whole.audit is not None
    assert [(i.node, i.passed) for i in log_split.audit.intervals] == [(i.node, i.passed) for i in log_whole.audit.intervals]
    assert [i.node for i in log_split.audit.intervals] == split.primaries()
    assert log_split.audit.workers == 2
    # re-derived, not taken from the log: the attacker's optimal bounds on the whole table, from scratch
    independent = audit(split, K, optimal_bounds=True, workers=1)
    assert independent.passed and len(independent.intervals) == len(split.primaries())
    # the blocks' witness points, in the whole table's numbering, certify every component without an LP
    verification = verify(split, Certificate.build(split, log_split.audit, INPUTS), INPUTS, Criterion(K))
    assert not verification.errors and verification.rejected is None and not verification.unverified


def test_the_sweep_takes_the_first_figure_when_it_is_the_cheapest(split_everything):
    """Negative control for the review's finding: node 0 is a figure, not "none found"."""
    whole = one_row_per_bucket()
    protect_whole(whole, K, {"cell": 0, "row": 1}, ProtectionMethod.sweep(workers=1))
    assert [(whole.area[n], whole.bucket[n]) for n in whole.secondaries()] == [("a", 0), ("a", 1)]
    split = one_row_per_bucket()
    protect(split, K, {"cell": 0, "row": 1}, ProtectionMethod.sweep(workers=1))
    assert split.status == whole.status


def test_a_contradiction_in_a_block_with_nothing_withheld_is_still_an_error(split_everything):
    """A fully published bucket whose row does not add up goes to no chunk (nothing to protect there); the
    whole table's audit reports the contradiction, and so must the split."""
    table = one_row_per_bucket(buckets=3)
    b = table.index[("cell", "b", 2)]
    table.status[b] = PUBLISHED  # bucket 2: nothing withheld
    table.value[b] = 3  # 5 + 3 + 6 != 13
    with pytest.raises(SuppressionError, match="contradicts its children"):
        protect_whole(copy_table(table), K, {}, ProtectionMethod(workers=1))
    with pytest.raises(SuppressionError, match="contradicts its children"):
        protect(table, K, {}, ProtectionMethod(workers=1))


def test_one_and_two_workers_give_the_same_pattern_and_certificate(split_everything, monkeypatch):
    leaves, margins, spec = bigger_counts(buckets=4, seed=3)
    protected = []
    for workers in (1, 2):
        table = system_for(leaves, margins, spec)
        log = protect(table, K, spec.structure.level_depth(), ProtectionMethod(workers=workers))
        assert log.audit is not None and log.audit.workers == workers
        protected.append((table, log))
    assert_same_pattern_and_certificate(protected)


def two_rectangles(linked: bool) -> Table:
    """Two 2 x 2 tables (cells, row and column totals) in two buckets, each with a primary; `linked` adds a
    relation across the buckets (as a time ladder's would), which makes the two one block."""
    table = Table()
    nodes = {}
    for bucket in (0, 1):
        cells = {(0, 0): 2, (0, 1): 9, (1, 0): 8, (1, 1): 7}
        for (i, j), v in cells.items():
            nodes[bucket, i, j] = table.add("cell", f"c{i}{j}", bucket, v, PRIMARY if v < K else PUBLISHED)
        for i in (0, 1):
            row = table.add("row", f"r{i}", bucket, cells[i, 0] + cells[i, 1], PUBLISHED)
            table.relations.append(Relation(EQ, row, (nodes[bucket, i, 0], nodes[bucket, i, 1])))
        for j in (0, 1):
            col = table.add("col", f"k{j}", bucket, cells[0, j] + cells[1, j], PUBLISHED)
            table.relations.append(Relation(EQ, col, (nodes[bucket, 0, j], nodes[bucket, 1, j])))
    table.add("lone", "x", 0, 3, PUBLISHED)  # in no relation: a block of its own, with nothing to protect
    if linked:
        both = table.add("span", "c00", "0-1", 2 + 9 + 2, PUBLISHED)
        table.relations.append(Relation(EQ, both, (nodes[0, 0, 0], nodes[0, 0, 1], nodes[1, 0, 0])))
    return table


def test_blocks_are_the_groups_of_figures_linked_by_relations():
    apart = two_rectangles(linked=False)
    found = [b.tolist() for b in blocks.independent_blocks(apart)]
    assert len(found) == 3 and sorted(len(b) for b in found) == [1, 8, 8]
    # default chunk size: both rectangles in one chunk, the lone figure (nothing withheld) in none
    chunks = blocks._chunks(apart, blocks.independent_blocks(apart))
    assert [(len(nodes), len(relations)) for nodes, relations in chunks] == [(16, 8)]
    linked = two_rectangles(linked=True)
    assert sorted(len(b) for b in blocks.independent_blocks(linked)) == [1, 17]  # negative control


def test_a_linked_table_is_protected_whole(split_everything, monkeypatch):
    """A relation across two buckets joins them: one chunk, so `protect` falls back to the whole table."""
    whole_calls = []
    real = complementary.protect_whole

    def spy(table, *args, **kwargs):
        whole_calls.append(len(table))
        return real(table, *args, **kwargs)

    monkeypatch.setattr(blocks, "protect_whole", spy)
    table = two_rectangles(linked=True)
    protect(table, K, {}, ProtectionMethod(workers=1))
    assert whole_calls == [len(table)]
    assert audit(table, K, optimal_bounds=True, workers=1).passed
    whole_calls.clear()
    apart = two_rectangles(linked=False)
    protect(apart, K, {}, ProtectionMethod(workers=1))
    assert whole_calls == [8, 8], "two chunks of one rectangle each; the lone figure has nothing to protect"
    assert apart.status[-1] == PUBLISHED
    assert audit(apart, K, optimal_bounds=True, workers=1).passed


def test_a_chunk_that_cannot_be_protected_stops_the_caller(split_everything):
    """A published row total that contradicts its cells in one bucket: that chunk's audit finds the system
    infeasible in a worker, and the caller gets the SuppressionError, never a pattern reported as protected."""
    table = two_rectangles(linked=False)
    row = table.index[("row", "r0", 1)]
    table.value[row] += 1
    with pytest.raises(SuppressionError, match="contradict the relations"):
        protect(table, K, {}, ProtectionMethod(workers=2))


def _same_table(got: Table, want: Table) -> None:
    """Equal field by field, and in the same orders (the algorithms follow node, relation and floor order)."""
    assert got == want
    assert list(got.index.items()) == list(want.index.items())
    assert list(got.floor.items()) == list(want.floor.items())
    assert [type(b) for b in got.bucket] == [type(b) for b in want.bucket]


@pytest.mark.parametrize("measure", ["presence", "visitors"])
def test_packed_sub_tables_unpickle_as_the_sub_tables_themselves(monkeypatch, measure):
    """What a worker receives (`TablePack.subtable`, pickled) is `Table.subtable` of the same figures and
    relations, and a whole table survives pickling unchanged: rests, UNION relations, floors and all."""
    leaves, margins, spec = bigger_counts(buckets=3, seed=2, measure=measure)
    table = system_for(leaves, margins, spec)
    rests = [r.rest for r in table.relations if r.rest is not None]
    assert rests and any(r.rest_children is None for r in table.relations), "the fixture needs both kinds of rest"
    table.floor.update({rests[-1]: 0, 3: 1, 1: 2})  # a-priori floors, deliberately out of node order
    _same_table(pickle.loads(pickle.dumps(table)), table)
    pack = TablePack.of(table)
    found = blocks._chunks(table, blocks.independent_blocks(table))
    assert len(found) == 1 and len(blocks.independent_blocks(table)) == 3
    for nodes in blocks.independent_blocks(table):
        ids = np.array([r for r, rel in enumerate(table.relations) if rel.parent in set(nodes.tolist())])
        packed = pickle.loads(pickle.dumps(pack.subtable(nodes, ids)))
        _same_table(packed, table.subtable(nodes.tolist(), ids.tolist()))
        _same_table(pack.subtable(nodes, ids).unpack(), packed)


def test_a_packed_sub_table_missing_a_member_of_its_relations_is_refused():
    table = one_row_per_bucket(2)
    pack = TablePack.of(table)
    with pytest.raises(ValueError, match="member outside"):
        pack.subtable(np.array([0, 1, 3]), np.array([0]))  # node 2 (d) of relation 0 left out
    _same_table(pickle.loads(pickle.dumps(pack.subtable(np.arange(4), np.array([0])))), table.subtable([0, 1, 2, 3], [0]))
