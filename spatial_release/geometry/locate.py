"""Assign validated pings to cells, streaming in record batches so memory stays bounded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import geopandas as gpd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spatial_release.fileio import atomic_path
from spatial_release.geometry.grid import Grid
from spatial_release.geometry.zones import ZoneLayer
from spatial_release.policy import Policy


class Locator(Protocol):
    def locate(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray: ...
    def hierarchy(self, cell_ids: pd.Series) -> pd.DataFrame: ...
    def geometries(self, cell_ids: pd.Series) -> gpd.GeoSeries: ...


def make_locator(policy: Policy) -> Locator:
    if policy.geometry.kind == "grid":
        return Grid(policy.geometry)
    return ZoneLayer(policy.geometry, policy.resolve(policy.geometry.path))


@dataclass(frozen=True)
class LocateResult:
    located_path: Path
    outside_path: Path
    pings_located: int
    pings_outside: int


LOCATED_SCHEMA = pa.schema([("unit", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("cell_id", pa.string())])


def locate_pings(pings_path: Path, locator: Locator, out_dir: Path, batch_rows: int = 1_000_000) -> LocateResult:
    """Write `located.parquet` (unit, ts, cell_id) and `outside.parquet` (pings in no cell, kept for review)."""
    located_path, outside_path = out_dir / "located.parquet", out_dir / "outside.parquet"
    source = pq.ParquetFile(pings_path)
    inside_n = outside_n = 0
    with atomic_path(located_path) as located_tmp, atomic_path(outside_path) as outside_tmp:
        with pq.ParquetWriter(located_tmp, LOCATED_SCHEMA) as located, \
                pq.ParquetWriter(outside_tmp, source.schema_arrow) as outside:
            for batch in source.iter_batches(batch_size=batch_rows, columns=["unit", "ts", "lon", "lat"]):
                cells = locator.locate(batch.column("lon").to_numpy(), batch.column("lat").to_numpy())
                has_cell = pa.array(pd.notna(cells))
                inside = batch.filter(has_cell)
                located.write_table(pa.table({
                    "unit": inside.column("unit"),
                    "ts": inside.column("ts").cast(pa.timestamp("us", tz="UTC")),
                    "cell_id": pa.array(cells[pd.notna(cells)].tolist(), pa.string()),
                }, schema=LOCATED_SCHEMA))
                rest = batch.filter(pc.invert(has_cell))
                outside.write_batch(rest)
                inside_n += inside.num_rows
                outside_n += rest.num_rows
    return LocateResult(located_path, outside_path, inside_n, outside_n)
