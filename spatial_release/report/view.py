"""What a report is rendered from: the published tables, the release record, and the public geometry of
the areas they name and of the zonings they belong to. Nothing else: no work area, no true counts, no list
of withheld keys, so an area that is absent from the files (empty, or not published) has no figure in the
report, and the two look the same.

The geometry of a margin's area is public: grid parents are decoded from their ids (a grid id names its
lower-left corner and size in the grid's CRS, see `geometry.grid`), zone parents and linked zonings come
from the zone files the policy names (dissolved by parent id as `ZoneLayer.parent_table` assigns them).
The zonings themselves are public too: with the policy, the view holds every area of each zone level it
draws (`zonings`), published or not, which the map outlines as the background every area shares.
Without the policy, only the grid's own levels can be drawn; the ceilings then stay unknown too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

from spatial_release.counting.buckets import partial_buckets, period_buckets
from spatial_release.geometry.grid import CELL_ID
from spatial_release.geometry.zones import ZoneLayer
from spatial_release.levels import LEAF, is_total, rung_of, space_level
from spatial_release.period import Period
from spatial_release.policy import Policy, TimeSpec, ZonesGeometry
from spatial_release.release import ReleaseRecord


class ReportError(ValueError):
    """The report cannot be rendered from what was given (e.g. a policy other than the release's)."""


@dataclass(frozen=True)
class Ceilings:
    per_release: float
    cumulative: float


@dataclass(frozen=True)
class ReleaseView:
    """A published release as the public sees it."""

    cells: gpd.GeoDataFrame  # cells.parquet as published
    margins: pd.DataFrame  # margins.parquet as published
    record: ReleaseRecord
    buckets: int  # buckets of the period (a public fact: the period and the record's time spec)
    areas: dict[str, gpd.GeoSeries]  # margin level -> geometry by area_id (published areas only), cells' CRS
    ceilings: Ceilings | None  # from the policy; None when rendered without it
    # space level (`LEAF` for the main zones) -> EVERY area of that zoning by id, published or not, in the cells'
    # CRS: the public zone files the policy names. Empty without the policy, and for grid levels (no file).
    zonings: dict[str, gpd.GeoSeries] = field(default_factory=dict)
    # time rung of a margin level (`1w` of `cell@1w`) -> its publishable buckets in the period (public facts)
    rung_buckets: dict[str, int] = field(default_factory=dict)

    @property
    def count_column(self) -> str:
        return self.record.count_column

    def buckets_of(self, level: str) -> int:
        """The buckets of the period at the time rung of `level` (the policy's bucket for a plain level)."""
        rung = rung_of(level)
        return self.buckets if rung is None else self.rung_buckets.get(rung, self.buckets)

    def margin_levels(self) -> list[str]:
        """The levels of margins.parquet that are areas on a map (not the bucket totals), in file order."""
        return [lv for lv in pd.unique(self.margins["level"]) if not is_total(lv) and lv != LEAF]


def _as_record(record: dict | ReleaseRecord) -> ReleaseRecord:
    return record if isinstance(record, ReleaseRecord) else ReleaseRecord.from_json(record)


def _check_policy(policy: Policy, record: ReleaseRecord) -> None:
    if policy.name != record.dataset or policy.sha256 != record.policy.sha256:
        raise ReportError(
            f"policy {policy.name} v{policy.version} (sha256 {policy.sha256[:12]}) is not the one "
            f"{record.dataset} {record.period} was published under (v{record.policy.version}, "
            f"sha256 {record.policy.sha256[:12]}); render without it or with that policy file"
        )


def _grid_boxes(ids: np.ndarray, crs: str) -> gpd.GeoSeries | None:
    """Squares decoded from grid ids (`<size>mE<east>N<north>`), or None if any id is not such a name."""
    parts = pd.Series(ids, dtype=object).astype(str).str.extract(CELL_ID)
    if parts.isna().any().any():
        return None
    size, x0, y0 = (parts[i].astype(np.int64).to_numpy() for i in range(3))
    return gpd.GeoSeries(shapely.box(x0, y0, x0 + size, y0 + size), index=pd.Index(ids, name="area_id"), crs=crs)


def _zone_levels(policy: Policy) -> dict[str, gpd.GeoSeries]:
    """Every zone level the policy's zone files define (main parents, linked zonings and their parents), each
    as one geometry per area id: a parent is the union of its zones."""
    geometry = policy.geometry
    layers: list[tuple[str | None, ZoneLayer]] = []
    if isinstance(geometry, ZonesGeometry):
        layers.append((None, ZoneLayer(geometry, policy.resolve(geometry.path))))
    for linked in geometry.linked:
        spec = ZonesGeometry(kind="zones", path=linked.path, id=linked.id, parents=linked.parents)
        layers.append((linked.name, ZoneLayer(spec, policy.resolve(linked.path))))
    levels: dict[str, gpd.GeoSeries] = {}
    for leaf_name, layer in layers:
        table = layer.parent_table()
        shapes = layer.frame.geometry.to_numpy()
        # the main geometry's own zones too: a coarser time rung of the cells (cell@1w) names them
        levels[leaf_name or LEAF] = gpd.GeoSeries(shapes, index=pd.Index(table["cell_id"], name="area_id"), crs=layer.crs)
        for parent in layer.spec.parents:
            groups = pd.Series(np.arange(len(table))).groupby(table[parent.level].to_numpy())
            ids = list(groups.groups)
            merged = [shapely.union_all(shapes[rows.to_numpy()]) for _, rows in groups]
            levels[parent.level] = gpd.GeoSeries(merged, index=pd.Index(ids, name="area_id"), crs=layer.crs)
    return levels


def area_geometries(
    margins: pd.DataFrame,
    geometry: dict,
    crs,
    policy: Policy | None = None,
    zone_levels: dict[str, gpd.GeoSeries] | None = None,
) -> dict[str, gpd.GeoSeries]:
    """The geometry of every published area of each non-total margin level, in `crs` (the cells' CRS).
    `geometry`: the record's geometry spec (its `kind` and `crs`). Grid levels are decoded from their ids;
    zone levels need `policy` (its zone files, or `zone_levels` already read from them) and are left out
    without it."""
    out: dict[str, gpd.GeoSeries] = {}
    for level, rows in margins.groupby("level", sort=False):
        if is_total(level) or level == LEAF:
            continue
        ids = np.asarray(pd.unique(rows["area_id"].astype(str)), dtype=object)
        shapes = _grid_boxes(ids, geometry["crs"]) if geometry.get("kind") == "grid" else None
        if shapes is None and policy is not None:
            if zone_levels is None:
                zone_levels = _zone_levels(policy)
            space = space_level(level)  # a coarser time rung (block@1w) has its space level's areas
            if space in zone_levels:
                known = zone_levels[space]
                shapes = known[known.index.isin(ids)]
        if shapes is not None:
            out[level] = shapes.to_crs(crs) if crs is not None and shapes.crs != crs else shapes
    return out


@dataclass(frozen=True)
class _TimeOnly:
    """The record's public time spec and cadence where the bucket table expects a policy (it reads only
    `.time`, and `.period` for the whole-period rung)."""

    time: TimeSpec
    period: str


def period_bucket_count(record: ReleaseRecord) -> int:
    """How many buckets the period has, from the record's period and time spec (public facts)."""
    period = Period.parse(record.period)
    return len(period_buckets(_TimeOnly(TimeSpec(**record.time), period.kind), period))  # type: ignore[arg-type]


def rung_bucket_counts(record: ReleaseRecord, levels) -> dict[str, int]:
    """For each time rung among `levels` (`cell@1w` -> `1w`): the buckets of that rung the period can publish,
    i.e. those the period's edges do not cut (a week across the quarter's start is never published)."""
    period = Period.parse(record.period)
    spec = _TimeOnly(TimeSpec(**record.time), period.kind)
    rungs = sorted({r for r in map(rung_of, levels) if r is not None})
    return {
        rung: len(period_buckets(spec, period, rung)) - len(partial_buckets(spec, period, rung))  # type: ignore[arg-type]
        for rung in rungs
    }


def zonings(
    policy: Policy | None, levels, crs, zone_levels: dict[str, gpd.GeoSeries] | None = None
) -> dict[str, gpd.GeoSeries]:
    """Every area (published or not) of the zoning of each space level the map draws: the main zones (`LEAF`)
    and the space levels of `levels` (margin levels), from the policy's zone files, in `crs`. Grid levels have
    no file (the grid is unbounded) and are not here; without the policy, nothing is."""
    if policy is None:
        return {}
    known = _zone_levels(policy) if zone_levels is None else zone_levels
    wanted = [LEAF, *(space_level(lv) for lv in levels)]
    out: dict[str, gpd.GeoSeries] = {}
    for space in dict.fromkeys(wanted):
        if space in known:
            shapes = known[space]
            out[space] = shapes.to_crs(crs) if crs is not None and shapes.crs != crs else shapes
    return out


def release_view(
    cells: gpd.GeoDataFrame, margins: pd.DataFrame, record: dict | ReleaseRecord, policy: Policy | None = None
) -> ReleaseView:
    """The view of published tables with their record (`release.json`'s content, or the pending record of a
    publication). `policy`, when given, must be the release's own (its sha256): it supplies the zone
    geometries of zone levels and the two risk ceilings."""
    record = _as_record(record)
    if policy is not None:
        _check_policy(policy, record)
    risk = policy.risk if policy is not None else None
    ceilings = None if risk is None else Ceilings(risk.per_release_ceiling, risk.cumulative_ceiling)
    zone_levels = _zone_levels(policy) if policy is not None else None  # the zone files, read once
    levels = [lv for lv in pd.unique(margins["level"]) if not is_total(lv)]
    return ReleaseView(
        cells,
        margins,
        record,
        period_bucket_count(record),
        area_geometries(margins, record.geometry, cells.crs, policy, zone_levels),
        ceilings,
        zonings(policy, levels, cells.crs, zone_levels),
        rung_bucket_counts(record, levels),
    )


def read_release_view(folder: Path, policy: Policy | None = None, record: dict | ReleaseRecord | None = None) -> ReleaseView:
    """The view of the release folder `folder` (cells.parquet, margins.parquet and, unless `record` is
    given, release.json)."""
    folder = Path(folder)
    if record is None:
        record = json.loads((folder / "release.json").read_text())
    return release_view(
        gpd.read_parquet(folder / "cells.parquet"), pd.read_parquet(folder / "margins.parquet"), record, policy
    )
