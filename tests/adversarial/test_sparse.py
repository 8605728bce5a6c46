"""Sparse fine releases: a synthetic city of 300 persons at 250 m x 1 h, k = 5,
crashed protection with "cannot be protected: no published figure is connected to it" (exit 3, the
worker's traceback in the alert).

Root cause: the repair loop judged each failing primary on its interval from the start of the round. In
a bucket where nearly everything is below k, the repairs of the first failures of a round withheld every
published figure around the later ones (the 2 km and 8 km parents, the bucket total), so the later ones
found nothing left to withhold, on intervals that no longer held: with everything withheld a primary's
upper bound is unbounded. A refusal is now only raised when a round can withhold nothing for failures
audited on the current pattern, and it is a named `Blocked` refusal (exit 1) even when raised in a block
worker (the pool's `_RemoteTraceback` cause made it an internal error).

The tables are built from the pattern the reduced failing bucket showed: one 2 km square of five 1-cells
(5, the only publishable cell margin), a 1-cell square beside it in the same 8 km square and a 1-cell
square in another 8 km square; bucket total 7."""

from __future__ import annotations

import copy
from concurrent.futures.process import _RemoteTraceback

import pandas as pd
import pytest

from spatial_release.errors import Blocked, ExitCode, kind_of
from spatial_release.suppression import blocks
from spatial_release.suppression.audit import audit
from spatial_release.suppression.complementary import SuppressionError, protect_whole
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.protection import protect
from spatial_release.suppression.table import PUBLISHED, Relation, Table, build_table, grid_chain

K = 5
BUCKET = pd.Timestamp("2018-01-04T14:00Z")
CHAIN = grid_chain(250, [2000, 8000], ["grid_2000m", "grid_8000m"])
DEPTH = {"cell": 0, "grid_2000m": 1, "grid_8000m": 2, "total": 3}


def sparse_bucket(fives: int = 1, singles_inside: int = 1, singles_outside: int = 1, bucket=BUCKET) -> Table:
    """One hour of a sparse city: `fives` 2 km squares of five 1-cells each (5: published), `singles_inside`
    2 km squares of one 1-cell in the same 8 km square, `singles_outside` 1-cells in 8 km squares of their
    own; every cell, and every margin but the fives, the 8 km square holding them and the total, below k."""
    cells = [f"250mE{2000 * p + 250 * c}N0" for p in range(fives) for c in range(5)]
    cells += [f"250mE{2000 * s}N2000" for s in range(singles_inside)]
    cells += [f"250mE{8000 * (s + 1)}N0" for s in range(singles_outside)]
    leaves = pd.DataFrame({"area_id": cells, "bucket_start": bucket, "n": 1})
    rows = []
    for level, parent in (
        ("grid_2000m", CHAIN.parent_of[0]),
        ("grid_8000m", lambda a: CHAIN.parent_of[1](CHAIN.parent_of[0](a))),
    ):
        sums: dict[str, int] = {}
        for cell in cells:
            sums[parent(cell)] = sums.get(parent(cell), 0) + 1
        rows += [(level, area, bucket, n) for area, n in sorted(sums.items())]
    rows.append(("total", "total", bucket, len(cells)))
    margins = pd.DataFrame(rows, columns=["level", "area_id", "bucket_start", "n"])
    return build_table(leaves, margins, [CHAIN], K, "presence")


def joined(parts: list[Table]) -> Table:
    """One table of independent parts (hours of different buckets: disjoint keys), each renumbered after the
    ones before, with its relations and floors."""
    table = Table()
    for part in parts:
        offset = len(table)
        for i in range(len(part)):
            table.add(part.level[i], part.area[i], part.bucket[i], part.value[i], part.status[i])
        table.relations += [
            Relation(
                r.kind,
                r.parent + offset,
                tuple(c + offset for c in r.children),
                None if r.rest is None else r.rest + offset,
                r.rest_children,
                r.level,
            )
            for r in part.relations
        ]
        table.floor.update({node + offset: f for node, f in part.floor.items()})
    return table


def independent_audit(table: Table):
    """The attacker's optimal bounds on a fresh copy of the final pattern (no interval of the repair loop)."""
    fresh = copy.deepcopy(table)
    fresh._relations_of = None
    return audit(fresh, K, optimal_bounds=True, workers=1)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 2, 2), (3, 2, 1), (4, 1, 2)])
@pytest.mark.parametrize("method", ["release", "sweep"])
def test_a_sparse_bucket_is_protected_by_withholding(shape, method):
    """Each of these shapes raised "no published figure is connected to it" before the fix."""
    table = sparse_bucket(*shape)
    chosen = ProtectionMethod.release(workers=1) if method == "release" else ProtectionMethod.sweep(workers=1)
    log = protect_whole(table, K, DEPTH, chosen)
    assert log.audit is not None
    assert log.audit.passed
    result = independent_audit(table)
    assert result.passed, result.summary()
    assert result.intervals and all(i.up >= K and i.lo <= i.value - 1 for i in result.intervals)
    assert all(table.status[i] != PUBLISHED for i in range(len(table)) if 1 <= table.value[i] < K)


def test_many_sparse_hours_through_the_blocks(monkeypatch):
    """Several such hours, one block each, protected in two worker processes: no error, every primary passes."""
    monkeypatch.setattr(blocks, "BLOCKS_MIN_NODES", 0)
    monkeypatch.setattr(blocks, "CHUNK_NODES", 1)
    table = joined([sparse_bucket(1 + h % 3, 1 + h % 2, 1 + (h // 2) % 2, BUCKET + pd.Timedelta(hours=h)) for h in range(4)])
    log = protect(table, K, DEPTH, ProtectionMethod(workers=2))
    assert log.audit is not None
    assert log.audit.passed and independent_audit(table).passed


def pinned_table(bucket=BUCKET) -> Table:
    """A truly unprotectable primary: a 1-cell an outsider knows holds at least one unit (a listed structural
    zero found absent: `Table.floor`), so its lower bound is 1 = v whatever is withheld."""
    table = sparse_bucket(bucket=bucket)
    node = table.index[("cell", "250mE0N2000", bucket)]
    table.floor[node] = 1
    return table


def test_an_unprotectable_primary_is_a_named_refusal():
    table = pinned_table()
    with pytest.raises(SuppressionError) as raised:
        protect_whole(table, K, DEPTH, ProtectionMethod(workers=1))
    message = str(raised.value)
    assert isinstance(raised.value, Blocked) and kind_of(raised.value) == ExitCode.BLOCKED
    assert "cell 250mE0N2000 at 2018-01-04T14:00:00+00:00" in message and "lower bound" in message
    assert "no published figure is connected" not in message
    assert "{" not in message  # names the figure, not a dict of internals
    # everything linked to it was tried first: every other figure of its bucket is withheld
    assert all(status != PUBLISHED for status in table.status)


def test_a_refusal_in_a_block_worker_stays_a_named_refusal(monkeypatch):
    """In a worker process the pool chains a `_RemoteTraceback` as the cause; the command line reads a failed
    step's kind from its innermost cause, so the refusal must reach the caller without it (exit 1, not 3)."""
    monkeypatch.setattr(blocks, "BLOCKS_MIN_NODES", 0)
    monkeypatch.setattr(blocks, "CHUNK_NODES", 1)
    table = joined([sparse_bucket(bucket=BUCKET), pinned_table(BUCKET + pd.Timedelta(hours=1))])
    with pytest.raises(SuppressionError) as raised:
        protect(table, K, DEPTH, ProtectionMethod(workers=2))
    error = raised.value
    innermost: BaseException = raised.value
    while innermost.__cause__ is not None:
        innermost = innermost.__cause__
    assert not isinstance(innermost, _RemoteTraceback)
    assert kind_of(type(innermost).__name__) == ExitCode.BLOCKED
    assert "cell 250mE0N2000 at 2018-01-04T15:00:00+00:00" in str(error)
