"""The map of a release: its published cells coloured by their published counts, and one panel per margin
level showing in what share of the period's buckets each of its areas is published.

Only what the files publish is drawn. An area absent from the files is not drawn at all (the background
shows), whether it was empty or not published: the map cannot tell the two apart, and neither can its
colour scales, extent or legends, which are computed from the published figures alone.
"""

from __future__ import annotations

import io
import math

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely
from matplotlib import colors as mcolors
from matplotlib.cm import ScalarMappable
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure  # a Figure without pyplot renders with Agg and leaves the backend alone
from matplotlib.patches import Patch
from matplotlib.path import Path as MplPath

from spatial_release.levels import is_total
from spatial_release.report.view import ReleaseView

DPI = 100
PANEL_INCHES = (6.4, 5.6)
BACKGROUND = "#ffffff"
ZERO_COLOUR = "#bdbdbd"  # a cell published as 0 in every bucket in which it is published
COUNT_CMAP = "viridis"
SHARE_CMAP = "YlGnBu"


def polygon_paths(geoms: np.ndarray) -> tuple[list[MplPath], np.ndarray]:
    """One matplotlib path per polygon part of `geoms` (holes kept: exteriors counter-clockwise, holes
    clockwise, filled by the non-zero rule) and, for each path, the position of its geometry in `geoms`."""
    parts, owner = shapely.get_parts(np.asarray(geoms, dtype=object), return_index=True)
    polygons = shapely.get_type_id(parts) == 3  # a MultiPolygon's parts; anything else has no area to fill
    parts, owner = shapely.orient_polygons(parts[polygons]), owner[polygons]
    rings, ring_owner = shapely.get_rings(parts, return_index=True)
    coords, coord_ring = shapely.get_coordinates(rings, return_index=True)
    codes = np.full(len(coords), MplPath.LINETO, dtype=np.uint8)
    if len(coords):
        starts = np.r_[0, np.flatnonzero(np.diff(coord_ring)) + 1]
        codes[starts] = MplPath.MOVETO
        codes[np.r_[starts[1:] - 1, len(coords) - 1]] = MplPath.CLOSEPOLY
    coord_part = ring_owner[coord_ring]
    bounds = np.searchsorted(coord_part, np.arange(len(parts) + 1))
    paths = [MplPath(coords[a:b], codes[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    return paths, owner


def _draw(ax, geoms: gpd.GeoSeries, colours: np.ndarray) -> None:
    paths, owner = polygon_paths(geoms.to_numpy())
    ax.add_collection(PathCollection(paths, facecolors=colours[owner], edgecolors="none", linewidths=0))


def cell_figures(view: ReleaseView) -> gpd.GeoDataFrame:
    """Per published cell: the median of its published counts, over the buckets in which it is published,
    and the number of those buckets; with the cell's geometry as published."""
    cells, column = view.cells, view.count_column
    stats = cells.groupby("cell_id", sort=True)[column].agg(median="median", buckets="count")
    shapes = cells.drop_duplicates("cell_id").set_index("cell_id").geometry
    return gpd.GeoDataFrame(stats, geometry=shapes.reindex(stats.index).to_numpy(), crs=cells.crs)


def area_shares(view: ReleaseView, level: str) -> pd.Series:
    """Per published area of `level`: the share of the period's buckets in which its figure is published."""
    rows = view.margins[view.margins["level"] == level]
    return rows.groupby(rows["area_id"].astype(str), sort=True)["bucket_start"].nunique() / view.buckets


def _extent(frames: list[gpd.GeoSeries]) -> tuple[float, float, float, float] | None:
    bounds = [f.total_bounds for f in frames if len(f)]
    if not bounds:
        return None
    b = np.vstack(bounds)
    x0, y0, x1, y1 = b[:, 0].min(), b[:, 1].min(), b[:, 2].max(), b[:, 3].max()
    pad = 0.03 * max(x1 - x0, y1 - y0, 1.0)
    return x0 - pad, y0 - pad, x1 + pad, y1 + pad


def _frame(ax, extent, geographic: bool) -> None:
    ax.set_facecolor(BACKGROUND)
    # degrees of longitude shrink with latitude: a lon/lat map is drawn with the local scale of its middle
    middle = 0.0 if extent is None or not geographic else (extent[1] + extent[3]) / 2
    ax.set_aspect(1 / max(math.cos(math.radians(middle)), 0.01))
    if extent is not None:
        ax.set_xlim(extent[0], extent[2])
        ax.set_ylim(extent[1], extent[3])
    ax.set_xticks([])
    ax.set_yticks([])


def _cells_panel(fig: Figure, ax, view: ReleaseView, cells: gpd.GeoDataFrame) -> None:
    record = view.record
    positive = cells["median"] > 0
    colours = np.empty((len(cells), 4))
    colours[:] = mcolors.to_rgba(ZERO_COLOUR)
    if positive.any():
        low, high = float(cells.loc[positive, "median"].min()), float(cells.loc[positive, "median"].max())
        norm = mcolors.LogNorm(low, high) if high > low else mcolors.Normalize(low - 1, high + 1)
        mapper = ScalarMappable(norm=norm, cmap=COUNT_CMAP)
        colours[positive.to_numpy()] = mapper.to_rgba(cells.loc[positive, "median"].to_numpy())
        bar = fig.colorbar(mapper, ax=ax, shrink=0.8)
        bar.set_label(f"median published {view.count_column}", fontsize=8)
        if high == low:
            bar.set_ticks([low])
    if len(cells):
        _draw(ax, cells.geometry, colours)
    if (~positive).any():
        ax.legend(
            handles=[Patch(color=ZERO_COLOUR, label="median 0 (published as 0)")],
            loc="upper left",
            bbox_to_anchor=(0.0, -0.01),
            fontsize=7,
            frameon=False,
        )
    ax.set_title(
        f"cells: median published count over the buckets in which each cell is published\n"
        f"{len(cells):,} cells, {len(view.cells):,} published figures, {view.buckets} buckets of "
        f"{record.bucket}",
        fontsize=9,
    )


def _level_panel(fig: Figure, ax, view: ReleaseView, level: str) -> None:
    shares = area_shares(view, level)
    shapes = view.areas.get(level)
    title = f"{level}: share of the {view.buckets} buckets in which each area is published\n{len(shares):,} areas"
    if shapes is None:
        ax.text(
            0.5,
            0.5,
            "no public geometry for this level without the policy's zone files",
            ha="center",
            va="center",
            fontsize=8,
            transform=ax.transAxes,
        )
    else:
        shapes = shapes[~shapes.index.duplicated()].reindex(shares.index)
        drawn = shapes.notna().to_numpy()
        norm = mcolors.Normalize(0.0, 1.0)
        mapper = ScalarMappable(norm=norm, cmap=SHARE_CMAP)
        if drawn.any():
            _draw(ax, shapes[drawn], mapper.to_rgba(shares.to_numpy()[drawn]))
        bar = fig.colorbar(mapper, ax=ax, shrink=0.8)
        bar.set_label("share of buckets published", fontsize=8)
    ax.set_title(title, fontsize=9)


def _totals_line(view: ReleaseView) -> str:
    totals = view.margins[view.margins["level"].map(is_total)]
    parts = [
        f"{level} published in {group['bucket_start'].nunique()} of {view.buckets} buckets"
        for level, group in totals.groupby("level", sort=True)
    ]
    return "; ".join(parts)


def map_figure(view: ReleaseView) -> Figure:
    """The map as a matplotlib Figure (Agg): the cells panel, then one panel per margin level."""
    record = view.record
    levels = view.margin_levels()
    cells = cell_figures(view)
    panels = 1 + len(levels)
    ncols = min(panels, 3)
    nrows = math.ceil(panels / ncols)
    fig = Figure(figsize=(PANEL_INCHES[0] * ncols, PANEL_INCHES[1] * nrows + 0.6), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    crs = view.cells.crs
    crs_name = (f"EPSG:{crs.to_epsg()}" if crs.to_epsg() else crs.name) if crs is not None else "no CRS"
    _cells_panel(fig, axes[0], view, cells)
    for ax, level in zip(axes[1:], levels):
        _level_panel(fig, ax, view, level)
    # each panel spans what it draws (a coarse level would shrink the cells to a dot)
    extents = [_extent([cells.geometry]), *[_extent([view.areas[lv]] if lv in view.areas else []) for lv in levels]]
    for ax, extent in zip(axes, extents):
        _frame(ax, extent, bool(crs is not None and crs.is_geographic))
    for ax in axes[panels:]:
        ax.set_axis_off()
    heading = (
        f"{record.dataset} {record.period}: k = {record.k} over {record.unit} ({record.measure}), {crs_name}; "
        "areas absent from the release are not drawn (empty and unpublished look the same)"
    )
    totals = _totals_line(view)
    fig.suptitle(heading + (f"\n{totals}" if totals else ""), fontsize=10)
    return fig


def render_map_png(view: ReleaseView) -> bytes:
    """The map as PNG bytes; the same view gives the same bytes (no timestamp in the file)."""
    buffer = io.BytesIO()
    map_figure(view).savefig(buffer, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
    return buffer.getvalue()
