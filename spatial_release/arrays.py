"""Array helpers the domain packages share (no Dagster here)."""

from __future__ import annotations

import numpy as np


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """np.unique(values) for a 1-d numeric array, by a sort and a mask. NumPy 2.4's np.unique without return
    arrays goes through a hash table, many times slower than the sort on millions of distinct int64 codes
    (bench/RESULTS.md).

    The codes of (unit, key) pairs come in long ascending runs: in unit order from the memberships, by bucket from a
    recovery. A merge sort of runs (numpy's stable sort of 64-bit integers) takes them in linear time or near it,
    where the default quicksort does not look: 40 M sorted codes 3.4 s -> 0.07 s, 39 M codes sorted per bucket
    3.1 s -> 1.05 s, random ones 3.6 s -> 3.3 s (bench/RESULTS.md). Other types keep the default, which is faster
    on them. The values are the same either way: equal integers are indistinguishable."""
    flat = np.asarray(values).ravel()
    ordered = np.sort(flat, kind="stable" if flat.dtype.kind in "iu" and flat.dtype.itemsize == 8 else None)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def distinct_names(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) for a 1-d array of names (zone names per key): the sorted
    distinct names and each value's place among them, by one hash of the values and a sort of the distinct
    ones only. np.unique sorts every value by Python comparisons, which took seconds on the millions of keys of
    a recovery. A missing name (None, NaN) goes np.unique's way, whatever that does with it."""
    import pandas as pd

    values = np.asarray(values).ravel()
    codes, uniques = pd.factorize(values)
    if len(codes) and codes.min() < 0:
        return np.unique(values, return_inverse=True)
    distinct = np.asarray(uniques, dtype=values.dtype)
    order = np.argsort(distinct, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return distinct[order], rank[codes]


def narrow_codes(codes: np.ndarray) -> np.ndarray:
    """Integer codes as int32 when every one fits (-1 included), else unchanged: codes held through a whole
    assessment (a membership's units, buckets and areas; a recovery's points) take half the memory."""
    codes = np.asarray(codes)
    if len(codes) and (int(codes.max()) >= 2**31 or int(codes.min()) < -(2**31)):
        return codes
    return codes.astype(np.int32)
