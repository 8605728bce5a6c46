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
import pyarrow as pa
from pyproj import CRS

from spatial_release.counting.engines import DuckDBEngine
from spatial_release.geometry.grid import KEY_BASE, KEY_OFFSET, Grid, cell_name
from spatial_release.geometry.lookup import BOUNDARY, ZoneLookup, build_zone_lookup
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
    compact: CompactGrid | None = None  # grid keys numbered within the pings' extent (small integers)
    key_bound: int | None = None  # every area key is in [0, key_bound); None: keys are not small
    key_hierarchy: Callable[[np.ndarray], pd.DataFrame] | None = None  # `hierarchy` of the areas of these keys

    @property
    def keys_sort_like_ids(self) -> bool:
        """Whether area keys compare like the area ids (as strings), so a key can stand for its id's rank.
        Zones: numbered in the order of their ids, which is the string order unless the ids are numbers (9 < 10,
        '10' < '9'): checked. Compact grid cells ('{size}mE{x}N{y}'): when every x and every y in the box has
        the same number of digits and no sign, ids compare like (ix, iy), which is the key order."""
        if self.compact is None:
            if self.lookup is None or self.key_bound is None:
                return False
            ids = self.ids_of_keys(np.arange(self.key_bound, dtype=np.int64)).astype(str)
            return bool(np.all(ids[:-1] < ids[1:]))
        assert self.grid_size is not None  # a compact grid is a grid
        c, size = self.compact, int(self.grid_size)
        xs, ys = (c.ix0 * size, (c.ix0 + c.nx - 1) * size), (c.iy0 * size, (c.iy0 + c.ny - 1) * size)
        return min(*xs, *ys) >= 0 and len(str(xs[0])) == len(str(xs[1])) and len(str(ys[0])) == len(str(ys[1]))

    @property
    def method(self) -> str:
        if self.projection is None:
            return "exact assignment of every distinct coordinate (no SQL projection for this CRS)"
        if self.lookup is not None:
            return (
                f"SQL {self.projection.method} projection + {self.lookup.nx} x {self.lookup.ny} lookup grid "
                f"({self.lookup.boundary_share:.1%} boundary cells assigned exactly)"
            )
        return f"SQL {self.projection.method} projection, exact assignment within {self.projection.guard:g} of an edge"


def evaluate_with(engine):
    """Evaluates a SQL projection on `engine` itself, so it is validated where it will run."""

    def evaluate(projection: SqlProjection, lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(engine, DuckDBEngine):  # the points as an Arrow view, the result as numpy: no copies
            con = engine.con
            con.register("validation_points_arrow", pa.table({"i": np.arange(len(lon)), "lon": lon, "lat": lat}))
            try:
                out = con.execute(projection.relation("validation_points_arrow", ["i"], "x", "y")).fetchnumpy()
            finally:
                con.unregister("validation_points_arrow")
            order = np.argsort(np.asarray(out["i"]), kind="stable")  # in the points' order, whatever the threads did
            return np.asarray(out["x"], float)[order], np.asarray(out["y"], float)[order]
        engine.register_frame("validation_points", pd.DataFrame({"lon": lon, "lat": lat}))
        result = engine.fetch(projection.relation("validation_points", [], "x", "y"))
        return result["x"].to_numpy(float), result["y"].to_numpy(float)

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
    def around(cls, grid: Grid, extent: Extent) -> CompactGrid | None:
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


def grid_plan(
    level: str, grid: Grid, parent_levels: tuple[str, ...], evaluate=None, extent: Extent | None = None
) -> ZoningPlan:
    projection = choose_projection(grid.crs, evaluate, extent)
    compact = CompactGrid.around(grid, extent) if extent is not None else None
    if compact is None:
        return ZoningPlan(
            level,
            parent_levels,
            TOTAL,
            projection,
            grid.locate_keys,
            grid.ids_of_keys,
            grid.hierarchy,
            grid_size=float(grid.spec.size_m),
        )

    def exact_keys(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        return compact.encode(*grid.indices(lon, lat))

    def ids_of_keys(keys: np.ndarray) -> np.ndarray:
        return cell_name(grid.spec.size_m, *compact.decode(keys))

    def key_hierarchy(keys: np.ndarray) -> pd.DataFrame:
        """`grid.hierarchy` of the cells of these keys, from their indices (no ids parsed)."""
        ix, iy = compact.decode(keys)
        table = pd.DataFrame({"cell_id": cell_name(grid.spec.size_m, ix, iy)})
        for size, level in zip(grid.spec.parents_m, grid.spec.level_names()):
            factor = size // grid.spec.size_m
            table[level] = cell_name(size, ix // factor, iy // factor)
        return table

    return ZoningPlan(
        level,
        parent_levels,
        TOTAL,
        projection,
        exact_keys,
        ids_of_keys,
        grid.hierarchy,
        grid_size=float(grid.spec.size_m),
        compact=compact,
        key_bound=compact.nx * compact.ny,
        key_hierarchy=key_hierarchy,
    )


def zones_plan(
    level: str,
    layer: ZoneLayer,
    parent_levels: tuple[str, ...],
    total_level: str,
    evaluate=None,
    max_lookup_cells: int = 1_000_000,
    extent: Extent | None = None,
) -> ZoningPlan:
    projection = choose_projection(layer.crs, evaluate, extent)
    lookup = build_zone_lookup(layer, max_lookup_cells) if projection is not None else None
    table = layer.parent_table()

    def hierarchy(ids: pd.Series) -> pd.DataFrame:
        return pd.DataFrame({"cell_id": ids.to_numpy()}).merge(table, on="cell_id", how="left")

    return ZoningPlan(
        level,
        parent_levels,
        total_level,
        projection,
        layer.locate_keys,
        layer.ids_of_keys,
        hierarchy,
        lookup=lookup,
        key_bound=len(layer.frame),
    )


Layer = tuple[tuple[str, str], ...]  # (column, expression over earlier columns), computed in one SELECT


def _cell_layers(i: int, x: str, y: str, x0: float, y0: float, size: float) -> tuple[Layer, Layer]:
    """Columns fx_i, fy_i (the position in units of `size` past (x0, y0)) and gx_i, gy_i (their floors): the
    cell, and how close to its edges the point is, from one division and one floor per coordinate."""
    fx = f"({x} / {num(size)})" if x0 == 0 else f"(({x} - {num(x0)}) / {num(size)})"
    fy = f"({y} / {num(size)})" if y0 == 0 else f"(({y} - {num(y0)}) / {num(size)})"
    return ((f"fx_{i}", fx), (f"fy_{i}", fy)), ((f"gx_{i}", f"floor(fx_{i})"), (f"gy_{i}", f"floor(fy_{i})"))


def _near_edge(i: int, size: float, guard: float) -> str:
    """True when the point lies within `guard` (CRS units) of an edge of its cell: its fractional position
    in the cell, fx_i - gx_i, is within guard / size of 0 or 1. (The rounding of that fraction is below
    1e-12 cells, far inside the guard band, whose width the SQL projection's error is a tenth of.)"""
    g = guard / size
    return (
        f"(fx_{i} - gx_{i} < {num(g)} OR fx_{i} - gx_{i} > {num(1 - g)} "
        f"OR fy_{i} - gy_{i} < {num(g)} OR fy_{i} - gy_{i} > {num(1 - g)})"
    )


@dataclass(frozen=True)
class ZoningSql:
    key: str  # BIGINT area key, NULL when in no area (meaningful only when not unsure)
    unsure: str  # boolean
    lookup_join: str = ""  # LEFT JOIN clause bringing the lookup class in as column cls_<i>
    layers: tuple[Layer, ...] = ()  # columns the key, the unsure test and the join read, computed first


def zoning_sql(plan: ZoningPlan, i: int, x: str, y: str) -> ZoningSql:
    """SQL for zoning i, given the names of the columns holding its projected coordinates."""
    p = plan.projection
    if p is None:
        return ZoningSql("CAST(NULL AS BIGINT)", "TRUE")
    outside_validated = f"NOT {p.inside_validated_sql()}"
    gx, gy = f"CAST(gx_{i} AS BIGINT)", f"CAST(gy_{i} AS BIGINT)"
    if plan.lookup is None:
        size, c = plan.grid_size, plan.compact
        assert size is not None  # no lookup: a grid, whose plan has its cell size
        layers = _cell_layers(i, x, y, 0.0, 0.0, size)
        unsure = f"({outside_validated} OR {_near_edge(i, size, p.guard)}"
        if c is None:
            return ZoningSql(f"(({gx} + {KEY_OFFSET}) * {KEY_BASE} + ({gy} + {KEY_OFFSET}))", unsure + ")", layers=layers)
        unsure += (
            f" OR NOT (gx_{i} BETWEEN {c.ix0} AND {c.ix0 + c.nx - 1} AND gy_{i} BETWEEN {c.iy0} AND {c.iy0 + c.ny - 1}))"
        )
        return ZoningSql(f"(({gx} - {c.ix0}) * {c.ny} + ({gy} - {c.iy0}))", unsure, layers=layers)
    lk = plan.lookup
    layers = _cell_layers(i, x, y, lk.x0, lk.y0, lk.cell)
    lk_sql = (
        f"CASE WHEN gx_{i} >= 0 AND gx_{i} < {lk.nx} AND gy_{i} >= 0 AND gy_{i} < {lk.ny} THEN {gx} * {lk.ny} + {gy} END"
    )
    cls = f"cls_{i}"
    key = f"CASE WHEN {cls} >= 0 THEN {cls} END"
    unsure = f"({outside_validated} OR coalesce({cls} = {BOUNDARY}, FALSE) OR {_near_edge(i, lk.cell, p.guard)})"
    join = f"LEFT JOIN lookup_{i} ON lookup_{i}.lk = {lk_sql}"
    return ZoningSql(key, unsure, join, layers)
