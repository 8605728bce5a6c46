"""Array helpers the domain packages share (no Dagster here)."""

from __future__ import annotations

import numpy as np


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """np.unique(values) for a 1-d numeric array, by a sort and a mask. NumPy 2.4's np.unique without return
    arrays goes through a hash table, many times slower than the sort on millions of distinct int64 codes
    (bench/RESULTS.md)."""
    ordered = np.sort(np.asarray(values).ravel())
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
