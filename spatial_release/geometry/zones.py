"""Polygon zones from a file (GeoJSON, GeoPackage, GeoParquet, shapefile) with parent levels.

A point on the boundary of two zones belongs to the zone with the smallest id, so the assignment is
deterministic and every ping is counted at most once.
"""

from __future__ import annotations

from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely
from pyproj import CRS, Transformer
from shapely import STRtree, points

from spatial_release.errors import UserError
from spatial_release.policy import ZonesGeometry


class ZoneFileError(UserError, ValueError):
    """The zones file cannot serve as geometry; the message names the file and the column."""


def read_zones(path: Path, spec: ZonesGeometry) -> gpd.GeoDataFrame:
    try:
        frame = gpd.read_parquet(path) if path.suffix.lower() in (".parquet", ".geoparquet") else gpd.read_file(path)
    except Exception as exc:  # the drivers raise many types; all mean "not a readable zones file"
        raise ZoneFileError(f"{path}: cannot read zones: {exc}") from None
    if frame.crs is None:
        raise ZoneFileError(f"{path}: the zones file has no CRS")
    needed = [spec.id, *(p.column for p in spec.parents if p.column)]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ZoneFileError(f"{path}: missing column(s) {missing}; it has {sorted(map(str, frame.columns))}")
    ids = frame[spec.id]
    if ids.isna().any():
        raise ZoneFileError(f"{path}: column {spec.id!r} is empty in row(s) {list(np.flatnonzero(ids.isna())[:5])}")
    frame = frame.assign(**{spec.id: ids.astype(str)})
    duplicated = frame[spec.id][frame[spec.id].duplicated()].unique()
    if len(duplicated):
        raise ZoneFileError(f"{path}: zone id(s) {list(duplicated[:5])} appear more than once in {spec.id!r}")
    frame = frame.sort_values(spec.id).reset_index(drop=True)
    _refuse_shapeless_zones(path, frame, spec.id)
    _refuse_overlapping_zones(path, frame, spec.id)
    return frame


# Zones that overlap by more than this share of the smaller one are refused; below it (the slivers of digitised
# boundaries: real ward files overlap their neighbours by a fraction of a percent) a point in both belongs to
# the zone with the smallest id, as on a shared boundary.
OVERLAP_SHARE = 0.01


def _refuse_shapeless_zones(path: Path, frame: gpd.GeoDataFrame, id_column: str) -> None:
    """A zone with no polygon (missing, empty, a point or line, zero area) holds no area a figure could describe,
    and an invalid polygon (self-intersecting) makes the point-in-zone test unreliable: refused by zone id."""
    geometry = frame.geometry
    kinds = geometry.geom_type.fillna("missing")
    polygonal = kinds.isin(["Polygon", "MultiPolygon"]).to_numpy()
    problems = {
        "missing or empty": (geometry.isna() | geometry.is_empty).to_numpy(),
        "not a polygon": ~polygonal & ~geometry.isna().to_numpy(),
        # a polygon of zero area (along a line, a bow tie whose halves cancel) is invalid too
        "not a valid polygon (e.g. of zero area or self-intersecting)": polygonal & ~geometry.is_valid.to_numpy(),
    }
    for what, bad in problems.items():
        if bad.any():
            ids = frame[id_column].to_numpy()[bad][:5].tolist()
            raise ZoneFileError(f"{path}: zone(s) {ids} in {id_column!r}: geometry {what}; each zone must be an area")


def _refuse_overlapping_zones(path: Path, frame: gpd.GeoDataFrame, id_column: str) -> None:
    """Zones that overlap by more than OVERLAP_SHARE of the smaller one: a unit there would be counted in one
    of them only, so the other's figure would not describe its polygon."""
    geometry = frame.geometry.to_numpy()
    left, right = STRtree(geometry).query(geometry, predicate="intersects")
    pairs = left < right
    left, right = left[pairs], right[pairs]
    if not len(left):
        return
    shared = shapely.area(shapely.intersection(geometry[left], geometry[right]))
    smaller = np.minimum(shapely.area(geometry[left]), shapely.area(geometry[right]))
    share = shared / smaller
    over = np.flatnonzero(share > OVERLAP_SHARE)
    if len(over):
        worst = over[np.argmax(share[over])]
        ids = frame[id_column].to_numpy()
        raise ZoneFileError(
            f"{path}: zones {ids[left[worst]]!r} and {ids[right[worst]]!r} overlap by {share[worst]:.1%} of the "
            f"smaller one ({len(over)} pair(s) over {OVERLAP_SHARE:.0%}); zones must not overlap, or a unit in both "
            "is counted in one only"
        )


class ZoneLayer:
    def __init__(self, spec: ZonesGeometry, path: Path):
        self.spec = spec
        self.path = path
        self.frame = read_zones(path, spec)
        self.crs: CRS = self.frame.crs
        self._ids = self.frame[spec.id].to_numpy(dtype=object)
        self._tree = STRtree(self.frame.geometry.to_numpy())
        self._to_zones = Transformer.from_crs("EPSG:4326", self.crs, always_xy=True)

    def locate_index(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        """Row of the zone holding each point (zones are sorted by id), -1 outside every zone."""
        x, y = self._to_zones.transform(np.asarray(lon, float), np.asarray(lat, float))
        point_idx, zone_idx = self._tree.query(points(x, y), predicate="intersects")
        chosen = np.full(len(x), -1, dtype=np.int64)
        # zones are sorted by id, so the smallest index is the smallest id: ties on boundaries go there
        order = np.lexsort((zone_idx, point_idx))
        point_idx, zone_idx = point_idx[order], zone_idx[order]
        first = np.ones(len(point_idx), dtype=bool)
        first[1:] = point_idx[1:] != point_idx[:-1]
        chosen[point_idx[first]] = zone_idx[first]
        return chosen

    def locate(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        chosen = self.locate_index(lon, lat)
        result = np.full(len(chosen), None, dtype=object)
        inside = chosen >= 0
        result[inside] = self._ids[chosen[inside]]
        return result

    def locate_keys(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        return self.locate_index(lon, lat)

    def ids_of_keys(self, keys: np.ndarray) -> np.ndarray:
        return self._ids[np.asarray(keys, np.int64)]

    def parent_table(self) -> pd.DataFrame:
        table = pd.DataFrame({"cell_id": self.frame[self.spec.id].to_numpy()})
        for parent in self.spec.parents:
            if parent.column:
                values = self.frame[parent.column]
                if values.isna().any():
                    raise ZoneFileError(f"{self.path}: parent column {parent.column!r} is empty for some zones")
                table[parent.level] = values.astype(str).to_numpy()
            else:
                table[parent.level] = table["cell_id"].str.slice(0, parent.prefix)
        return table

    def hierarchy(self, cell_ids: pd.Series) -> pd.DataFrame:
        table = self.parent_table()
        return table[table["cell_id"].isin(set(cell_ids))].reset_index(drop=True)

    def geometries(self, cell_ids: pd.Series) -> gpd.GeoSeries:
        lookup = self.frame.set_index(self.spec.id).geometry
        return gpd.GeoSeries(lookup.loc[cell_ids.to_numpy()].to_numpy(), index=cell_ids.index, crs=self.crs)
