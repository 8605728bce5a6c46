"""The validated pings as the engine's `pings` view: those a count may place, and those beyond the
geometry's usable area (outside a grid CRS's area of use), which are reported as outside and never counted."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from spatial_release.counting.engines import Engine
from spatial_release.geometry.coverage import crs_area_of_use
from spatial_release.policy import Policy


def usable_area(policy: Policy) -> tuple[float, float, float, float] | None:
    """Lon/lat box outside which a ping is outside the geometry before any counting: a grid has a cell for
    every point, but outside its CRS's area of use the projection is extrapolated and a ping there (a
    swapped latitude and longitude, say) would be counted in a cell thousands of km away. None for zones,
    whose own polygons decide."""
    if policy.geometry.kind != "grid":
        return None
    return crs_area_of_use(policy.geometry.crs)


def footer_extent(pings: Sequence[Path]) -> tuple[float, float, float, float] | None:
    """(west, south, east, north) of the pings from the Parquet footers' statistics (no scan), or None when a
    file lacks them for lon or lat, holds a NULL there, or cannot be read this way. Only a shortcut: the
    fitted projection treats any ping outside the extent it was validated on as unsure (assigned by
    pyproj), so even a wrong statistic could not misplace a ping."""
    import pyarrow.parquet as pq

    bounds = [math.inf, math.inf, -math.inf, -math.inf]
    try:
        for path in pings:
            meta = pq.ParquetFile(path).metadata
            names = [meta.schema.column(i).path for i in range(meta.num_columns)]
            columns = {name: names.index(name) for name in ("lon", "lat")}
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                if group.num_rows == 0:
                    continue
                for name, i in columns.items():
                    stats = group.column(i).statistics
                    if stats is None or not stats.has_min_max or stats.null_count != 0:
                        return None
                    low, high = (0, 2) if name == "lon" else (1, 3)
                    bounds[low] = min(bounds[low], float(stats.min))
                    bounds[high] = max(bounds[high], float(stats.max))
    except Exception:  # no footer statistics to trust: the caller scans
        return None
    return tuple(bounds) if all(math.isfinite(v) for v in bounds) else None  # type: ignore[return-value]


def area_filter(
    pings: Sequence[Path], area: tuple[float, float, float, float] | None
) -> tuple[float, float, float, float] | None:
    """The box the pings must be filtered on (`area`), or None when there is no area or the files' footers
    show every ping inside it."""
    if area is None:
        return None
    west, south, east, north = area
    extent = footer_extent(pings)
    if extent is not None and west <= extent[0] and extent[2] <= east and south <= extent[1] and extent[3] <= north:
        return None
    return area


def register_pings(engine: Engine, pings: Sequence[Path], area: tuple[float, float, float, float] | None) -> None:
    """`pings`: the validated pings inside `area` (all of them when it is None); `pings_beyond`: the others.
    When the files' footers show every ping inside `area`, no filter is applied (and none scanned for)."""
    engine.register_parquet("pings_all", pings)
    inside = "TRUE"
    box = area_filter(pings, area)
    if box is not None:
        west, south, east, north = box
        inside = f"lon BETWEEN {west!r} AND {east!r} AND lat BETWEEN {south!r} AND {north!r}"
    engine.view("pings", f"SELECT * FROM pings_all WHERE {inside}" if inside != "TRUE" else "SELECT * FROM pings_all")
    engine.view("pings_beyond", f"SELECT * FROM pings_all WHERE NOT ({inside})")


def data_extent(
    engine: Engine, pings: Sequence[Path], area: tuple[float, float, float, float] | None = None
) -> tuple[float, float, float, float] | None:
    """(west, south, east, north) of the pings inside `area`, or None when there are none: from the footers'
    statistics when they lie inside `area`, else by a scan."""
    register_pings(engine, pings, area)
    extent = footer_extent(pings)
    if extent is not None and (
        area is None or (area[0] <= extent[0] and extent[2] <= area[2] and area[1] <= extent[1] and extent[3] <= area[3])
    ):
        return extent
    row = engine.fetch("SELECT min(lon) AS w, min(lat) AS s, max(lon) AS e, max(lat) AS n FROM pings").iloc[0]
    values = tuple(float(row[c]) for c in ("w", "s", "e", "n"))
    return None if any(pd.isna(v) for v in values) else values  # type: ignore[return-value]
