"""Pings on the counting paths' hard cases, shared by the counting tests (SQL, packed, array scan, Spark):
points on or a few micrometres from grid cell edges, and zones with pings in no zone and on a shared edge."""

from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
from pyproj import Transformer
from shapely import box

from spatial_release.policy import Policy, parse_policy
from support.fixture import policy_dict


def edge_points(crs: str, size: int, n: int, seed: int, spread: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """n points on or within a few micrometres of cell edges of a `size` grid in `crs`, around its origin area."""
    rng = np.random.default_rng(seed)
    to_lonlat = Transformer.from_crs(crs, "EPSG:4326", always_xy=True)
    centre = Transformer.from_crs("EPSG:4326", crs, always_xy=True).transform(
        *{"EPSG:32618": (-74.05, 40.72), "EPSG:3035": (10.0, 52.0), "EPSG:3857": (-74.05, 40.72)}[crs]
    )
    ix = np.floor(centre[0] / size) + rng.integers(-spread, spread, n)
    iy = np.floor(centre[1] / size) + rng.integers(-spread, spread, n)
    offset = rng.choice([0.0, 1e-6, -1e-6, 3e-6, -3e-6, 0.5], n)
    along = rng.uniform(0, size, n)
    on_x = rng.random(n) < 0.5
    x = np.where(on_x, ix * size + offset, ix * size + along)
    y = np.where(on_x, iy * size + along, iy * size + offset)
    return to_lonlat.transform(x, y)


def zones_file(tmp_path: Path) -> Path:
    """Three lon/lat zones: z1 and z2 share the edge lon = -74.05; z3 is a triangle inside z2's bounding box
    but separate from it."""
    zones = gpd.GeoDataFrame(
        {"zone": ["z2", "z1", "z3"], "district": ["d1", "d1", "d2"]},
        geometry=[box(-74.05, 40.70, -74.00, 40.75), box(-74.10, 40.70, -74.05, 40.75), box(-74.00, 40.75, -73.98, 40.77)],
        crs="EPSG:4326",
    )
    path = tmp_path / "zones.geojson"
    zones.to_file(path, driver="GeoJSON")
    return path


def zones_policy_dict(folder: Path, **overrides) -> dict:
    """A policy (as a dict) over `zones_file`'s zones, written into `folder`, with their districts as parents."""
    geometry = {
        "kind": "zones",
        "path": str(zones_file(folder)),
        "id": "zone",
        "parents": [{"level": "district", "column": "district"}],
    }
    return policy_dict("unused.csv", geometry=geometry, **overrides)


def zones_with_pings_in_no_zone(tmp_path: Path) -> tuple[Policy, Path]:
    """An hourly policy over `zones_file`'s zones and integer-id pings of which some lie in no zone and some
    on the edge two zones share (unsure: the exact assignment decides): for the counting paths' comparisons."""
    rng = np.random.default_rng(8)
    n = 2_000
    lon = np.concatenate([rng.uniform(-74.12, -73.96, n), np.full(40, -74.05), np.full(40, -74.10)])
    lat = np.concatenate([rng.uniform(40.68, 40.79, n), rng.uniform(40.70, 40.75, 40), rng.uniform(40.6, 40.8, 40)])
    pings = pd.DataFrame(
        {
            "unit": rng.integers(0, 60, len(lon)).astype(np.int64),
            "ts": pd.Timestamp("2018-02-01T10:00:00Z") + pd.to_timedelta(rng.integers(0, 6 * 3600, len(lon)), unit="s"),
            "lon": lon,
            "lat": lat,
        }
    )
    path = tmp_path / "pings.parquet"
    pings.to_parquet(path)
    data = zones_policy_dict(tmp_path, time={"bucket": "1h", "timezone": "America/New_York"})
    return parse_policy(data, tmp_path / "inline.yaml"), path
