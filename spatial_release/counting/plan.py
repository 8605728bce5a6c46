"""How each zoning assigns a ping to an area, as SQL the engines run plus an exact Python fallback.

A zoning turns (lon, lat) into a BIGINT area key:
- a grid: the cell indices, from the SQL projection (`geometry.sqlproj`), encoded by `grid.encode_key`;
- polygon zones: the zone's row (zones sorted by id), from a join with the zone lookup grid
  (`geometry.lookup`).
Either way the SQL also says when it is *unsure* (close to an edge, outside the validated area, a lookup
cell on a zone boundary, or no SQL formula for the CRS). Unsure pings keep their coordinates and are assigned
by `exact_keys` (pyproj, STRtree) on their distinct coordinates, so the result is the exact one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from spatial_release.geometry.grid import KEY_BASE, KEY_OFFSET, Grid, cell_name
from spatial_release.geometry.lookup import BOUNDARY, ZoneLookup, build_zone_lookup
from pyproj import CRS

from spatial_release.geometry.sqlproj import SqlProjection, fitted_projection, num, validated_projection
from spatial_release.geometry.zones import ZoneLayer
from spatial_release.levels import TOTAL


@dataclass(frozen=True)
class ZoningPlan:
    level: str  # levels.LEAF for the main geometry, else the linked zoning's name
    parent_levels: tuple[str, ...]
    total_level: str
    projection: SqlProjection | None  # None: no trusted SQL projection, every ping is assigned exactly
    exact_keys: Callable[[np.ndarray, np.ndarray], np.ndarray]  # -1 where the point is in no area
    ids_of_keys: Callable[[np.ndarray], np.ndarray]
    hierarchy: Callable[[pd.Series], pd.DataFrame]  # cell_id (area id) plus one column per parent level
    grid_size: float | None = None
    lookup: ZoneLookup | None = None
    compact: "CompactGrid | None" = None  # grid keys numbered within the pings' extent (small integers)
    key_bound: int | None = None  # every area key is in [0, key_bound); None: keys are not small

    def id_order_sql(self, key: str, dialect) -> str:
        """An SQL expression over an area key that sorts like the area ids (ties of presence go to the
        smallest id). Zones: the key (zones are numbered in id order). Compact grid cells: the id itself."""
        if self.compact is None:
            return key
        c, size = self.compact, int(self.grid_size)
        ix = f"({dialect.int_div(key, str(c.ny))} + {c.ix0}) * {size}"
        iy = f"(({key}) % {c.ny} + {c.iy0}) * {size}"
        return f"('{size}mE' || CAST({ix} AS STRING) || 'N' || CAST({iy} AS STRING))"

    @property
    def method(self) -> str:
        if self.projection is None:
            return "exact assignment of every distinct coordinate (no SQL projection for this CRS)"
        if self.lookup is not None:
            return (f"SQL {self.projection.method} projection + {self.lookup.nx} x {self.lookup.ny} lookup grid "
                    f"({self.lookup.boundary_share:.1%} boundary cells assigned exactly)")
        return f"SQL {self.projection.method} projection, exact assignment within {self.projection.guard:g} of an edge"


def evaluate_with(engine):
    """Evaluates a SQL projection on `engine` itself, so it is validated where it will run."""

    def evaluate(projection: SqlProjection, lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        engine.register_frame("validation_points", pd.DataFrame({"lon": lon, "lat": lat}))
        out = engine.fetch(projection.relation("validation_points", [], "x", "y"))
        return out["x"].to_numpy(float), out["y"].to_numpy(float)

    return evaluate


Extent = tuple[float, float, float, float]  # (west, south, east, north) of the pings, degrees


def choose_projection(crs: CRS, evaluate=None, extent: Extent | None = None) -> SqlProjection | None:
    """lon/lat CRSs: the identity. Projected CRSs: a polynomial fitted over the pings' extent when one is
    accurate enough there (cheapest), else the full formula, else None (every point assigned by pyproj).
    Whatever is chosen has been validated against pyproj on `evaluate`'s engine."""
    options = {"evaluate": evaluate} if evaluate else {}
    if not crs.is_geographic and extent is not None:
        fitted = fitted_projection(crs, extent, **options)
        if fitted is not None:
            return fitted
    return validated_projection(crs, **options)


@dataclass(frozen=True)
class CompactGrid:
    """Cells of the pings' extent numbered (ix - ix0) * ny + (iy - iy0): small keys make the engines' hash
    tables smaller and let presence be found in one pass (see counting.counts). A point whose SQL cell falls
    outside the box is unsure (assigned by pyproj); an exact cell outside it is an error, which the padding
    of the box rules out for pings inside the extent."""

    ix0: int
    iy0: int
    nx: int
    ny: int

    @classmethod
    def around(cls, grid: Grid, extent: Extent) -> "CompactGrid | None":
        w, s, e, n = extent
        t = np.linspace(0.0, 1.0, 201)
        lon = np.concatenate([w + (e - w) * t, np.full(201, e), w + (e - w) * t, np.full(201, w)])
        lat = np.concatenate([np.full(201, s), s + (n - s) * t, np.full(201, n), s + (n - s) * t])
        ix, iy = grid.indices(lon, lat)
        ix0, iy0 = int(ix.min()) - 2, int(iy.min()) - 2
        nx, ny = int(ix.max()) - ix0 + 3, int(iy.max()) - iy0 + 3
        return cls(ix0, iy0, nx, ny) if nx * ny < 2**31 else None

    def encode(self, ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
        ix, iy = np.asarray(ix, np.int64) - self.ix0, np.asarray(iy, np.int64) - self.iy0
        if ((ix < 0) | (ix >= self.nx) | (iy < 0) | (iy >= self.ny)).any():
            raise ValueError("a ping lies outside the extent the grid keys were numbered for")
        return ix * self.ny + iy

    def decode(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keys = np.asarray(keys, np.int64)
        return keys // self.ny + self.ix0, keys % self.ny + self.iy0


def grid_plan(level: str, grid: Grid, parent_levels: tuple[str, ...], evaluate=None,
              extent: Extent | None = None) -> ZoningPlan:
    projection = choose_projection(grid.crs, evaluate, extent)
    compact = CompactGrid.around(grid, extent) if extent is not None else None
    if compact is None:
        return ZoningPlan(level, parent_levels, TOTAL, projection, grid.locate_keys, grid.ids_of_keys,
                          grid.hierarchy, grid_size=float(grid.spec.size_m))

    def exact_keys(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        return compact.encode(*grid.indices(lon, lat))

    def ids_of_keys(keys: np.ndarray) -> np.ndarray:
        return cell_name(grid.spec.size_m, *compact.decode(keys))

    return ZoningPlan(level, parent_levels, TOTAL, projection, exact_keys, ids_of_keys, grid.hierarchy,
                      grid_size=float(grid.spec.size_m), compact=compact, key_bound=compact.nx * compact.ny)


def zones_plan(level: str, layer: ZoneLayer, parent_levels: tuple[str, ...], total_level: str,
               evaluate=None, max_lookup_cells: int = 1_000_000, extent: Extent | None = None) -> ZoningPlan:
    projection = choose_projection(layer.crs, evaluate, extent)
    lookup = build_zone_lookup(layer, max_lookup_cells) if projection is not None else None
    table = layer.parent_table()

    def hierarchy(ids: pd.Series) -> pd.DataFrame:
        return pd.DataFrame({"cell_id": ids.to_numpy()}).merge(table, on="cell_id", how="left")

    return ZoningPlan(level, parent_levels, total_level, projection, layer.locate_keys, layer.ids_of_keys,
                      hierarchy, lookup=lookup, key_bound=len(layer.frame))


def _near_edge(v: str, origin: float, size: float, guard: float) -> str:
    """True when coordinate v lies within `guard` of a multiple of `size` past `origin`."""
    rel = f"({v} - {num(origin)})"
    low = f"floor({rel} / {num(size)}) * {num(size)}"
    return f"({rel} - {low} < {num(guard)} OR {low} + {num(size)} - {rel} < {num(guard)})"


@dataclass(frozen=True)
class ZoningSql:
    key: str  # BIGINT area key, NULL when in no area (meaningful only when not unsure)
    unsure: str  # boolean
    lookup_join: str = ""  # LEFT JOIN clause bringing the lookup class in as column cls_<i>


def zoning_sql(plan: ZoningPlan, i: int, x: str, y: str) -> ZoningSql:
    """SQL for zoning i, given the names of the columns holding its projected coordinates."""
    p = plan.projection
    if p is None:
        return ZoningSql("CAST(NULL AS BIGINT)", "TRUE")
    outside_validated = f"NOT {p.inside_validated_sql()}"
    if plan.lookup is None:
        size, c = plan.grid_size, plan.compact
        ix, iy = f"CAST(floor({x} / {num(size)}) AS BIGINT)", f"CAST(floor({y} / {num(size)}) AS BIGINT)"
        unsure = (f"({outside_validated} OR {_near_edge(x, 0.0, size, p.guard)} "
                  f"OR {_near_edge(y, 0.0, size, p.guard)}")
        if c is None:
            return ZoningSql(f"(({ix} + {KEY_OFFSET}) * {KEY_BASE} + ({iy} + {KEY_OFFSET}))", unsure + ")")
        unsure += f" OR NOT ({ix} BETWEEN {c.ix0} AND {c.ix0 + c.nx - 1} AND {iy} BETWEEN {c.iy0} AND {c.iy0 + c.ny - 1}))"
        return ZoningSql(f"(({ix} - {c.ix0}) * {c.ny} + ({iy} - {c.iy0}))", unsure)
    lk = plan.lookup
    gx, gy = f"floor(({x} - {num(lk.x0)}) / {num(lk.cell)})", f"floor(({y} - {num(lk.y0)}) / {num(lk.cell)})"
    lk_sql = (f"CASE WHEN {gx} >= 0 AND {gx} < {lk.nx} AND {gy} >= 0 AND {gy} < {lk.ny} "
              f"THEN CAST({gx} AS BIGINT) * {lk.ny} + CAST({gy} AS BIGINT) END")
    cls = f"cls_{i}"
    key = f"CASE WHEN {cls} >= 0 THEN {cls} END"
    unsure = (f"({outside_validated} OR coalesce({cls} = {BOUNDARY}, FALSE) "
              f"OR {_near_edge(x, lk.x0, lk.cell, p.guard)} OR {_near_edge(y, lk.y0, lk.cell, p.guard)})")
    join = f"LEFT JOIN lookup_{i} ON lookup_{i}.lk = {lk_sql}"
    return ZoningSql(key, unsure, join)

