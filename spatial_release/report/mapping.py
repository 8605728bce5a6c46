"""The map of a release: its published cells coloured by their published counts, and one panel per margin
level showing in what share of the period's buckets each of its areas is published.

Only what the files publish is filled. Under and over the fills, every panel draws the same public
backdrop whatever is published: every area of its zoning as a thin outline (the policy's zone files, or
for a grid the lines of its cells), the outer boundary of the main zoning as a thicker line, and the
areas' ids when the zoning is small enough to read them. An area absent from the files is an outline like
any other, whether it was empty or not published: the map cannot tell the two apart, and neither can its
colour scales, extents or legends, which are computed from the published figures and public geometry alone.

The PNG is at most `MAX_WIDTH_PX` wide at its natural size (two panels a row, titles wrapped), so Dagster's
markdown view, which does not scale images down, shows all of it.
"""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely
from matplotlib import colormaps, patheffects
from matplotlib import colors as mcolors
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure  # a Figure without pyplot renders with Agg and leaves the backend alone
from matplotlib.patches import Patch
from matplotlib.path import Path as MplPath
from shapely.ops import polylabel

from spatial_release.levels import LEAF, is_total, rung_of, space_level
from spatial_release.report.view import ReleaseView

DPI = 100
MAX_WIDTH_PX = 1200  # Dagster's markdown dialog is ~1250 px wide at a 1600 px viewport and never scales images down
COLUMNS = 2  # panels a row: 2 x 5.6 in x 100 dpi = 1120 px
PANEL_INCHES = (5.6, 4.8)
TITLE_CHARS_PER_INCH = 11  # wrap width of the figure's title (10 pt) per inch of figure
PANEL_TITLE_CHARS = 68  # wrap width of a panel's title (9 pt) in a 5.6 in panel
BACKGROUND = "#ffffff"
OUTLINE_COLOUR = "#8a8a8a"  # every area of a zoning, published or not
OUTLINE_WIDTH = 0.6
CONTEXT_COLOUR = "#4d4d4d"  # the main zoning's areas on the panel of another zoning
DENSE_OUTLINE = ("#b5b5b5", 0.3)  # a zoning of more than MAX_LABELS areas (e.g. census blocks): a light mesh
BOUNDARY_COLOUR = "#1a1a1a"  # the main zoning's outer boundary
BOUNDARY_WIDTH = 1.4
MAX_LABELS = 40  # a zone file's areas are labelled with their ids when it has at most this many (wards, not blocks)
MAX_GRID_LINES = 100  # a grid's cells are outlined when at most this many span the frame, else only the frame is
ZERO_COLOUR = "#bdbdbd"  # a cell published as 0 in every bucket in which it is published
COUNT_CMAP = "viridis"
# the share of buckets: YlGnBu without its palest quarter, so a share near 0 is still visibly filled, never the
# white of an area without a published figure
SHARE_CMAP = mcolors.ListedColormap(colormaps["YlGnBu"](np.linspace(0.25, 1.0, 256)), name="YlGnBu_filled")


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


def area_paths(geoms: np.ndarray) -> list[MplPath]:
    """One path per geometry of `geoms` (all its polygon parts, holes kept), so a collection of them has exactly
    one path per area; a geometry without area gives an empty path."""
    paths, owner = polygon_paths(geoms)
    parts: list[list[MplPath]] = [[] for _ in range(len(geoms))]
    for path, i in zip(paths, owner):
        parts[i].append(path)
    return [MplPath.make_compound_path(*p) if p else MplPath(np.empty((0, 2))) for p in parts]


def _draw(ax, geoms: gpd.GeoSeries, colours: np.ndarray) -> None:
    paths, owner = polygon_paths(geoms.to_numpy())
    ax.add_collection(PathCollection(paths, facecolors=colours[owner], edgecolors="none", linewidths=0))


Extent = tuple[float, float, float, float]


def _snap(bounds: Extent, size: float) -> Extent:
    """`bounds` widened to the lines of a grid of cell `size` (grid cells have corners at multiples of it)."""
    x0, y0, x1, y1 = bounds
    return (
        math.floor(x0 / size) * size,
        math.floor(y0 / size) * size,
        math.ceil(x1 / size) * size,
        math.ceil(y1 / size) * size,
    )


def _bounds(frames: list[gpd.GeoSeries]) -> Extent | None:
    bounds = [f.total_bounds for f in frames if len(f)]
    if not bounds:
        return None
    b = np.vstack(bounds)
    return float(b[:, 0].min()), float(b[:, 1].min()), float(b[:, 2].max()), float(b[:, 3].max())


def grid_size(view: ReleaseView, level: str) -> float | None:
    """The cell size of a grid level (`LEAF` of a grid geometry, or `grid_<size>m`), from the record's public
    geometry spec; None for a zone level, or when the cells are not in the grid's own CRS."""
    spec = view.record.geometry
    if spec.get("kind") != "grid" or view.cells.crs is None or view.cells.crs != spec.get("crs"):
        return None
    space = space_level(level)
    if space == LEAF:
        return float(spec["size_m"])
    sizes = {f"grid_{size}m": float(size) for size in spec.get("parents_m", [])}
    return sizes.get(space)


@dataclass(frozen=True)
class Backdrop:
    """The public geometry one panel draws whatever is published (so an area without a published figure
    looks the same whether it was empty or not published):

    - `outlines`: every area of the panel's zoning by id, from the policy's zone files (None for a grid level,
      or without the policy), each a thin unfilled outline;
    - `grid`: for a grid level, its cell size and the frame over which the lines of its cells are drawn;
    - `context`: on the panel of another zoning (census blocks beside wards), every area of the main zoning
      when it is small enough to read (at most `MAX_LABELS` areas), a darker outline;
    - `boundary`: the outer boundary of the main zoning (the union of all its areas; for a grid, the frame of
      its cells), a thicker line;
    - `labels`: the areas whose ids are written on them: the panel's own zoning when it has at most
      `MAX_LABELS` areas, else the main zoning's on the panel that outlines it as `context`; a grid's ids are
      only coordinates and are never written;
    - `extent`: what the panel spans (before padding)."""

    outlines: gpd.GeoSeries | None
    grid: tuple[float, Extent] | None
    context: gpd.GeoSeries | None
    boundary: object | None  # a shapely (multi)polygon
    labels: gpd.GeoSeries | None
    extent: Extent | None


def outer_boundary(geoms: np.ndarray) -> object:
    """The union of `geoms` as one outline: zone files rarely share their borders exactly, so the areas are
    grown by a hair (1/2000 of the zoning's span) before the union and shrunk back after, and the holes that
    are mere slivers between neighbours (under 1/1000 of the area) are dropped; a real hole stays."""
    geoms = np.asarray(geoms, dtype=object)
    x0, y0, x1, y1 = shapely.total_bounds(geoms)
    hair = max(x1 - x0, y1 - y0) / 2000
    merged = shapely.buffer(shapely.union_all(shapely.buffer(geoms, hair, quad_segs=2)), -hair, quad_segs=2)
    parts = shapely.get_parts(merged)
    floor = shapely.area(merged) / 1000
    kept = [
        shapely.Polygon(part.exterior, [ring for ring in part.interiors if shapely.Polygon(ring).area >= floor])
        for part in parts
        if shapely.get_type_id(part) == 3 and part.area >= floor
    ]
    return shapely.MultiPolygon(kept) if len(kept) != 1 else kept[0]


def label_points(geoms: np.ndarray) -> np.ndarray:
    """Where each area's label goes: the pole of inaccessibility of its largest part (the point inside it
    farthest from its edges, so a label sits in the open, not on a narrow neck)."""
    points: list[object] = []
    for geom in np.asarray(geoms, dtype=object):
        parts = [p for p in shapely.get_parts(geom) if shapely.get_type_id(p) == 3] if geom is not None else []
        if not parts:
            points.append(None)
            continue
        largest = max(parts, key=lambda p: p.area)
        x0, y0, x1, y1 = largest.bounds
        points.append(polylabel(largest, tolerance=max(x1 - x0, y1 - y0) / 200 or 1e-9))
    return np.array(points, dtype=object)


def main_boundary(view: ReleaseView) -> object | None:
    """The outer boundary of the main zoning as a polygon. Zones: the union of every zone of the policy's file.
    A grid has no file and no end: the grid's cells are drawn over the frame of the published cells (their
    bounds widened to whole cells), so the boundary is that frame, a rectangle computed from published cells
    only (a cell without a published figure, for whatever reason, cannot move it). None without either."""
    zones = view.zonings.get(LEAF)
    if zones is not None and len(zones):
        return outer_boundary(zones.to_numpy())
    size = grid_size(view, LEAF)
    bounds = _bounds([view.cells.geometry])
    if size is None or bounds is None:
        return None
    return shapely.box(*_snap(bounds, size))


def backdrop(view: ReleaseView, level: str, drawn: gpd.GeoSeries | None, boundary: object | None = None) -> Backdrop:
    """The backdrop of the panel of `level` (`LEAF` for the cells panel) whose published areas are `drawn`.
    `boundary`: `main_boundary(view)`, when the caller already has it."""
    boundary = main_boundary(view) if boundary is None else boundary
    frames = [g for g in (drawn, gpd.GeoSeries([boundary] if boundary is not None else [])) if g is not None]
    extent = _bounds(frames)
    outlines = view.zonings.get(space_level(level))
    size = grid_size(view, level)
    grid = None
    if outlines is None and size is not None and extent is not None:
        # a grid has no file to outline: the lines of its cells over the panel's frame (published areas and
        # the main frame, widened to whole cells of this level), i.e. every cell of the frame, published or not
        extent = _snap(extent, size)
        grid = (size, extent)
    main = view.zonings.get(LEAF)
    small = main is not None and len(main) <= MAX_LABELS
    context = main if small and space_level(level) != LEAF else None
    labels = outlines if outlines is not None and len(outlines) <= MAX_LABELS else context
    return Backdrop(outlines, grid, context, boundary, labels, extent)


def _grid_segments(size: float, frame: Extent) -> np.ndarray | None:
    x0, y0, x1, y1 = frame
    xs, ys = np.arange(x0, x1 + size / 2, size), np.arange(y0, y1 + size / 2, size)
    if max(len(xs), len(ys)) > MAX_GRID_LINES + 1:
        return None  # too many to see: the frame (the boundary) alone
    vertical = [[(x, y0), (x, y1)] for x in xs]
    horizontal = [[(x0, y), (x1, y)] for y in ys]
    return np.asarray(vertical + horizontal, dtype=float)


def _outline(ax, geometries: np.ndarray, colour: str, width: float, zorder: float, gid: str) -> None:
    """Polygons as lines only (no fill), one collection named `gid`."""
    ax.add_collection(
        PathCollection(
            area_paths(geometries), facecolors="none", edgecolors=colour, linewidths=width, zorder=zorder, gid=gid
        )
    )


def _draw_backdrop(ax, drop: Backdrop) -> None:
    """The outlines over the fills (every area gets the same line whether filled or not), then the boundary
    and the labels; nothing here depends on what is published beyond the extent of a grid's frame."""
    if drop.outlines is not None and len(drop.outlines):
        colour, width = DENSE_OUTLINE if len(drop.outlines) > MAX_LABELS else (OUTLINE_COLOUR, OUTLINE_WIDTH)
        _outline(ax, drop.outlines.to_numpy(), colour, width, 2, "zoning-outlines")
    if drop.grid is not None:
        segments = _grid_segments(*drop.grid)
        if segments is not None:
            ax.add_collection(
                LineCollection(list(segments), colors=OUTLINE_COLOUR, linewidths=OUTLINE_WIDTH, zorder=2, gid="grid-lines")
            )
    if drop.context is not None:
        _outline(ax, drop.context.to_numpy(), CONTEXT_COLOUR, OUTLINE_WIDTH, 2.5, "main-zoning-outlines")
    if drop.boundary is not None:
        _outline(ax, np.array([drop.boundary], dtype=object), BOUNDARY_COLOUR, BOUNDARY_WIDTH, 3, "zoning-boundary")
    if drop.labels is not None:
        halo = [patheffects.withStroke(linewidth=2.2, foreground="white")]
        anchors = label_points(drop.labels.to_numpy())
        for area_id, point in zip(drop.labels.index, anchors):
            if point is None or shapely.is_empty(point):
                continue
            ax.text(
                point.x,
                point.y,
                str(area_id),
                ha="center",
                va="center",
                fontsize=8,
                fontweight="bold",
                color="#222222",
                zorder=4,
                clip_on=True,
                path_effects=halo,
                gid="zoning-label",
            )


def cells_panel_title(view: ReleaseView, cells: int) -> str:
    """The cell panel's title; its figures counted as the headline and the table count them (non-zero
    figures, structural zeros apart)."""
    zeros = int((view.cells[view.count_column] == 0).sum())
    figures = f"{len(view.cells) - zeros:,} published figures" + (
        f" and {zeros:,} structural zeros (published as 0)" if zeros else ""
    )
    return (
        "cells: median published count over the buckets in which each cell is published; "
        f"{cells:,} cells, {figures}, {view.buckets} buckets of {view.record.bucket}"
    )


def cell_figures(view: ReleaseView) -> gpd.GeoDataFrame:
    """Per published cell: the median of its published counts, over the buckets in which it is published,
    and the number of those buckets; with the cell's geometry as published."""
    cells, column = view.cells, view.count_column
    stats = cells.groupby("cell_id", sort=True)[column].agg(median="median", buckets="count")
    shapes = cells.drop_duplicates("cell_id").set_index("cell_id").geometry
    return gpd.GeoDataFrame(stats, geometry=shapes.reindex(stats.index).to_numpy(), crs=cells.crs)


def area_shares(view: ReleaseView, level: str) -> pd.Series:
    """Per published area of `level`: the share of the period's buckets (at the level's time rung: the weeks of
    `cell@1w`) in which its figure is published."""
    rows = view.margins[view.margins["level"] == level]
    return rows.groupby(rows["area_id"].astype(str), sort=True)["bucket_start"].nunique() / view.buckets_of(level)


def _padded(bounds: Extent | None) -> Extent | None:
    if bounds is None:
        return None
    x0, y0, x1, y1 = bounds
    span = max(x1 - x0, y1 - y0)
    pad = 0.03 * span if span > 0 else 1.0
    return x0 - pad, y0 - pad, x1 + pad, y1 + pad


def _frame(ax, extent: Extent | None, geographic: bool) -> None:
    ax.set_facecolor(BACKGROUND)
    # degrees of longitude shrink with latitude: a lon/lat map is drawn with the local scale of its middle
    middle = 0.0 if extent is None or not geographic else (extent[1] + extent[3]) / 2
    ax.set_aspect(1 / max(math.cos(math.radians(middle)), 0.01))
    if extent is not None:
        ax.set_xlim(extent[0], extent[2])
        ax.set_ylim(extent[1], extent[3])
    ax.set_xticks([])
    ax.set_yticks([])


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def _cells_panel(fig: Figure, ax, view: ReleaseView, cells: gpd.GeoDataFrame) -> None:
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
    ax.set_title(_wrap(cells_panel_title(view, len(cells)), PANEL_TITLE_CHARS), fontsize=9)


def _level_panel(fig: Figure, ax, view: ReleaseView, level: str, shares: pd.Series, shapes: gpd.GeoSeries | None) -> None:
    buckets = view.buckets_of(level)
    title = (
        f"{level}: share of its {buckets} buckets of {rung_of(level) or view.record.bucket} in which each area is "
        f"published; {len(shares):,} areas published"
    )
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
        norm = mcolors.Normalize(0.0, 1.0)
        mapper = ScalarMappable(norm=norm, cmap=SHARE_CMAP)
        if len(shapes):
            _draw(ax, shapes, mapper.to_rgba(shares.reindex(shapes.index).to_numpy()))
        bar = fig.colorbar(mapper, ax=ax, shrink=0.8)
        bar.set_label("share of buckets published", fontsize=8)
    ax.set_title(_wrap(title, PANEL_TITLE_CHARS), fontsize=9)


def _level_shapes(view: ReleaseView, level: str, shares: pd.Series) -> gpd.GeoSeries | None:
    """The geometry of the published areas of `level` that have one (None: the level has no public geometry
    in this view)."""
    shapes = view.areas.get(level)
    if shapes is None:
        return None
    shapes = shapes[~shapes.index.duplicated()].reindex(shares.index)
    return shapes[shapes.notna().to_numpy()]


def _totals_line(view: ReleaseView) -> str:
    totals = view.margins[view.margins["level"].map(is_total).astype(bool)]  # an empty map is no column list
    parts = [
        f"{level} published in {group['bucket_start'].nunique()} of {view.buckets_of(level)} buckets"
        for level, group in totals.groupby("level", sort=True)
    ]
    return "; ".join(parts)


def _outline_note(view: ReleaseView) -> str:
    """What the outlines and fills mean, for the figure's title."""
    blank = "an unfilled area is empty or not published, and the map cannot tell which"
    if LEAF in view.zonings:
        return f"outlines: every area of the zoning (the policy's zone files); filled: published ({blank})"
    if grid_size(view, LEAF) is not None:
        return (
            "outlines: the grid's cells over the extent of the published cells (thick: its frame); "
            f"filled: published ({blank})"
        )
    return (
        "only published areas are drawn: without the policy's zone files the zoning is not outlined "
        "(empty and unpublished look the same)"
    )


def map_figure(view: ReleaseView) -> Figure:
    """The map as a matplotlib Figure (Agg): the cells panel, then one panel per margin level, two a row (at
    most `MAX_WIDTH_PX` wide), each over its public backdrop (see `backdrop`)."""
    record = view.record
    levels = view.margin_levels()
    cells = cell_figures(view)
    panels = 1 + len(levels)
    ncols = min(panels, COLUMNS)
    nrows = math.ceil(panels / ncols)
    width = PANEL_INCHES[0] * ncols
    fig = Figure(figsize=(width, PANEL_INCHES[1] * nrows + 0.8), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    crs = view.cells.crs
    crs_name = (f"EPSG:{crs.to_epsg()}" if crs.to_epsg() else crs.name) if crs is not None else "no CRS"
    geographic = bool(crs is not None and crs.is_geographic)
    boundary = main_boundary(view)
    _cells_panel(fig, axes[0], view, cells)
    drops = [backdrop(view, LEAF, cells.geometry, boundary)]
    for ax, level in zip(axes[1:], levels):
        shares = area_shares(view, level)
        shapes = _level_shapes(view, level, shares)
        _level_panel(fig, ax, view, level, shares, shapes)
        # each panel spans what it draws (a coarse level would shrink the cells to a dot) and the main zoning
        drops.append(backdrop(view, level, shapes, boundary))
    for ax, drop in zip(axes, drops):
        _draw_backdrop(ax, drop)
        _frame(ax, _padded(drop.extent), geographic)
    for ax in axes[panels:]:
        ax.set_axis_off()
    heading = f"{record.dataset} {record.period}: k = {record.k} over {record.unit} ({record.measure}), {crs_name}; "
    totals = _totals_line(view)
    text = heading + _outline_note(view) + (f"\n{totals}" if totals else "")
    fig.suptitle(_wrap(text, int(TITLE_CHARS_PER_INCH * width)), fontsize=10)
    return fig


def render_map_png(view: ReleaseView) -> bytes:
    """The map as PNG bytes; the same view gives the same bytes (no timestamp in the file)."""
    buffer = io.BytesIO()
    map_figure(view).savefig(buffer, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
    return buffer.getvalue()
