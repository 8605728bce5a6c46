"""The validated pings as the engine's `pings` view: those a count may place, and those beyond the
geometry's usable area (outside a grid CRS's area of use), which are reported as outside and never counted."""

from __future__ import annotations

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


def register_pings(engine: Engine, pings: Sequence[Path], area: tuple[float, float, float, float] | None) -> None:
    """`pings`: the validated pings inside `area` (all of them when it is None); `pings_beyond`: the others."""
    engine.register_parquet("pings_all", pings)
    inside = "TRUE"
    if area is not None:
        west, south, east, north = area
        inside = f"lon BETWEEN {west!r} AND {east!r} AND lat BETWEEN {south!r} AND {north!r}"
    engine.view("pings", f"SELECT * FROM pings_all WHERE {inside}")
    engine.view("pings_beyond", f"SELECT * FROM pings_all WHERE NOT ({inside})")


def data_extent(engine: Engine, pings: Sequence[Path], area: tuple[float, float, float, float] | None = None
                ) -> tuple[float, float, float, float] | None:
    """(west, south, east, north) of the pings inside `area`, or None when there are none."""
    register_pings(engine, pings, area)
    row = engine.fetch("SELECT min(lon) AS w, min(lat) AS s, max(lon) AS e, max(lat) AS n FROM pings").iloc[0]
    values = tuple(float(row[c]) for c in ("w", "s", "e", "n"))
    return None if any(pd.isna(v) for v in values) else values  # type: ignore[return-value]
