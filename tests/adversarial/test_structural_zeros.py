"""Issue 9, finding 4: a person inside a listed structural-zero cell.

The zeros list is public and a listed cell that holds no unit is published as 0 in every bucket. So when
one unit sits in a listed cell in one bucket, a suppressor that treats the cell as an ordinary small cell
withholds it there and publishes 0 in the other buckets: the gap itself says "at least one unit was here".
The audit must model that (an absent listed zero has lower bound 1), and the release must be blocked
anyway because the zeros list contradicts the data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import CELL_A, CELL_C, CELL_D, SIZE, cell_id, fixture_pings, lonlat_in, policy_dict, write_policy
from spatial_release import cli
from spatial_release.suppression.audit import audit
from spatial_release.suppression.release_system import Structure, audit_published, protect_release
from spatial_release.suppression.table import LEAF, TOTAL, grid_chain

K = 3
ZERO = "1000mE0N0"  # listed structural zero: a lake
NEIGHBOURS = {"1000mE1000N0": 5, "1000mE0N1000": 6, "1000mE1000N1000": 7}  # same 2 km parent
PARENT = "2000mE0N0"
BUCKETS = [pd.Timestamp(f"2018-01-0{d}T05:00:00Z") for d in (1, 2, 3)]
INTRUDED = BUCKETS[1]


def _true_counts(intruders: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    cells = [(cell, bucket, n) for bucket in BUCKETS for cell, n in NEIGHBOURS.items()]
    if intruders:
        cells.append((ZERO, INTRUDED, intruders))
    cells = pd.DataFrame(cells, columns=["cell_id", "bucket_start", "n"])
    per_bucket = cells.groupby("bucket_start")["n"].sum()
    margins = pd.DataFrame([(level, area, bucket, int(n)) for bucket, n in per_bucket.items()
                            for level, area in (("grid_2000m", PARENT), (TOTAL, TOTAL))],
                           columns=["level", "area_id", "bucket_start", "n"])
    return cells, margins


STRUCTURE = Structure((grid_chain(SIZE, [2 * SIZE], ["grid_2000m"]),))


def test_absent_listed_zero_is_caught_by_the_audit_of_a_naive_release():
    """One unit in the lake in one bucket. The suppressor (unaware of the zeros list's meaning) protects
    it as an ordinary primary with lower bound 0 and publishes the lake as 0 in the other buckets. The
    old modelling passes that release; the audit of what the outsider knows fails it."""
    true_cells, true_margins = _true_counts(intruders=1)
    protected, log, _ = protect_release(true_cells, true_margins, STRUCTURE, K, "presence", {ZERO}, BUCKETS)
    lake = protected.cells[protected.cells["cell_id"] == ZERO]
    assert sorted(lake["bucket_start"]) == [BUCKETS[0], BUCKETS[2]] and (lake["n"] == 0).all()
    assert log.audit.passed  # the naive suppressor believed the lake protected

    result, table = audit_published(true_cells, true_margins, protected.cells, protected.margins, "n",
                                    STRUCTURE, K, "presence", {ZERO}, BUCKETS)
    node = table.index[(LEAF, ZERO, INTRUDED)]
    assert table.floor == {node: 1}  # only the absent listed zero is known to hold a unit
    [failure] = result.failures()
    assert failure.node == node and failure.lo >= 1 and failure.failing in ("lower", "both")

    table.floor.clear()  # the old modelling: an absent cell may be empty
    assert audit(table, K).passed


def test_a_listed_zero_published_as_zero_stays_a_known_zero():
    """Without the intruder the lake is published as 0 in every bucket and nothing is withheld near it:
    the audit has no floor to add and the release passes."""
    true_cells, true_margins = _true_counts(intruders=0)
    protected, _, _ = protect_release(true_cells, true_margins, STRUCTURE, K, "presence", {ZERO}, BUCKETS)
    assert len(protected.cells[(protected.cells["cell_id"] == ZERO) & (protected.cells["n"] == 0)]) == 3
    result, table = audit_published(true_cells, true_margins, protected.cells, protected.margins, "n",
                                    STRUCTURE, K, "presence", {ZERO}, BUCKETS)
    assert result.passed and table.floor == {}
