"""How many valid pings fall outside the policy's geometry, and what that most likely means.

A month of trips with latitude and longitude swapped passes every per-row validation (both are in range)
and then lands outside the geometry, so that month silently goes missing from the release. The coverage
check turns that into a blocking figure with a policy ceiling (`source.max_outside_share`) and a report
that says what looks wrong: the tested hypotheses are a swap of the axes and a flipped sign, each judged by
how many of the outside points it would bring inside the geometry's bounds.

"Outside" means: in no zone of a zones geometry (the counting step's own figure), or, for a grid (which has
a cell for every point), outside the area of use of the grid's CRS (widened by 10 degrees), where its
projection is not meant to be used and where a real trace of the policy's region has no business being:
such pings are not counted (counting.counts.usable_area), only reported as outside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyproj import CRS

Bounds = tuple[float, float, float, float]  # min lon, min lat, max lon, max lat (EPSG:4326)

# A hypothesis is reported only when it explains most outside points; a few strays explain nothing.
EXPLAINS = 0.5


# Degrees added around a grid CRS's area of use: grids are used a little beyond it (a city across a UTM zone
# edge), while the errors this catches (swapped axes, a flipped sign) land tens of degrees away.
AREA_OF_USE_MARGIN_DEG = 10.0


def crs_area_of_use(crs: str, margin: float = AREA_OF_USE_MARGIN_DEG) -> Bounds:
    """The CRS's area of use widened by `margin` degrees (clipped to the globe)."""
    area = CRS.from_user_input(crs).area_of_use
    if area is None:
        return (-180.0, -90.0, 180.0, 90.0)
    return (
        max(area.west - margin, -180.0),
        max(area.south - margin, -90.0),
        min(area.east + margin, 180.0),
        min(area.north + margin, 90.0),
    )


def _inside(lon: np.ndarray, lat: np.ndarray, bounds: Bounds) -> np.ndarray:
    west, south, east, north = bounds
    return (lon >= west) & (lon <= east) & (lat >= south) & (lat <= north)


def diagnose(lon: np.ndarray, lat: np.ndarray, bounds: Bounds) -> str:
    """A sentence on what the outside points look like, from the hypotheses that explain most of them."""
    lon, lat = np.asarray(lon, float), np.asarray(lat, float)
    n = len(lon)
    if n == 0:
        return "no point falls outside the geometry"
    box = ", ".join(f"{v:.4f}" for v in bounds)
    in_box = int(_inside(lon, lat, bounds).sum())
    hypotheses = {
        "latitude and longitude swapped": _inside(lat, lon, bounds),
        "longitude with the wrong sign": _inside(-lon, lat, bounds),
        "latitude with the wrong sign": _inside(lon, -lat, bounds),
    }
    explained = [(int(mask.sum()), name) for name, mask in hypotheses.items() if mask.sum() >= EXPLAINS * n]
    parts = [f"{n - in_box:,} of the {n:,} outside points fall outside the geometry's bounds (lon/lat {box})"]
    for count, name in sorted(explained, reverse=True):
        parts.append(f"{count:,} of them fall inside the bounds with {name}: the file's coordinate columns look wrong")
    if not explained and in_box < EXPLAINS * n:
        parts.append(
            "no axis swap or sign flip brings them inside: the traces may be of another region, or "
            "the policy's geometry the wrong file"
        )
    return "; ".join(parts)


@dataclass(frozen=True)
class Coverage:
    """Outside-geometry figures of one release's valid pings (aggregates only)."""

    pings_valid: int
    pings_outside: int
    limit: float
    diagnosis: str
    by_file: dict[str, tuple[int, int]]  # file name -> (outside, valid)

    @property
    def share(self) -> float:
        return self.pings_outside / self.pings_valid if self.pings_valid else 0.0

    def problem(self) -> str | None:
        """A sentence naming the files and what looks wrong when the share is over the limit, else None."""
        if self.share <= self.limit:
            return None
        worst = sorted(self.by_file.items(), key=lambda item: -item[1][0] / max(item[1][1], 1))
        files = "; ".join(f"{name}: {out:,} of {valid:,} ({out / max(valid, 1):.1%})" for name, (out, valid) in worst if out)
        return (
            f"{self.pings_outside:,} of {self.pings_valid:,} valid pings ({self.share:.2%}) fall outside the "
            f"geometry, over the policy's source.max_outside_share of {self.limit:.2%}; by file: {files} (names in "
            f"the work area's ingest/ingest.json); "
            f"{self.diagnosis}"
        )
