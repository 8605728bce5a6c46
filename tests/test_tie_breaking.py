"""The recovery's nearest arcs and its allocation of visitors break ties by position, never by how numpy's
partition happens to order equal values (which differs with the CPU's vector extensions). The reference is a
stable sort, written independently here."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from spatial_release.risk.attack import nearest_columns, smallest

# few distinct values: most of them tied, which is where the choice is made
tied_values = arrays(np.float64, st.integers(1, 60), elements=st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, np.inf]))


@given(tied_values, st.integers(0, 70))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_smallest_is_a_stable_sorts_head(values, take):
    expected = np.argsort(values, kind="stable")[: min(take, len(values))]
    assert smallest(values, take).tolist() == expected.tolist()


@given(st.integers(1, 12), st.integers(1, 40), st.data())
@settings(max_examples=300, deadline=None, derandomize=True)
def test_nearest_columns_are_each_rows_smallest_by_column(rows, columns, data):
    cost = data.draw(arrays(np.float64, (rows, columns), elements=st.sampled_from([0.0, 0.25, 1.0, 1.0, 3.0])))
    take = data.draw(st.integers(1, columns))
    expected = np.sort(np.argsort(cost, axis=1, kind="stable")[:, :take], axis=1)
    assert nearest_columns(cost, take).tolist() == expected.tolist()


def test_the_comparison_catches_ties_broken_another_way():
    """The negative control: ties broken to the highest position (as any other order of equal values would)
    differ from the reference the property tests compare with, on values where ties decide."""
    values = np.array([1.0, 0.0, 1.0, 1.0, 2.0, 1.0])

    def to_the_last(values: np.ndarray, take: int) -> np.ndarray:
        order = np.lexsort((-np.arange(len(values)), values))
        return order[:take]

    expected = np.argsort(values, kind="stable")[:3]
    assert smallest(values, 3).tolist() == expected.tolist() == [1, 0, 2]
    assert to_the_last(values, 3).tolist() != expected.tolist()
    cost = np.vstack([values, values[::-1]])
    assert nearest_columns(cost, 3).tolist() == [[0, 1, 2], [0, 2, 4]]
    assert np.sort(to_the_last(values, 3)).tolist() != nearest_columns(cost, 3)[0].tolist()
