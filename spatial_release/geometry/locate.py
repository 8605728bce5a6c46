"""The policy's geometry as objects that place points exactly: a grid or polygon zones, plus linked zonings.

The counting step assigns most pings in SQL (`counting.plan`); these objects are the exact reference it
falls back to for unsure points, and they give the area hierarchy and geometries.
"""

from __future__ import annotations

from typing import Protocol

import geopandas as gpd
import numpy as np
import pandas as pd

from spatial_release.geometry.grid import Grid
from spatial_release.geometry.zones import ZoneLayer
from spatial_release.policy import Policy, ZonesGeometry


class Locator(Protocol):
    def locate(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray: ...
    def locate_keys(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray: ...
    def ids_of_keys(self, keys: np.ndarray) -> np.ndarray: ...
    def hierarchy(self, cell_ids: pd.Series) -> pd.DataFrame: ...
    def geometries(self, cell_ids: pd.Series) -> gpd.GeoSeries: ...


def make_locator(policy: Policy) -> Locator:
    if policy.geometry.kind == "grid":
        return Grid(policy.geometry)
    return ZoneLayer(policy.geometry, policy.resolve(policy.geometry.path))


def make_linked_locators(policy: Policy) -> dict[str, ZoneLayer]:
    """One zone layer per linked zoning, by name."""
    return {
        z.name: ZoneLayer(ZonesGeometry(kind="zones", path=z.path, id=z.id, parents=z.parents), policy.resolve(z.path))
        for z in policy.geometry.linked
    }
