"""Structural zeros: cells empty by definition (water, parkland), listed in a public file named by the policy.

The file is a CSV with a `cell_id` column (or a plain list, one id per line). Such cells are published as 0
in every bucket so that maps show them as empty rather than unknown. Because the list is public, a listed
cell missing from a release tells an outsider it holds at least one unit (the audit models it so), and a
listed cell that holds units means the list is wrong: the `structural_zeros_hold` check blocks the release.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from spatial_release.errors import UserError


class ZerosFileError(UserError, ValueError):
    """The structural-zeros list cannot be read or is not such a list."""


def read_structural_zeros(path: Path) -> frozenset[str]:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ZerosFileError(f"{path}: cannot read the structural-zeros list: {exc}") from None
    if "cell_id" not in frame.columns:
        raise ZerosFileError(f"{path}: expected a 'cell_id' column, found {list(frame.columns)}")
    ids = frame["cell_id"].str.strip()
    empty = ids.index[ids == ""].tolist()
    if empty:
        raise ZerosFileError(f"{path}: empty cell_id on data row(s) {[i + 1 for i in empty[:5]]}")
    return frozenset(ids)
