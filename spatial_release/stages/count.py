"""The counting stage: distinct units per (cell, bucket) and per margin from the validated pings, and how
many valid pings fell outside the geometry (the coverage the outside_share check judges)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import duckdb
import pandas as pd

from spatial_release.counting import CountResult, count_pings, data_extent
from spatial_release.counting.engines import Engine, open_engine
from spatial_release.counting.pings import usable_area
from spatial_release.counting.plan import Extent, ZoningPlan, evaluate_with, grid_plan, zones_plan
from spatial_release.geometry import Grid, coverage
from spatial_release.levels import LEAF, TOTAL, linked_total
from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.progress import Progress, log_progress
from spatial_release.stages.context import ReleaseContext, WorkArea, ZoneLayers
from spatial_release.stages.results import CountsSummary, IngestSummary


def zoning_plans(
    policy: Policy, engine: Engine, extent: Extent | None = None, layers: ZoneLayers | None = None
) -> list[ZoningPlan]:
    """The main geometry first, then each linked zoning, with SQL projections validated on `engine`
    (fitted to the pings' `extent` when it is given)."""
    geometry, evaluate = policy.geometry, evaluate_with(engine)
    layers = layers or ZoneLayers(policy)
    levels = tuple(geometry.level_names())
    if geometry.kind == "grid":
        plans = [grid_plan(LEAF, Grid(geometry), levels, evaluate, extent)]
    else:
        plans = [zones_plan(LEAF, layers.main_zones, levels, TOTAL, evaluate, extent=extent)]
    for spec in geometry.linked:
        plans.append(
            zones_plan(
                spec.name,
                layers.linked[spec.name],
                tuple(p.level for p in spec.parents),
                linked_total(spec.name),
                evaluate,
                extent=extent,
            )
        )
    return plans


def count_validated_pings(
    policy: Policy,
    period: Period,
    pings: Sequence[Path],
    out_dir: Path,
    engine: Engine,
    progress: Progress = log_progress,
    layers: ZoneLayers | None = None,
) -> CountResult:
    """The counting step on pings from the ingest step: projections fitted to their extent, then counts."""
    plans = zoning_plans(policy, engine, data_extent(engine, pings, usable_area(policy)), layers)
    return count_pings(policy, period, pings, plans, out_dir, engine, progress)


def run_counts(ctx: ReleaseContext, engine: Engine | None = None, progress: Progress = log_progress) -> CountsSummary:
    """Counts the ingested pings; `engine` defaults to DuckDB with its spill files in the work area."""
    area = ctx.area
    with ExitStack() as stack:
        if engine is None:
            engine = stack.enter_context(open_engine("duckdb", scratch=area.counts / "spill"))
        result = count_validated_pings(
            ctx.policy, ctx.period, [area.ingest / "pings.parquet"], area.counts, engine, progress, ctx.layers
        )
        settings = engine.describe()
    summary = CountsSummary(
        engine=engine.name,
        engine_settings=settings,
        pings_located=result.pings_located,
        pings_outside_geometry=result.pings_outside,
        outside_file=str(result.outside_path),
        groups=result.groups,
        units=result.units,
        unit_buckets=result.unit_buckets,
        linked_covers_main=result.linked_covers_main,
        unsure_coordinates=result.unsure_coordinates,
        assignment=result.methods,
        seconds=result.seconds,
    )
    summary.write(area.counts)
    return summary


def read_counts_summary(area: WorkArea) -> CountsSummary:
    return CountsSummary.read(area.counts)


def read_true_counts(area: WorkArea) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The true distinct-unit counts of every (cell, bucket) and margin, before suppression (internal)."""
    return (pd.read_parquet(area.counts / "cell_counts.parquet"), pd.read_parquet(area.counts / "margin_counts.parquet"))


def sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def geometry_bounds(ctx: ReleaseContext) -> coverage.Bounds:
    """Lon/lat bounds a valid ping of the policy should fall in: the zones' extent, or a grid CRS's area of
    use."""
    if ctx.policy.geometry.kind == "grid":
        return coverage.crs_area_of_use(ctx.policy.geometry.crs)
    west, south, east, north = ctx.layers.main_zones.frame.to_crs("EPSG:4326").total_bounds
    return (float(west), float(south), float(east), float(north))


def _outside_points(ctx: ReleaseContext) -> pd.DataFrame:
    """lon, lat and src of the valid pings outside the geometry, as the counting step kept them (internal):
    outside every zone, or outside a grid CRS's widened area of use (`counting.pings.usable_area`)."""
    con = duckdb.connect()
    try:
        return con.execute(f"SELECT * FROM read_parquet('{sql_path(ctx.area.counts / 'outside.parquet')}')").df()
    finally:
        con.close()


def _file_labels(files: list[str], names: dict[str, int]) -> dict[str, str]:
    order = [Path(f).name for f in files]
    return {
        name: (f"input file {order.index(name) + 1} of {len(order)}" if name in order else "the input files")
        for name in names
    }


def measure_coverage(ctx: ReleaseContext) -> coverage.Coverage:
    """Valid pings outside the geometry, by input file where the ingest recorded the file of each ping."""
    bounds = geometry_bounds(ctx)
    outside = _outside_points(ctx)
    ingest = IngestSummary.read(ctx.area.ingest)
    valid_by_file = ingest.pings_per_file()
    if "src" in outside.columns:
        names = [Path(f).name for f in ingest.files]
        outside_by_file = outside["src"].map(lambda i: names[int(i)]).value_counts().to_dict()
    else:
        outside_by_file = {next(iter(valid_by_file)): len(outside)}
    # Files are named by their place in the ingest's list: the outcome reaches Dagster metadata and alerts,
    # and a per-device export's name is a unit id. ingest.json (owner-only work area) maps them to names.
    label = _file_labels(ingest.files, valid_by_file)
    by_file = {label[name]: (int(outside_by_file.get(name, 0)), int(valid)) for name, valid in valid_by_file.items()}
    return coverage.Coverage(
        sum(valid_by_file.values()),
        len(outside),
        ctx.policy.source.max_outside_share,
        coverage.diagnose(outside["lon"].to_numpy(), outside["lat"].to_numpy(), bounds),
        by_file,
    )
