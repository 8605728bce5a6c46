"""The zone lookup classified through blocks of lookup cells (`build_zone_lookup`) is the lookup that classifying
every lookup cell on its own gives (`_build_zone_lookup_flat`, the method before): the same grid and the same
table, row for row, on random zone layers and on the Jersey City wards and census blocks; and the zones each
lookup cell touches, found by the prepared zones, are the ones the STRtree's intersects query finds. Three wrong
variants of the blocks (a block on one zone's edge taken as inside it; a block's square a hair short of its
lookup cells'; a block's quarters missing one of its zones) show the comparison would catch a wrong classifier."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import PROJECT_ROOT, SHARED_DATA

from spatial_release.geometry import lookup
from spatial_release.geometry.locate import make_linked_locators, make_locator
from spatial_release.geometry.lookup import ZoneLookup, _build_zone_lookup_flat, build_zone_lookup
from spatial_release.geometry.zones import ZoneLayer
from spatial_release.policy import ZonesGeometry, load_policy

ORIGIN = (-74.1, 40.68)  # near Jersey City in EPSG:4326: coordinates whose sums and products round


def _sorted_table(found: ZoneLookup) -> pd.DataFrame:
    return found.table.sort_values("lk", kind="stable").reset_index(drop=True)


def assert_same_lookup(found: ZoneLookup, expected: ZoneLookup) -> None:
    assert (found.x0, found.y0, found.cell, found.nx, found.ny) == (
        expected.x0,
        expected.y0,
        expected.cell,
        expected.nx,
        expected.ny,
    )
    pd.testing.assert_frame_equal(_sorted_table(found), _sorted_table(expected), check_exact=True)


def lookups_differ(found: ZoneLookup, expected: ZoneLookup) -> bool:
    try:
        assert_same_lookup(found, expected)
    except AssertionError:
        return True
    return False


@contextmanager
def zone_layer(polygons: list[shapely.Geometry], crs: str = "EPSG:4326") -> Iterator[ZoneLayer]:
    """The polygons as a zone layer read back from a file, through the project's own checks."""
    frame = gpd.GeoDataFrame({"zone": [f"z{i:04d}" for i in range(len(polygons))]}, geometry=polygons, crs=crs)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "zones.parquet"
        frame.to_parquet(path)
        yield ZoneLayer(ZonesGeometry(kind="zones", path=str(path), id="zone"), path)


def voronoi_zones(rng: np.random.Generator, n: int, width: float, height: float) -> list[shapely.Geometry]:
    """Voronoi cells of n random points clipped to a width x height box: zones with shared, slanted edges."""
    x0, y0 = ORIGIN
    frame = shapely.box(x0, y0, x0 + width, y0 + height)
    seeds = shapely.multipoints(np.column_stack([x0 + rng.uniform(0, width, n), y0 + rng.uniform(0, height, n)]))
    cells = shapely.get_parts(shapely.voronoi_polygons(seeds, extend_to=frame))
    clipped = shapely.intersection(cells, frame)
    return [c for c in clipped if shapely.area(c) > 0]


def square_grid_zones(rng: np.random.Generator, cols: int, rows: int, side: float) -> list[shapely.Geometry]:
    """A grid of squares, some missing: zones touching along edges and at corners, with gaps between some."""
    x0, y0 = ORIGIN
    kept = rng.random(cols * rows) > 0.2
    kept[0] = True
    return [
        shapely.box(x0 + i * side, y0 + j * side, x0 + (i + 1) * side, y0 + (j + 1) * side)
        for i in range(cols)
        for j in range(rows)
        if kept[i * rows + j]
    ]


def holed_zones(rng: np.random.Generator, width: float, height: float) -> list[shapely.Geometry]:
    """A zone with two holes, an island zone in one hole (the other left empty), and a neighbour on its side."""
    x0, y0 = ORIGIN
    outer = shapely.box(x0, y0, x0 + width, y0 + height)
    fx, fy = rng.uniform(0.1, 0.3, 2)
    first = shapely.box(x0 + fx * width, y0 + fy * height, x0 + (fx + 0.2) * width, y0 + (fy + 0.2) * height)
    second = shapely.Point(x0 + 0.7 * width, y0 + 0.6 * height).buffer(0.15 * min(width, height))
    holed = shapely.difference(outer, shapely.union(first, second))
    island = shapely.Point(*shapely.get_coordinates(shapely.centroid(first))[0]).buffer(0.05 * min(width, height))
    neighbour = shapely.box(x0 + width, y0 + 0.25 * height, x0 + 1.5 * width, y0 + 0.75 * height)
    return [holed, island, neighbour]


def single_zone(rng: np.random.Generator, width: float, height: float) -> list[shapely.Geometry]:
    """One star-shaped zone: concave, with many slanted edges."""
    x0, y0 = ORIGIN
    angles = np.sort(rng.uniform(0, 2 * np.pi, 24))
    radii = rng.uniform(0.3, 1.0, 24)
    xs = x0 + width / 2 * (1 + radii * np.cos(angles))
    ys = y0 + height / 2 * (1 + radii * np.sin(angles))
    return [shapely.Polygon(np.column_stack([xs, ys]))]


LAYOUTS: dict[str, Callable[[np.random.Generator, float, float], list[shapely.Geometry]]] = {
    "voronoi": lambda rng, w, h: voronoi_zones(rng, int(rng.integers(2, 40)), w, h),
    "squares": lambda rng, w, h: square_grid_zones(rng, int(rng.integers(1, 7)), int(rng.integers(1, 7)), w / 5),
    "holes": holed_zones,
    "single": single_zone,
}


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from(sorted(LAYOUTS)),
    seed=st.integers(0, 2**32 - 1),
    width=st.floats(1e-3, 0.2),
    aspect=st.floats(0.2, 5.0),
    max_cells=st.one_of(st.integers(1, 64), st.integers(64, 6_000)),
    chunk=st.sampled_from([7, 1_000, 250_000]),
)
def test_blocks_give_the_lookup_of_every_cell_on_random_layers(layout, seed, width, aspect, max_cells, chunk):
    polygons = LAYOUTS[layout](np.random.default_rng(seed), width, width * aspect)
    with zone_layer(polygons) as layer:
        assert_same_lookup(build_zone_lookup(layer, max_cells, chunk), _build_zone_lookup_flat(layer, max_cells))


def assert_same_touching_pairs(layer: ZoneLayer, max_cells: int) -> None:
    frame = lookup._lookup_frame(layer, max_cells)
    geoms = lookup._prepared_geometries(layer)
    tree = shapely.STRtree(geoms)
    lk = np.arange(frame.nx * frame.ny, dtype=np.int64)
    boxes = lookup._boxes(frame.x0, frame.y0, frame.cell, lk // frame.ny, lk % frame.ny)
    found = np.column_stack(lookup._touching_pairs(geoms, boxes, *tree.query(boxes)))
    expected = np.column_stack(tree.query(boxes, predicate="intersects"))
    assert np.array_equal(found[np.lexsort(found.T[::-1])], expected[np.lexsort(expected.T[::-1])])


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from(sorted(LAYOUTS)),
    seed=st.integers(0, 2**32 - 1),
    width=st.floats(1e-3, 0.2),
    max_cells=st.integers(1, 3_000),
)
def test_touching_pairs_are_the_tree_querys_pairs(layout, seed, width, max_cells):
    """Every lookup cell's zones, by the prepared zones, are the pairs the tree's intersects query gives."""
    polygons = LAYOUTS[layout](np.random.default_rng(seed), width, width * 0.7)
    with zone_layer(polygons) as layer:
        assert_same_touching_pairs(layer, max_cells)


def aligned_squares(cols: int, rows: int, side: float) -> list[shapely.Geometry]:
    return [shapely.box(i * side, j * side, (i + 1) * side, (j + 1) * side) for i in range(cols) for j in range(rows)]


# (cols, rows, side, max_cells): lookup cells of exactly 1/4 (cell = sqrt(width * height / max_cells)), so with the
# spare lookup cell the zone edges lie on lookup cells gx = 1 + k * side / cell: an even gx, a block's edge, when
# k * side / cell is odd
ALIGNED = [(5, 5, 0.75, 15 * 15), (4, 4, 1.25, 20 * 20), (3, 7, 0.75, 9 * 21)]


@pytest.mark.parametrize(("cols", "rows", "side", "max_cells"), ALIGNED)
def test_blocks_give_the_lookup_of_every_cell_when_zone_edges_are_block_edges(cols, rows, side, max_cells):
    """Every zone edge is a lookup cell's edge, exactly, and some are blocks' edges: the lookup cells and blocks
    along them touch two zones."""
    squares = [s for i, s in enumerate(aligned_squares(cols, rows, side)) if i != 4]
    with zone_layer(squares, crs="EPSG:32618") as layer:
        found = build_zone_lookup(layer, max_cells, chunk=100)
        assert found.cell == 0.25
        assert_same_lookup(found, _build_zone_lookup_flat(layer, max_cells))
        assert found.boundary_share > 0
        assert_same_touching_pairs(layer, max_cells)


@pytest.mark.slow
@pytest.mark.skipif(
    not (SHARED_DATA / "jersey-city").is_dir(),
    reason="../shared/data/jersey-city is absent (a user's machine); CI has it and runs this test",
)
def test_blocks_give_the_lookup_of_every_cell_on_the_jersey_city_wards_and_blocks():
    policy = load_policy(PROJECT_ROOT / "policies/jc-bikes.yaml")
    layers = [make_locator(policy), *make_linked_locators(policy).values()]
    assert len(layers) == 2
    for layer in layers:
        assert isinstance(layer, ZoneLayer)
        # a quarter of the default million lookup cells: the real zones' edges at a grid the reference builds in a
        # quarter of the time (the default grid is compared by bench/lookup_bench.py)
        assert_same_lookup(build_zone_lookup(layer, 250_000), _build_zone_lookup_flat(layer, 250_000))


# The negative controls: wrong block classifiers that the comparison above must catch.


Classified = tuple[np.ndarray, np.ndarray, np.ndarray]


def _inside_the_one_zone_it_touches(cell: float) -> Callable[..., Classified]:
    """A wrong `_classify`: a block (larger than one lookup cell) touching one zone is taken as inside it, even
    when the zone's edge crosses it."""
    exact = lookup._classify

    def classify(geoms: np.ndarray, boxes: np.ndarray, box_idx: np.ndarray, zone_idx: np.ndarray) -> Classified:
        cls, box_idx, zone_idx = exact(geoms, boxes, box_idx, zone_idx)
        xmin, _, xmax, _ = shapely.bounds(boxes).T
        touching = np.bincount(box_idx, minlength=len(boxes))
        lenient = (touching[box_idx] == 1) & ((xmax - xmin)[box_idx] > 1.5 * cell)
        cls[box_idx[lenient]] = zone_idx[lenient]
        return cls, box_idx, zone_idx

    return classify


def _one_zone_fewer(frame, level, mixed, pair_block, pair_zone):
    """A wrong `_children`: the quarters of a block miss the last of the zones it touches."""
    last = np.r_[pair_block[1:] != pair_block[:-1], True][: len(pair_block)]
    return EXACT_CHILDREN(frame, level, mixed, pair_block[~last], pair_zone[~last])


EXACT_CHILDREN = lookup._children


def _a_hair_short(frame, gx0, gy0, gx1, gy1) -> np.ndarray:
    """A wrong `_block_boxes`: each block's right and top edges one float step short of its lookup cells' (the
    lookup cells' own squares, blocks of one, left as they are)."""
    x0, y0, cell = frame.x0, frame.y0, frame.cell
    block = (gx1 - gx0 > 1) | (gy1 - gy0 > 1)
    right, top = x0 + gx1 * cell, y0 + gy1 * cell
    right, top = np.where(block, np.nextafter(right, -np.inf), right), np.where(block, np.nextafter(top, -np.inf), top)
    return shapely.box(x0 + gx0 * cell, y0 + gy0 * cell, right, top)


def test_the_comparison_catches_a_block_on_a_zone_edge_taken_as_inside(monkeypatch):
    polygons = voronoi_zones(np.random.default_rng(1), 12, 0.05, 0.03)
    with zone_layer(polygons) as layer:
        expected = _build_zone_lookup_flat(layer, 5_000)
        assert_same_lookup(build_zone_lookup(layer, 5_000), expected)
        monkeypatch.setattr(lookup, "_classify", _inside_the_one_zone_it_touches(expected.cell))
        assert lookups_differ(build_zone_lookup(layer, 5_000), expected)


def test_the_comparison_catches_a_block_square_short_of_its_lookup_cells(monkeypatch):
    cols, rows, side, max_cells = ALIGNED[0]
    with zone_layer(aligned_squares(cols, rows, side), crs="EPSG:32618") as layer:
        expected = _build_zone_lookup_flat(layer, max_cells)
        assert_same_lookup(build_zone_lookup(layer, max_cells), expected)
        monkeypatch.setattr(lookup, "_block_boxes", _a_hair_short)
        assert lookups_differ(build_zone_lookup(layer, max_cells), expected)


def test_the_comparison_catches_a_block_quarter_missing_one_of_its_blocks_zones(monkeypatch):
    polygons = voronoi_zones(np.random.default_rng(1), 12, 0.05, 0.03)
    with zone_layer(polygons) as layer:
        expected = _build_zone_lookup_flat(layer, 5_000)
        monkeypatch.setattr(lookup, "_children", _one_zone_fewer)
        assert lookups_differ(build_zone_lookup(layer, 5_000), expected)
