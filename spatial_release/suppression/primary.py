"""The protected table (what is published and what is withheld) and the structural-zero rows.

A (cell, bucket) or margin is withheld as a primary when it holds fewer than k units (`rules.below_k`;
the boundary is inclusive: n == k is published), and further figures are withheld as secondaries so that
no primary can be recovered (`release_system.protect_release`). Withheld keys are simply absent from the
published tables (no null, no flag). Structural zeros are published as 0 where they hold no unit (where
they hold units the zeros list is wrong, and the structural_zeros_hold check blocks the release).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pandas as pd


@dataclass(frozen=True)
class ProtectedTable:
    cells: pd.DataFrame  # published: cell_id, bucket_start, n  (includes structural zeros as n = 0)
    margins: pd.DataFrame  # published: level, area_id, bucket_start, n
    withheld_cells: pd.DataFrame  # internal only: cell_id, bucket_start, n, reason
    withheld_margins: pd.DataFrame  # internal only: level, area_id, bucket_start, n, reason
    structural_zero_conflicts: int  # listed (cell, bucket) keys that did hold units

    def summary(self, cell_counts: pd.DataFrame) -> dict:
        published_nonzero = self.cells[self.cells["n"] > 0]
        total_units = int(cell_counts["n"].sum())
        withheld_units = int(self.withheld_cells["n"].sum())
        return {
            "groups": int(len(cell_counts)),
            "smallest_count_before": int(cell_counts["n"].min()) if len(cell_counts) else None,
            "smallest_published_count": int(published_nonzero["n"].min()) if len(published_nonzero) else None,
            "published_cells": int(len(published_nonzero)),
            "structural_zero_cells_published": int((self.cells["n"] == 0).sum()),
            "structural_zero_conflicts": self.structural_zero_conflicts,
            "primary_cells": int((self.withheld_cells["reason"] == "primary").sum()),
            "secondary_cells": int((self.withheld_cells["reason"] == "secondary").sum()),
            "published_margins": int(len(self.margins)),
            "withheld_margins": int(len(self.withheld_margins)),
            "unit_counts_withheld": withheld_units,
            "unit_counts_total": total_units,
            "share_withheld": withheld_units / total_units if total_units else 0.0,
        }


def structural_zero_rows(zeros: Iterable[str], buckets: Iterable[datetime], occupied: pd.DataFrame) -> pd.DataFrame:
    """(cell_id, bucket_start, 0) for every listed cell and bucket where the cell holds no unit."""
    grid = pd.MultiIndex.from_product([sorted(zeros), list(buckets)], names=["cell_id", "bucket_start"])
    rows = grid.to_frame(index=False)
    if rows.empty:
        return rows.assign(n=pd.Series(dtype="int64"))
    rows["bucket_start"] = pd.to_datetime(rows["bucket_start"], utc=True)
    taken = pd.MultiIndex.from_frame(occupied[["cell_id", "bucket_start"]])
    free = ~pd.MultiIndex.from_frame(rows).isin(taken)
    return rows[free].assign(n=0).reset_index(drop=True)
