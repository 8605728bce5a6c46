"""The golden suppression table (tests/test_golden_pattern.py pins its pattern): a 16 x 16 grid of 500 m cells
with 1 km and 2 km parents and the bucket total, three weekly buckets, k = 5, two structural-zero cells, its
counts under `presence` or `visitors`, and the pattern the release method withholds from it, as CSV rows."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pandas as pd

from spatial_release.levels import LEAF, TOTAL
from spatial_release.suppression.audit import audit
from spatial_release.suppression.release_system import DisclosureSpec, Structure, protect_release
from spatial_release.suppression.table import PUBLISHED, REST, grid_chain

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "suppression_pattern.csv"
K = 5
SIZE, PARENTS = 500, (1000, 2000)
PARENT_LEVELS = tuple(f"grid_{p}m" for p in PARENTS)
SIDE = 16  # cells per side: 256 cells, 64 1 km parents, 16 2 km parents
ORIGIN = (580_000, 4_504_000)
BUCKETS = [pd.Timestamp("2018-01-01T05:00:00Z") + pd.Timedelta(weeks=w) for w in range(3)]
ZEROS = (f"{SIZE}mE{ORIGIN[0]}N{ORIGIN[1]}", f"{SIZE}mE{ORIGIN[0] + SIZE}N{ORIGIN[1]}")  # a lake: never occupied
STRUCTURE = Structure((grid_chain(SIZE, list(PARENTS), list(PARENT_LEVELS)),))
FIELDS = ["measure", "level", "area_id", "bucket_start", "status"]


def _cell(ix: int, iy: int) -> str:
    return f"{SIZE}mE{ORIGIN[0] + ix * SIZE}N{ORIGIN[1] + iy * SIZE}"


def _parent(cell: str, size: int) -> str:
    east, north = (int(v) for v in cell.split("mE", 1)[1].split("N"))
    return f"{size}mE{east // size * size}N{north // size * size}"


def true_counts(
    measure: str, seed: int = 10, buckets: Sequence[pd.Timestamp] = tuple(BUCKETS)
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leaf counts skewed towards small values (about a third of the cells empty, many below k), and margins
    consistent with the measure: sums for `presence`; for `visitors` (distinct units over a parent's
    cells) a value between the largest child and the sum. `buckets`: the bucket starts (the three weeks unless
    given)."""
    rng = random.Random(seed)
    cells = []
    for bucket in buckets:
        for ix in range(SIDE):
            for iy in range(SIDE):
                cell = _cell(ix, iy)
                u = rng.random()
                n = 0 if u < 0.3 or cell in ZEROS else int(1 + 60 * ((u - 0.3) / 0.7) ** 2)
                if n:
                    cells.append((cell, bucket, n))
    leaves = pd.DataFrame(cells, columns=["cell_id", "bucket_start", "n"])
    margins = []
    children = leaves.rename(columns={"cell_id": "area_id"}).assign(level=LEAF)
    for size, level in [*zip(PARENTS, PARENT_LEVELS), (None, TOTAL)]:
        keyed = children.assign(parent=TOTAL if size is None else children["area_id"].map(partial(_parent, size=size)))
        grouped = keyed.groupby(["parent", "bucket_start"])["n"]
        if measure == "presence":
            n = grouped.sum()
        else:
            n = (grouped.max() + grouped.sum() + 1) // 2
        frame = n.rename("n").reset_index().rename(columns={"parent": "area_id"}).assign(level=level)
        margins.append(frame[["level", "area_id", "bucket_start", "n"]])
        children = frame
    return leaves, pd.concat(margins, ignore_index=True)


def pattern(measure: str) -> list[dict]:
    """Every withheld figure of the protected table, sorted, and the table it was withheld from."""
    leaves, margins = true_counts(measure)
    spec = DisclosureSpec(STRUCTURE, K, measure, frozenset(ZEROS), tuple(BUCKETS))
    _, log, table = protect_release(leaves, margins, spec)
    assert log.audit is not None and log.audit.passed
    assert audit(table, K).passed  # the pattern pinned below protects every primary
    rows = [
        {
            "measure": measure,
            "level": table.level[i],
            "area_id": table.area[i],
            "bucket_start": pd.Timestamp(table.bucket[i]).isoformat(),
            "status": table.status[i],
        }
        for i in range(len(table))
        if table.status[i] not in (PUBLISHED, REST)
    ]
    return sorted(rows, key=lambda r: tuple(r[f] for f in FIELDS))


def render(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
