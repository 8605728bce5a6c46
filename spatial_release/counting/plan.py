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

from spatial_release.geometry.grid import KEY_BASE, KEY_OFFSET, Grid
from spatial_release.geometry.lookup import BOUNDARY, ZoneLookup, build_zone_lookup
from pyproj import CRS

from spatial_release.geometry.sqlproj import SqlProjection, fitted_projection, num, validated_projection
from spatial_release.geometry.zones import ZoneLayer

TOTAL_LEVEL = "total"


@dataclass(frozen=True)
class ZoningPlan:
    level: str  # "cell" for the main geometry, else the linked zoning's name
    parent_levels: tuple[str, ...]
    total_level: str
    projection: SqlProjection | None  # None: no trusted SQL projection, every ping is assigned exactly
    exact_keys: Callable[[np.ndarray, np.ndarray], np.ndarray]  # -1 where the point is in no area
    ids_of_keys: Callable[[np.ndarray], np.ndarray]
    hierarchy: Callable[[pd.Series], pd.DataFrame]  # cell_id (area id) plus one column per parent level
    grid_size: float | None = None
    lookup: ZoneLookup | None = None

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


def grid_plan(level: str, grid: Grid, parent_levels: tuple[str, ...], evaluate=None,
              extent: Extent | None = None) -> ZoningPlan:
    projection = choose_projection(grid.crs, evaluate, extent)
    return ZoningPlan(level, parent_levels, TOTAL_LEVEL, projection, grid.locate_keys, grid.ids_of_keys,
                      grid.hierarchy, grid_size=float(grid.spec.size_m))


def zones_plan(level: str, layer: ZoneLayer, parent_levels: tuple[str, ...], total_level: str,
               evaluate=None, max_lookup_cells: int = 1_000_000, extent: Extent | None = None) -> ZoningPlan:
    projection = choose_projection(layer.crs, evaluate, extent)
    lookup = build_zone_lookup(layer, max_lookup_cells) if projection is not None else None
    table = layer.parent_table()

    def hierarchy(ids: pd.Series) -> pd.DataFrame:
        return pd.DataFrame({"cell_id": ids.to_numpy()}).merge(table, on="cell_id", how="left")

    return ZoningPlan(level, parent_levels, total_level, projection, layer.locate_keys, layer.ids_of_keys,
                      hierarchy, lookup=lookup)


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
        size = plan.grid_size
        key = (f"((CAST(floor({x} / {num(size)}) AS BIGINT) + {KEY_OFFSET}) * {KEY_BASE} "
               f"+ (CAST(floor({y} / {num(size)}) AS BIGINT) + {KEY_OFFSET}))")
        unsure = (f"({outside_validated} OR {_near_edge(x, 0.0, size, p.guard)} "
                  f"OR {_near_edge(y, 0.0, size, p.guard)})")
        return ZoningSql(key, unsure)
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

