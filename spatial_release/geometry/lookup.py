"""Polygon zones as a fine lookup grid, so the SQL engine can assign most pings to zones with a join.

Method: the zones' bounding box is cut into at most `max_cells` square lookup cells (in the zones' CRS).
A lookup cell whose closed square lies in the interior of exactly one zone (shapely `contains_properly`)
maps to that zone: every point in it, edges included, is in that zone and no other. A lookup cell that
touches no zone is absent (its points are outside every zone). Every other lookup cell touches a zone
boundary and is marked `BOUNDARY`: its points, and points within the guard band of any lookup-cell edge,
are assigned exactly by the zone layer's STRtree on their distinct coordinates (ties to the smallest id).
So the lookup changes speed, never the answer.

The lookup cells are classified through blocks of 2^l x 2^l of them (a quadtree, `_classify_blocks`): a block
that touches no zone, or lies in the interior of the one zone it touches, gives all its lookup cells that
class at once; only the other blocks are cut in four, down to the lookup cells, which get the same two
predicates as before (GEOS's intersects and contains_properly, exact on the given coordinates). A block's square
covers its lookup cells' squares exactly as they are computed (`_block_boxes`), so the table is the one
classifying every lookup cell gives (`_build_zone_lookup_flat`, kept as the reference the tests compare with).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import shapely

from spatial_release.geometry.zones import ZoneLayer

BOUNDARY = -2
ABSENT = -1  # a lookup cell or block that touches no zone; never in the table


@dataclass(frozen=True)
class ZoneLookup:
    x0: float
    y0: float
    cell: float  # side of a lookup cell, zone CRS units
    nx: int
    ny: int
    table: pd.DataFrame  # lk (gx * ny + gy), cls (zone row, or BOUNDARY); lookup cells in no zone are absent

    @property
    def boundary_share(self) -> float:
        return float((self.table["cls"] == BOUNDARY).sum()) / (self.nx * self.ny)


@dataclass(frozen=True)
class _Frame:
    """The lookup grid: origin (x0, y0) one spare lookup cell outside the zones' bounding box, nx * ny cells."""

    x0: float
    y0: float
    cell: float
    nx: int
    ny: int


def _lookup_frame(layer: ZoneLayer, max_cells: int) -> _Frame:
    xmin, ymin, xmax, ymax = layer.frame.total_bounds
    width, height = max(xmax - xmin, 1e-9), max(ymax - ymin, 1e-9)
    cell = math.sqrt(width * height / max_cells)
    # one spare lookup cell on each side, so the zones never touch the lookup grid's own border
    x0, y0 = xmin - cell, ymin - cell
    nx, ny = int(math.ceil(width / cell)) + 2, int(math.ceil(height / cell)) + 2
    return _Frame(x0, y0, cell, nx, ny)


def _prepared_geometries(layer: ZoneLayer) -> np.ndarray:
    geoms = layer.frame.geometry.to_numpy()
    shapely.prepare(geoms)
    return geoms


def _boxes(x0: float, y0: float, cell: float, gx: np.ndarray, gy: np.ndarray) -> np.ndarray:
    return shapely.box(x0 + gx * cell, y0 + gy * cell, x0 + (gx + 1) * cell, y0 + (gy + 1) * cell)


def _block_boxes(frame: _Frame, gx0: np.ndarray, gy0: np.ndarray, gx1: np.ndarray, gy1: np.ndarray) -> np.ndarray:
    """Squares of the blocks of lookup cells gx0 <= gx < gx1, gy0 <= gy < gy1 (int64 arrays), each edge by the
    expression `_boxes` gives the lookup cell on that edge: x0 + gx0 * cell is its first cell's left edge, and
    x0 + gx1 * cell its last cell's right edge, x0 + ((gx1 - 1) + 1) * cell. An int64 below 2^53 converts to
    float exactly, and float multiplication by cell > 0 and addition of x0 are monotone (rounding to nearest
    never reverses an order), so for gx0 <= gx < gx1 every lookup cell's computed square lies in its block's
    computed square, edges included. A block of one lookup cell is that lookup cell's square, bit for bit."""
    x0, y0, cell = frame.x0, frame.y0, frame.cell
    return shapely.box(x0 + gx0 * cell, y0 + gy0 * cell, x0 + gx1 * cell, y0 + gy1 * cell)


def _touching_pairs(
    geoms: np.ndarray, boxes: np.ndarray, box_idx: np.ndarray, zone_idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The candidate (box, zone) pairs whose box and zone intersect. GEOS evaluates intersects by the prepared
    zone; the STRtree's intersects query prepares each box afresh instead, which cost a third of the time. Either
    way GEOS decides with exact orientation tests on the same coordinates (the tests compare the two)."""
    hit = shapely.intersects(geoms[zone_idx], boxes[box_idx])
    return box_idx[hit], zone_idx[hit]


def _classify(
    geoms: np.ndarray, boxes: np.ndarray, box_idx: np.ndarray, zone_idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per box: the zone row when the box lies in the interior of the one zone it touches, ABSENT when it
    touches no zone, BOUNDARY otherwise; given candidate (box, zone) pairs that hold every zone a box touches.
    Also the pairs that touch."""
    box_idx, zone_idx = _touching_pairs(geoms, boxes, box_idx, zone_idx)
    touching = np.bincount(box_idx, minlength=len(boxes))
    cls = np.where(touching > 0, BOUNDARY, ABSENT).astype(np.int64)
    single = np.flatnonzero(touching[box_idx] == 1)
    inside = shapely.contains_properly(geoms[zone_idx[single]], boxes[box_idx[single]])
    cls[box_idx[single][inside]] = zone_idx[single][inside]
    return cls, box_idx, zone_idx


def _cells_of_blocks(
    frame: _Frame, gx0: np.ndarray, gy0: np.ndarray, gx1: np.ndarray, gy1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The lookup keys (gx * ny + gy) of every lookup cell in the blocks, and each one's block (its row)."""
    width, height = gx1 - gx0, gy1 - gy0
    counts = width * height
    block = np.repeat(np.arange(len(counts)), counts)
    first = np.cumsum(counts) - counts
    offset = np.arange(int(counts.sum()), dtype=np.int64) - first[block]
    gx = gx0[block] + offset // height[block]
    gy = gy0[block] + offset % height[block]
    return gx * frame.ny + gy, block


@dataclass(frozen=True)
class _Level:
    """Blocks of side `size` lookup cells to classify, (bx, by) in block indices, and the zones each may touch:
    candidate pairs (pair_block, a row of bx, sorted; pair_zone)."""

    size: int
    bx: np.ndarray
    by: np.ndarray
    pair_block: np.ndarray
    pair_zone: np.ndarray


def _children(frame: _Frame, level: _Level, mixed: np.ndarray, pair_block: np.ndarray, pair_zone: np.ndarray) -> _Level:
    """The four quarters of the mixed blocks (rows of level.bx), less those that start past the lookup grid,
    with the zones their block touches (pairs by row of `mixed`, sorted) as their candidates: a quarter's square
    lies in its block's, so it touches no zone its block does not."""
    cx = (2 * level.bx[mixed][:, None] + np.array([0, 0, 1, 1])).ravel()
    cy = (2 * level.by[mixed][:, None] + np.array([0, 1, 0, 1])).ravel()
    half = level.size // 2
    on_grid = (cx * half < frame.nx) & (cy * half < frame.ny)
    child = np.cumsum(on_grid) - 1
    quarter = (pair_block[:, None] * 4 + np.arange(4)).ravel()
    # by quarter, as the chunks slice them; stable, so each quarter's zones stay in order
    order = np.argsort(quarter, kind="stable")
    quarter, zone = quarter[order], np.repeat(pair_zone, 4)[order]
    kept = on_grid[quarter]
    return _Level(half, cx[on_grid], cy[on_grid], child[quarter[kept]], zone[kept])


def _chunks(n: int, chunk: int) -> Iterator[slice]:
    for start in range(0, n, chunk):
        yield slice(start, min(start + chunk, n))


def _classify_blocks(frame: _Frame, geoms: np.ndarray, chunk: int) -> np.ndarray:
    """The class of every lookup cell (ABSENT, a zone row or BOUNDARY), indexed by lookup key.

    Level by level from one block over the whole grid: a block that touches no zone leaves its lookup cells
    ABSENT, since each one's square lies in the block's (`_block_boxes`) and so touches no zone either. A block
    in the interior of the one zone it touches gives that zone to its lookup cells: each one's square lies in
    that interior, so it touches that zone, no other, and lies in its interior, as `_classify` of the lookup cell
    alone finds. Any other block is cut in four, down to single lookup cells, classified as before (the zones a
    square touches are the zones its block touches that it touches). Blocks are classified `chunk` at a time, so
    the shapely boxes in memory stay bounded as before.
    """
    classes = np.full(frame.nx * frame.ny, ABSENT, dtype=np.int64)
    size = 1 << max(0, math.ceil(math.log2(max(frame.nx, frame.ny))))
    origin = np.zeros(1, dtype=np.int64)
    level = _Level(size, origin, origin, np.zeros(len(geoms), dtype=np.int64), np.arange(len(geoms), dtype=np.int64))
    while len(level.bx):
        refine, pair_blocks, pair_zones = [], [], []
        for part in _chunks(len(level.bx), chunk):
            lo, hi = np.searchsorted(level.pair_block, [part.start, part.stop])
            gx0, gy0 = level.bx[part] * level.size, level.by[part] * level.size
            gx1, gy1 = np.minimum(gx0 + level.size, frame.nx), np.minimum(gy0 + level.size, frame.ny)
            boxes = _block_boxes(frame, gx0, gy0, gx1, gy1)
            cls, box_idx, zone_idx = _classify(geoms, boxes, level.pair_block[lo:hi] - part.start, level.pair_zone[lo:hi])
            # a lookup cell's BOUNDARY is final; a larger block's is settled by its quarters
            settled = cls != ABSENT if level.size == 1 else cls >= 0
            lk, block = _cells_of_blocks(frame, gx0[settled], gy0[settled], gx1[settled], gy1[settled])
            classes[lk] = cls[settled][block]
            mixed = cls == BOUNDARY
            refine.append(np.flatnonzero(mixed) + part.start)
            pair_blocks.append(box_idx[mixed[box_idx]] + part.start)
            pair_zones.append(zone_idx[mixed[box_idx]])
        if level.size == 1:
            break
        rows = np.concatenate(refine)
        # each pair's block as its row among the mixed blocks (both sorted)
        pair_block = np.searchsorted(rows, np.concatenate(pair_blocks))
        level = _children(frame, level, rows, pair_block, np.concatenate(pair_zones))
    return classes


def build_zone_lookup(layer: ZoneLayer, max_cells: int = 1_000_000, chunk: int = 250_000) -> ZoneLookup:
    frame = _lookup_frame(layer, max_cells)
    geoms = _prepared_geometries(layer)
    classes = _classify_blocks(frame, geoms, chunk)
    lk = np.flatnonzero(classes != ABSENT).astype(np.int64)
    table = pd.DataFrame({"lk": lk, "cls": classes[lk]})
    return ZoneLookup(float(frame.x0), float(frame.y0), float(frame.cell), frame.nx, frame.ny, table)


def _build_zone_lookup_flat(layer: ZoneLayer, max_cells: int = 1_000_000, chunk: int = 250_000) -> ZoneLookup:
    """Every lookup cell classified on its own: the method before the blocks, as it was, kept as the reference
    the tests and bench/lookup_bench.py compare `build_zone_lookup` with."""
    geoms = layer.frame.geometry.to_numpy()
    shapely.prepare(geoms)
    xmin, ymin, xmax, ymax = layer.frame.total_bounds
    width, height = max(xmax - xmin, 1e-9), max(ymax - ymin, 1e-9)
    cell = math.sqrt(width * height / max_cells)
    x0, y0 = xmin - cell, ymin - cell
    nx, ny = int(math.ceil(width / cell)) + 2, int(math.ceil(height / cell)) + 2
    tree = shapely.STRtree(geoms)
    lks, classes = [], []
    for start in range(0, nx * ny, chunk):
        lk = np.arange(start, min(start + chunk, nx * ny), dtype=np.int64)
        boxes = _boxes(x0, y0, cell, lk // ny, lk % ny)
        box_idx, zone_idx = tree.query(boxes, predicate="intersects")
        touching = np.bincount(box_idx, minlength=len(lk))
        single = np.flatnonzero(touching[box_idx] == 1)
        cls = np.full(len(lk), BOUNDARY, dtype=np.int64)
        inside = shapely.contains_properly(geoms[zone_idx[single]], boxes[box_idx[single]])
        cls[box_idx[single][inside]] = zone_idx[single][inside]
        keep = touching > 0
        lks.append(lk[keep])
        classes.append(cls[keep])
    table = pd.DataFrame({"lk": np.concatenate(lks), "cls": np.concatenate(classes)})
    return ZoneLookup(float(x0), float(y0), float(cell), nx, ny, table)
