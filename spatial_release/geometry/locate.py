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
from spatial_release.policy import Policy, ZonesGeometry


class Locator(Protocol):
    def locate(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray: ...
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


@dataclass(frozen=True)
class LocateResult:
    located_path: Path
    outside_path: Path
    pings_located: int
    pings_outside: int


def linked_column(name: str) -> str:
    return f"zone_{name}"


def located_schema(linked: dict[str, Locator]) -> pa.Schema:
    fields = [("unit", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("cell_id", pa.string())]
    return pa.schema(fields + [(linked_column(name), pa.string()) for name in linked])


def locate_pings(pings_path: Path, locator: Locator, out_dir: Path, linked: dict[str, Locator] | None = None,
                 batch_rows: int = 1_000_000) -> LocateResult:
    """Write `located.parquet` (unit, ts, cell_id, and zone_<name> per linked zoning, null outside it) and
    `outside.parquet` (pings in no cell of the main geometry, kept for review)."""
    linked = linked or {}
    schema = located_schema(linked)
    located_path, outside_path = out_dir / "located.parquet", out_dir / "outside.parquet"
    source = pq.ParquetFile(pings_path)
    inside_n = outside_n = 0
    with atomic_path(located_path) as located_tmp, atomic_path(outside_path) as outside_tmp:
        with pq.ParquetWriter(located_tmp, schema) as located, \
                pq.ParquetWriter(outside_tmp, source.schema_arrow) as outside:
            for batch in source.iter_batches(batch_size=batch_rows, columns=["unit", "ts", "lon", "lat"]):
                cells = locator.locate(batch.column("lon").to_numpy(), batch.column("lat").to_numpy())
                keep = pd.notna(cells)
                inside = batch.filter(pa.array(keep))
                lon, lat = inside.column("lon").to_numpy(), inside.column("lat").to_numpy()
                columns = {
                    "unit": inside.column("unit"),
                    "ts": inside.column("ts").cast(pa.timestamp("us", tz="UTC")),
                    "cell_id": pa.array(cells[keep].tolist(), pa.string()),
                }
                for name, layer in linked.items():
                    columns[linked_column(name)] = pa.array(layer.locate(lon, lat).tolist(), pa.string())
                located.write_table(pa.table(columns, schema=schema))
                rest = batch.filter(pc.invert(pa.array(keep)))
                outside.write_batch(rest)
                inside_n += inside.num_rows
                outside_n += rest.num_rows
    return LocateResult(located_path, outside_path, inside_n, outside_n)
