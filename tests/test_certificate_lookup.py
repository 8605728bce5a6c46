"""The certificate's witness values read for every primary at once equal those read point by point.

`_WitnessPoints.values_at` replaces a dict per witness point (`moved`) on the verification path: for each (point,
node) the node's value at the point, or the default where the point does not move it or does not exist. A
forged certificate may list a node twice in a point, name nodes outside the table or use point ids that would
wrap a composite key; each must read what `moved` reads."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spatial_release.suppression.certificate import _WitnessPoints


def _points(rows: list[tuple[int, int, int]], n_nodes: int) -> _WitnessPoints:
    """A `_WitnessPoints` over (point, node, value) rows, its point index built as `__init__` builds it."""
    rows = sorted(rows, key=lambda r: r[0])  # stable, as the frame is sorted by point
    pids = np.array([r[0] for r in rows], dtype=np.int64)
    points = object.__new__(_WitnessPoints)
    points.nodes_of = np.array([r[1] for r in rows], dtype=np.int64)
    points.values_of = np.array([r[2] for r in rows], dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, pids[1:] != pids[:-1]]) if len(pids) else np.array([], dtype=np.int64)
    ends = np.r_[starts[1:], len(pids)] if len(pids) else starts
    points.slices = {int(pids[a]): (int(a), int(b)) for a, b in zip(starts, ends)}
    points.points = {}
    points.n_nodes = n_nodes
    points.pids_of = pids
    points._lookup = None
    return points


def _one_by_one(points: _WitnessPoints, pids, nodes, default) -> list[int]:
    out = []
    for pid, node, d in zip(pids, nodes, default):
        moved = points.moved(int(pid))
        out.append(moved.get(int(node), int(d)) if moved is not None else int(d))
    return out


POINT_IDS = st.integers(0, 12)
# ids that would wrap the composite key (or are negative): the lookup must take the point-by-point road
WRAPPING_IDS = st.sampled_from([-3, 2**62, 2**63 - 1])


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(POINT_IDS, st.integers(-2, 9), st.integers(0, 50)), max_size=40),
    asks=st.lists(st.tuples(POINT_IDS, st.integers(-2, 9), st.integers(0, 50)), min_size=1, max_size=30),
)
def test_values_read_at_once_equal_the_values_read_point_by_point(rows, asks):
    _assert_same(rows, asks)


@settings(max_examples=50, deadline=None)
@given(
    rows=st.lists(st.tuples(POINT_IDS, st.integers(-2, 9), st.integers(0, 50)), max_size=20),
    wrapping=st.tuples(WRAPPING_IDS, st.integers(-2, 9), st.integers(0, 50)),
    asks=st.lists(st.tuples(POINT_IDS | WRAPPING_IDS, st.integers(-2, 9), st.integers(0, 50)), min_size=1, max_size=10),
)
def test_point_ids_that_would_wrap_the_key_read_the_same_values(rows, wrapping, asks):
    _assert_same([*rows, wrapping], asks)


def _assert_same(rows, asks) -> None:
    n_nodes = 8  # nodes 8 and 9 (and negatives) lie outside the table
    points = _points(rows, n_nodes)
    pids, nodes, default = (np.array([a[i] for a in asks], dtype=np.int64) for i in range(3))
    assert points.values_at(pids, nodes, default).tolist() == _one_by_one(_points(rows, n_nodes), pids, nodes, default)


def test_a_node_listed_twice_in_a_point_reads_its_last_row_and_absent_points_read_the_default():
    points = _points([(1, 3, 10), (1, 3, 11), (2, 3, 20), (1, 4, 7)], n_nodes=8)
    got = points.values_at(np.array([1, 2, 5, 1]), np.array([3, 3, 3, 5]), np.array([0, 0, 0, 0]))
    assert got.tolist() == [11, 20, 0, 0]
    # negative control: the lookup is not the default everywhere
    assert got.tolist() != [0, 0, 0, 0]
