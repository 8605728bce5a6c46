"""Square cells of `size_m` metres in a projected CRS; parents by integer division of the cell indices.

A cell is named by its lower-left corner in the grid CRS (`250mE566000N4507250`), which makes the id
meaningful, sortable by level and decodable without a lookup table. Parents are computed by floor division
of the fine indices, so a parent is exactly the union of its children (never re-projected).
"""

from __future__ import annotations

import re

import geopandas as gpd
import numpy as np
import pandas as pd
from pyproj import CRS, Transformer
from shapely import box

from spatial_release.policy import GridGeometry

CELL_ID = re.compile(r"^(\d+)mE(-?\d+)N(-?\d+)$")
# A cell as one BIGINT for the SQL engines: (ix + 2^30) * 2^31 + (iy + 2^30), valid for |ix|, |iy| < 2^30.
KEY_OFFSET = 2**30
KEY_BASE = 2**31


def encode_key(ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
    return (np.asarray(ix, np.int64) + KEY_OFFSET) * KEY_BASE + (np.asarray(iy, np.int64) + KEY_OFFSET)


def decode_key(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    key = np.asarray(key, np.int64)
    return key // KEY_BASE - KEY_OFFSET, key % KEY_BASE - KEY_OFFSET


def cell_name(size_m: int, ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
    east = (ix.astype(np.int64) * size_m).astype(str)
    north = (iy.astype(np.int64) * size_m).astype(str)
    return np.char.add(np.char.add(np.char.add(f"{size_m}mE", east), "N"), north).astype(object)


class Grid:
    def __init__(self, spec: GridGeometry):
        self.spec = spec
        self.crs = CRS.from_user_input(spec.crs)
        if not self.crs.is_projected:
            raise ValueError(f"geometry.crs {spec.crs!r} is not a projected CRS; grid cells need metres")
        self._to_grid = Transformer.from_crs("EPSG:4326", self.crs, always_xy=True)

    def indices(self, lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x, y = self._to_grid.transform(np.asarray(lon, float), np.asarray(lat, float))
        size = self.spec.size_m
        return np.floor(x / size).astype(np.int64), np.floor(y / size).astype(np.int64)

    def locate(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        ix, iy = self.indices(lon, lat)
        return cell_name(self.spec.size_m, ix, iy)

    def locate_keys(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        """The exact (pyproj) cell of each point as a BIGINT key; every point is in some cell."""
        return encode_key(*self.indices(lon, lat))

    def ids_of_keys(self, keys: np.ndarray) -> np.ndarray:
        return cell_name(self.spec.size_m, *decode_key(keys))

    def hierarchy(self, cell_ids: pd.Series) -> pd.DataFrame:
        """cell_id plus one column per parent level, derived by integer division of the indices."""
        parts = cell_ids.str.extract(CELL_ID).astype(np.int64)
        ix, iy = parts[1].to_numpy() // self.spec.size_m, parts[2].to_numpy() // self.spec.size_m
        table = pd.DataFrame({"cell_id": cell_ids.to_numpy()})
        for size, level in zip(self.spec.parents_m, self.spec.level_names()):
            factor = size // self.spec.size_m
            table[level] = cell_name(size, ix // factor, iy // factor)
        return table

    def geometries(self, cell_ids: pd.Series) -> gpd.GeoSeries:
        """Each cell's square, parsed once per distinct id (a release repeats each cell in every bucket)."""
        codes, distinct = pd.factorize(cell_ids.astype(str))
        parts = pd.Series(distinct).str.extract(CELL_ID).astype(np.int64)
        size, x0, y0 = parts[0].to_numpy(), parts[1].to_numpy(), parts[2].to_numpy()
        squares = box(x0, y0, x0 + size, y0 + size)
        return gpd.GeoSeries(squares[codes], index=cell_ids.index, crs=self.crs)
