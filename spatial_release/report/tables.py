"""The published tables for reading: their column schema, a preview of their first rows, and figures
rounded to 4 significant digits (the exact values stay in the files and in release.json)."""

from __future__ import annotations

import json
import math
from numbers import Integral, Real
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import shapely
from pyproj import CRS

from spatial_release.release import BUCKET_START

SIGNIFICANT = 4

COUNT_COLUMNS = {"n_persons": "persons", "n_devices": "devices"}
_DESCRIPTIONS = {
    "cell_id": "leaf cell of the main geometry: a grid cell named by its size and lower-left corner in the grid "
    "CRS (`<size>mE<east>N<north>`), or a zone id",
    "bucket_start": BUCKET_START,
    "level": "the area's level: a parent level of the main geometry, a linked zoning or one of its parents, or a "
    "bucket total (`total`, `<zoning>_total`)",
    "area_id": "the area within its level (a grid cell name, a zone id, or `total`)",
}


def readable(value: object) -> str:
    """A figure for reading: integers exact with thousands separators, other numbers to 4 significant
    digits, instants to the minute in UTC, None as '-'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Integral):
        return f"{int(value):,}"
    if isinstance(value, Real):
        number = float(value)
        return f"{int(number):,}" if number.is_integer() and abs(number) < 1e15 else f"{number:.{SIGNIFICANT}g}"
    if isinstance(value, pd.Timestamp):
        return value.tz_convert("UTC").strftime("%Y-%m-%d %H:%M UTC") if value.tzinfo else value.isoformat()
    if isinstance(value, shapely.Geometry):
        return geometry_summary(value)
    return str(value)


def geometry_summary(geometry: shapely.Geometry) -> str:
    """A geometry for reading: its kind, vertex count and centre. The start of its WKT at any one precision
    reads as a list of identical points (degrees to 0.1 merge a whole city) or runs past a table column."""
    if geometry.is_empty:
        return f"empty {geometry.geom_type}"
    centre = geometry.centroid
    geographic = abs(centre.x) <= 180 and abs(centre.y) <= 90  # lon/lat: 5 decimals are about a metre
    digits = 5 if geographic else 0
    vertices = shapely.get_num_coordinates(geometry)
    return f"{geometry.geom_type}, {vertices} vertices, centre ({centre.x:.{digits}f}, {centre.y:.{digits}f})"


def _geometry_crs(schema) -> str | None:
    """The CRS GeoParquet's metadata records for the primary geometry column, as `EPSG:n` where it has one."""
    try:
        geo = json.loads((schema.metadata or {})[b"geo"])
        crs = geo["columns"][geo["primary_column"]].get("crs")
    except (KeyError, ValueError):
        return None
    if crs is None:
        return "OGC:CRS84"  # GeoParquet's default when the key is absent
    parsed = CRS.from_user_input(crs)
    epsg = parsed.to_epsg()
    return f"EPSG:{epsg}" if epsg else parsed.name


def column_schema(path: Path) -> list[dict[str, str]]:
    """One entry per column of a published Parquet file (cells.parquet or margins.parquet): its `name`,
    its Arrow `type`, and a `description` of what it holds."""
    schema = pq.read_schema(path)
    crs = _geometry_crs(schema)
    out = []
    for field in schema:
        if field.name == "geometry":
            description = f"the cell's polygon as WKB (GeoParquet), CRS {crs}"
        elif field.name in COUNT_COLUMNS:
            description = (
                f"distinct {COUNT_COLUMNS[field.name]} in the area and bucket; a figure is published only "
                "if it is at least k, or if the cell is a listed structural zero (published as 0)"
            )
        else:
            description = _DESCRIPTIONS.get(field.name, "")
        out.append({"name": field.name, "type": str(field.type), "description": description})
    return out


def preview_rows(df: pd.DataFrame, n: int = 10) -> tuple[list[str], list[list[str]]]:
    """The column names and the first `n` rows of `df`, each value as `readable` text."""
    head = df.head(n)
    columns = [str(c) for c in head.columns]
    rows = [[readable(v) for v in row] for row in head.itertuples(index=False, name=None)]
    return columns, rows


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_md_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def table_preview(df: pd.DataFrame, n: int = 10) -> str:
    """The first `n` rows of a published table as a markdown table, figures rounded for reading."""
    return markdown_table(*preview_rows(df, n))


def schema_markdown(schema: list[dict[str, str]]) -> str:
    return markdown_table(
        ["column", "Arrow type", "description"], [[c["name"], c["type"], c["description"]] for c in schema]
    )
