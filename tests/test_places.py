"""`stages.attack.places` is `pd.Index.get_indexer` read per distinct value (Arrow's dictionary encoding), and
`arrays.distinct_sorted` is np.unique whatever the order of its input: both checked against the plain numpy and
pandas answers, on Arrow-backed and object columns, several chunks, missing values and names not in the index."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spatial_release.arrays import distinct_sorted
from spatial_release.stages.attack import places

NAMES = [f"c{i}" for i in range(12)]


def _arrow_series(chunks: list[list[str | None]]) -> pd.Series:
    arrow = pa.chunked_array([pa.array(c, type=pa.string()) for c in chunks], type=pa.string())
    return pd.Series(pd.arrays.ArrowStringArray(arrow))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.one_of(st.sampled_from([*NAMES, "elsewhere"]), st.none()), max_size=30), max_size=4),
    st.lists(st.sampled_from(NAMES), unique=True),
)
def test_places_are_get_indexers_on_arrow_chunks(chunks, in_index):
    index = pd.Index(np.array(sorted(in_index), dtype=object))
    values = _arrow_series(chunks)
    expected = index.get_indexer(values).astype(np.int64)
    got = places(index, values)
    assert got.dtype == np.int64 and np.array_equal(got, expected)
    if any(v is not None and v not in in_index for c in chunks for v in c):
        assert (got == -1).any()  # a name the index does not hold is not given a place


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(NAMES), max_size=40), st.lists(st.sampled_from(NAMES), unique=True, min_size=1))
def test_places_on_object_and_categorical_columns(values, in_index):
    index = pd.Index(np.array(sorted(in_index), dtype=object))
    series = pd.Series(np.array(values, dtype=object), dtype=object)
    assert np.array_equal(places(index, series), index.get_indexer(series).astype(np.int64))
    categories = series.astype("category")  # a linked zoning's names may come so: Arrow holds them as a dictionary
    assert np.array_equal(places(index, categories), index.get_indexer(categories).astype(np.int64))


def test_places_on_timestamps():
    buckets = pd.DatetimeIndex(pd.date_range("2018-01-01", periods=48, freq="h", tz="UTC"))
    rng = np.random.default_rng(3)
    values = pd.Series(buckets[rng.integers(0, 48, 5000)]).astype("datetime64[us, UTC]")
    values.iloc[7] = pd.Timestamp("2019-01-01", tz="UTC")  # not a bucket: -1
    expected = buckets.get_indexer(values).astype(np.int64)
    assert expected[7] == -1
    assert np.array_equal(places(buckets, values), expected)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), max_size=200), st.sampled_from(["random", "sorted", "runs"]))
def test_distinct_sorted_is_unique_in_any_order(values, order):
    array = np.array(values, dtype=np.int64)
    if order == "sorted":
        array = np.sort(array)
    elif order == "runs":  # ascending runs, as pair codes come from memberships and recoveries
        array = np.concatenate([np.sort(part) for part in np.array_split(array, 4)]) if len(array) else array
    assert np.array_equal(distinct_sorted(array), np.unique(array))
    floats = array.astype(np.float64)
    assert np.array_equal(distinct_sorted(floats), np.unique(floats))
