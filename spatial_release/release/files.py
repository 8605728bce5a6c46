"""The files of a release folder `<releases>/<dataset>/<period>/`: the published tables (cells.parquet,
margins.parquet), where a release lives, and the sha256 of its files."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import geopandas as gpd
import pandas as pd

from spatial_release.fileio import atomic_path, sha256_file
from spatial_release.period import Period
from spatial_release.policy import Policy

RELEASE_FILES = ("cells.parquet", "margins.parquet")


@dataclass(frozen=True)
class ReleaseTables:
    cells: gpd.GeoDataFrame
    margins: pd.DataFrame


def release_tables(
    cells: pd.DataFrame,
    margins: pd.DataFrame,
    geometries: Callable[[pd.Series], gpd.GeoSeries],
    count_column: str,
) -> ReleaseTables:
    """The published tables of a protection's published figures (withheld ones are absent): `cells`
    (cell_id, bucket_start, n) and `margins` (level, area_id, bucket_start, n), the count as `count_column`
    (`n_persons` or `n_devices`), each cell with its geometry from `geometries` (the main geometry's cell ids
    to their polygons). The caller hands frames and a function, so the release format needs neither the
    protection's types nor the geometry package."""
    cells, margins = published_frames(cells, margins, count_column)
    return ReleaseTables(gpd.GeoDataFrame(cells, geometry=geometries(cells["cell_id"])), margins)


def published_frames(cells: pd.DataFrame, margins: pd.DataFrame, count_column: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The columns `release_tables` publishes, without the cells' geometry: (cell_id, bucket_start, count) and
    (level, area_id, bucket_start, count), the count as `count_column`, in 64 bits."""
    cells = cells.rename(columns={"n": count_column})[["cell_id", "bucket_start", count_column]]
    cells[count_column] = cells[count_column].astype("int64")
    margins = margins.rename(columns={"n": count_column})[["level", "area_id", "bucket_start", count_column]]
    margins[count_column] = margins[count_column].astype("int64")
    return cells, margins.reset_index(drop=True)


def write_tables(tables: ReleaseTables, folder: Path) -> None:
    """Write cells.parquet (GeoParquet) and margins.parquet into `folder`, each file atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "cells.parquet") as tmp:
        tables.cells.to_parquet(tmp, index=False)
    with atomic_path(folder / "margins.parquet") as tmp:
        tables.margins.to_parquet(tmp, index=False)


def read_tables(folder: Path, geometry: bool = True) -> ReleaseTables:
    """The release files in `folder`. `geometry` False leaves the cells' geometry column as the file's WKB
    bytes, undecoded: the checks and the audit read keys and counts only, and need no cell's polygon decoded
    into shapely. The column
    is still there (the identifier check compares the files' columns with the schema), and a null stays null."""
    cells = gpd.read_parquet(folder / "cells.parquet") if geometry else pd.read_parquet(folder / "cells.parquet")
    return ReleaseTables(cells, pd.read_parquet(folder / "margins.parquet"))


def release_dir(releases_root: Path, policy: Policy, period: Period) -> Path:
    """`<releases_root>/<dataset>/<period>`: where a release of `policy` for `period` is published."""
    return releases_root / policy.name / period.label


def file_hashes(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """The sha256 of each named file in `folder`, by name: what a record's `files` holds."""
    return {name: sha256_file(folder / name) for name in names}
