"""Polygon zones as a fine lookup grid, so the SQL engine can assign most pings to zones with a join.

Method: the zones' bounding box is cut into at most `max_cells` square lookup cells (in the zones' CRS).
A lookup cell whose closed square lies in the interior of exactly one zone (shapely `contains_properly`)
maps to that zone: every point in it, edges included, is in that zone and no other. A lookup cell that
touches no zone is absent (its points are outside every zone). Every other lookup cell touches a zone
boundary and is marked `BOUNDARY`: its points, and points within the guard band of any lookup-cell edge,
are assigned exactly by the zone layer's STRtree on their distinct coordinates (ties to the smallest id).
So the lookup changes speed, never the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import shapely

from spatial_release.geometry.zones import ZoneLayer

BOUNDARY = -2


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


def _boxes(x0: float, y0: float, cell: float, gx: np.ndarray, gy: np.ndarray) -> np.ndarray:
    return shapely.box(x0 + gx * cell, y0 + gy * cell, x0 + (gx + 1) * cell, y0 + (gy + 1) * cell)


def build_zone_lookup(layer: ZoneLayer, max_cells: int = 1_000_000, chunk: int = 250_000) -> ZoneLookup:
    geoms = layer.frame.geometry.to_numpy()
    shapely.prepare(geoms)
    xmin, ymin, xmax, ymax = layer.frame.total_bounds
    width, height = max(xmax - xmin, 1e-9), max(ymax - ymin, 1e-9)
    cell = math.sqrt(width * height / max_cells)
    # one spare lookup cell on each side, so the zones never touch the lookup grid's own border
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
