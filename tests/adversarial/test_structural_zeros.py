"""A person inside a listed structural-zero cell.

The zeros list is public and a listed cell that holds no unit is published as 0 in every bucket. So when
one unit sits in a listed cell in one bucket, a suppressor that treats the cell as an ordinary small cell
withholds it there and publishes 0 in the other buckets: the gap itself says "at least one unit was here".
The audit must model that (an absent listed zero has lower bound 1), and the release must be blocked
anyway because the zeros list contradicts the data.
"""

from __future__ import annotations

from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
from support.fixture import DAY, SIZE, cell_id, fixture_pings, lonlat_in, policy_dict, write_policy
from support.releases import published_folder, release

from spatial_release.levels import LEAF, TOTAL
from spatial_release.suppression.audit import audit
from spatial_release.suppression.release_system import DisclosureSpec, Structure, audit_published, protect_release
from spatial_release.suppression.table import grid_chain

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
    margins = pd.DataFrame(
        [
            (level, area, bucket, int(n))
            for bucket, n in per_bucket.items()
            for level, area in (("grid_2000m", PARENT), (TOTAL, TOTAL))
        ],
        columns=["level", "area_id", "bucket_start", "n"],
    )
    return cells, margins


STRUCTURE = Structure((grid_chain(SIZE, [2 * SIZE], ["grid_2000m"]),))
SPEC = DisclosureSpec(STRUCTURE, K, "presence", frozenset({ZERO}), tuple(BUCKETS))


def test_absent_listed_zero_is_caught_by_the_audit_of_a_naive_release():
    """One unit in the lake in one bucket. The suppressor (unaware of the zeros list's meaning) protects
    it as an ordinary primary with lower bound 0 and publishes the lake as 0 in the other buckets. The
    old modelling passes that release; the audit of what the outsider knows fails it."""
    true_cells, true_margins = _true_counts(intruders=1)
    protected, log, _ = protect_release(true_cells, true_margins, SPEC)
    lake = protected.cells[protected.cells["cell_id"] == ZERO]
    assert sorted(lake["bucket_start"]) == [BUCKETS[0], BUCKETS[2]] and (lake["n"] == 0).all()
    assert log.audit is not None
    assert log.audit.passed  # the naive suppressor believed the lake protected

    result, table = audit_published(true_cells, true_margins, protected.cells, protected.margins, SPEC)
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
    protected, _, _ = protect_release(true_cells, true_margins, SPEC)
    assert len(protected.cells[(protected.cells["cell_id"] == ZERO) & (protected.cells["n"] == 0)]) == 3
    result, table = audit_published(true_cells, true_margins, protected.cells, protected.margins, SPEC)
    assert result.passed and table.floor == {}


# ---- end to end through the command line ----------------------------------------------------------

LAKE = (581_000, 4_508_000)  # a 1 km cell of the fixture's 2 km parent P1 (beside A and E), listed as a zero
DAY_BUCKET = "2018-01-10T05:00:00+00:00"  # the fixture's day, midnight in New York


def _release_with_lake(tmp_path: Path, swimmer: bool) -> tuple[int, Path]:
    """The fixture traces (plus, with `swimmer`, one device with a few pings in the lake on the fixture's
    day) released by the CLI under a policy whose public zeros list names the lake."""
    frame = fixture_pings()
    if swimmer:
        lon, lat = lonlat_in(LAKE, 3, np.random.default_rng(11))
        rows = [
            {
                "device": "swimmer",
                "when": f"{DAY} 1{i}:00:00",
                "lon": round(float(x), 7),
                "lat": round(float(y), 7),
                "gender": "f",
            }
            for i, (x, y) in enumerate(zip(lon, lat))
        ]
        frame = pd.concat([frame, pd.DataFrame(rows)], ignore_index=True)
    traces = tmp_path / "traces.csv"
    frame.to_csv(traces, index=False)
    (tmp_path / "zeros.csv").write_text(f"cell_id\n{cell_id(LAKE)}\n")
    policy = write_policy(tmp_path, policy_dict(str(traces), suppression={"budget": 0.9, "zeros": "zeros.csv"}))
    return release(policy, tmp_path, traces=[traces]), published_folder(tmp_path)


def _ledger_mentions(ledger: Path, period: str) -> bool:
    return ledger.is_dir() and any(period in p.read_text(errors="replace") for p in ledger.rglob("*") if p.is_file())


@pytest.mark.slow
def test_cli_blocks_a_person_inside_a_listed_zero(tmp_path, capsys):
    code, folder = _release_with_lake(tmp_path, swimmer=True)
    err = capsys.readouterr().err
    assert code == 1, err
    assert "BLOCKED by check 'structural_zeros_hold'" in err
    assert (
        f"{cell_id(LAKE)} at {DAY_BUCKET} is listed as a structural zero but holds at least one unit; "
        "the zeros list is wrong"
    ) in err
    assert "swimmer" not in err  # cell and bucket, never the unit
    assert not folder.exists() and not _ledger_mentions(tmp_path / "ledger", "2018-Q1")


@pytest.mark.slow
def test_cli_publishes_a_true_listed_zero_as_zero_in_every_bucket(tmp_path, capsys):
    """The control: the same policy without the swimmer publishes, the lake 0 in each of the 90 days."""
    code, folder = _release_with_lake(tmp_path, swimmer=False)
    assert code == 0, capsys.readouterr().err
    cells = gpd.read_parquet(folder / "cells.parquet")
    lake = cells[cells["cell_id"] == cell_id(LAKE)]
    assert len(lake) == 90 and (lake["n_devices"] == 0).all()
