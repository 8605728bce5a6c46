"""The attack stage's inputs: the candidate's public figures as the public reads them (`risk.attack.
ReleaseView`) and the true memberships, both coded from the work area; the attack itself is `risk.attack`.

One view per zoning (the main geometry's cells, each linked zoning's areas) and per time resolution the
candidate publishes (the policy's bucket, each rung of its time ladder): its area figures and bucket totals,
from which trajectories are chained. Parent areas are not chained (the recovery is a lower bound, as every
attack is; the uniqueness bound counts them). Coordinates are the areas' centroids in their UTM zone
(metres), from the policy's zone files or grid.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spatial_release.arrays import narrow_codes
from spatial_release.levels import LEAF, TOTAL, at_rung
from spatial_release.policy.model import PERIOD_RUNG, bucket_hours
from spatial_release.risk import Adversary
from spatial_release.risk.attack import AttackParams, AttackReport, ReleaseView, ZoneAttack, attack_risk
from spatial_release.stages import reuse
from spatial_release.stages.context import LADDER_BUCKETS, ReleaseContext
from spatial_release.stages.results import ZoneFigures


@dataclass
class AttackInputs:
    view: ReleaseView
    unit: np.ndarray
    step: np.ndarray
    area: np.ndarray
    zone_of_area: np.ndarray
    unit_names: np.ndarray | None = None  # unit code -> the membership's unit name (per-unit: internal)


def _centroids(geometries, names: np.ndarray, shown: np.ndarray) -> np.ndarray:
    """(x, y) in metres (the areas' UTM zone) of the areas that have a published figure (NaN for the others):
    only published areas are places the recovery can put a trajectory. `geometries`: area ids -> polygons."""
    xy = np.full((len(names), 2), np.nan)
    if not shown.any():
        return xy
    polygons = geometries(pd.Series(names[shown]))
    projected = polygons.to_crs(polygons.estimate_utm_crs()) if polygons.crs.is_geographic else polygons
    centre = projected.centroid
    xy[shown, 0], xy[shown, 1] = centre.x.to_numpy(), centre.y.to_numpy()
    return xy


def _figures(ctx: ReleaseContext, rung: str | None, proposal: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cell figures (cell_id, bucket_start, n) and bucket totals (bucket_start, n) the public gets: the
    candidate's at the policy's bucket, or at time rung `rung` (its `cell@rung` and `total@rung` margins). A
    `proposal` at `rung` is a release of the cells at that rung instead: every true count >= k (no
    complementary suppression, so at least as many figures as such a release would show)."""
    area, count = ctx.area, ctx.policy.count_column
    if not proposal:
        candidate = ctx.candidate_tables()
        margins = candidate.margins.rename(columns={count: "n"})
        totals = margins[(margins["level"] == at_rung(TOTAL, rung)) & (margins["area_id"] == TOTAL)]
        if rung is None:
            cells = candidate.cells.rename(columns={count: "n"})
        else:
            cells = margins[margins["level"] == at_rung(LEAF, rung)].rename(columns={"area_id": "cell_id"})
        return cells[["cell_id", "bucket_start", "n"]], totals[["bucket_start", "n"]]
    counts = pd.read_parquet(area.counts / "margin_counts.parquet")
    shown = counts[counts["n"] >= ctx.policy.k]
    cells = shown[shown["level"] == at_rung(LEAF, rung)].rename(columns={"area_id": "cell_id"})
    totals = shown[(shown["level"] == at_rung(TOTAL, rung)) & (shown["area_id"] == TOTAL)]
    return cells[["cell_id", "bucket_start", "n"]], totals[["bucket_start", "n"]]


def _to_rung(ctx: ReleaseContext, membership: pd.DataFrame, rung: str | None) -> pd.DataFrame:
    """The memberships per bucket of `rung` (a unit's areas over the policy's buckets inside it); unchanged at
    the policy's bucket."""
    if rung is None:
        return membership
    ladder = pd.read_parquet(ctx.area.counts / LADDER_BUCKETS)
    parent = ladder[ladder["rung"] == rung].set_index("fine")["coarse"]
    return membership.assign(bucket_start=membership["bucket_start"].map(parent)).dropna().drop_duplicates()


@dataclass(frozen=True)
class MembershipCodes:
    """The true memberships of one view (zoning, rung) coded on their own: their buckets and area names (sorted,
    distinct) and each row's unit, bucket and area code among them, with the unit names. `attack_inputs` numbers
    the areas and buckets over these and the candidate's published ones, which a candidate seldom adds to: then
    these codes are the view's as they are. Per-unit: internal."""

    buckets: pd.DatetimeIndex
    names: np.ndarray
    unit: np.ndarray
    step: np.ndarray
    area: np.ndarray
    unit_names: np.ndarray
    source: tuple | None  # the membership file's (size, mtime, inode) before and after it was read (None: linked)


def membership_codes(ctx: ReleaseContext, rung: str | None = None, zoning: str | None = None) -> MembershipCodes:
    """The memberships of the view at `rung` of `zoning` (None: the main geometry's cells), coded (see
    `MembershipCodes`). They do not read the candidate: one coding serves every candidate a context assesses."""
    path = _membership_file(ctx)
    before = _file_stamp(path) if zoning is None else None
    if zoning is None and rung is None:
        streamed = _streamed_codes(path)
        if streamed is not None:
            return replace(streamed, source=(before, _file_stamp(path)))
    if zoning is None:
        membership = pd.read_parquet(path, columns=["unit", "bucket_start", "cell_id"])
    else:
        membership = _linked_membership(ctx, zoning)
    membership = _to_rung(ctx, membership, rung)
    buckets = pd.DatetimeIndex(sorted(set(pd.unique(membership["bucket_start"]))))
    names = np.array(sorted(set(pd.unique(membership["cell_id"]))), dtype=object)
    unit_codes, unit_names = pd.factorize(membership["unit"], sort=True)
    return MembershipCodes(
        buckets,
        names,
        # the codes are held through the whole assessment (at 50 M pings 40 M rows each): 32-bit where they fit
        narrow_codes(unit_codes),
        # datetime64 bucket starts: get_indexer is the faster here (0.42 s against places' 1.43 s at 50 M pings)
        narrow_codes(buckets.get_indexer(membership["bucket_start"])),
        narrow_codes(places(pd.Index(names), membership["cell_id"])),
        np.asarray(unit_names, dtype=object),
        None if before is None else (before, _file_stamp(path)),
    )


MEMBERSHIP_BATCH = 1 << 20  # membership rows coded at a time (`_streamed_codes`)


def _streamed_codes(path: Path) -> MembershipCodes | None:
    """`membership_codes` of the main geometry at the policy's bucket, read in batches of MEMBERSHIP_BATCH rows
    twice (their distinct values, then their codes) instead of as one frame: at 50 M pings 1.2 GB of process peak
    instead of 4.0 GB, and 5 s instead of 8 s, before the recovery can start (bench/RESULTS.md). The same codes
    and names as the frame's way (integer or text units, sorted as `pd.factorize(sort=True)` sorts them); None,
    for that way, when a column is of another type. A missing value is an error naming the row (the frame's way
    failed on it with a comparison error)."""
    columns = ["unit", "bucket_start", "cell_id"]
    source = pq.ParquetFile(path)
    schema = source.schema_arrow
    unit_type, bucket_type = schema.field("unit").type, schema.field("bucket_start").type
    integer_units = pa.types.is_integer(unit_type)
    if not (integer_units or pa.types.is_string(unit_type) or pa.types.is_large_string(unit_type)):
        return None
    if not pa.types.is_timestamp(bucket_type):
        return None
    units: set = set()
    buckets: set = set()
    names: set = set()
    rows = 0
    for batch in source.iter_batches(batch_size=MEMBERSHIP_BATCH, columns=columns):
        for column in columns:
            if batch.column(column).null_count:
                row = rows + int(np.flatnonzero(batch.column(column).is_null().to_numpy(zero_copy_only=False))[0])
                raise ValueError(f"{path}: row {row}: no {column}; every membership row names a unit, bucket and cell")
        units.update(pc.unique(batch.column("unit")).to_pylist())
        buckets.update(pc.unique(batch.column("bucket_start").cast(pa.int64())).to_pylist())
        names.update(pc.unique(batch.column("cell_id")).to_pylist())
        rows += batch.num_rows
    unit_names = np.array(sorted(units), dtype=object)
    bucket_values = np.array(sorted(buckets), dtype=np.int64)
    area_names = np.array(sorted(names), dtype=object)
    unit_index, area_index = pd.Index(unit_names), pd.Index(area_names)
    coded: list[np.ndarray] = [np.empty(rows, dtype=_code_type(len(v))) for v in (unit_names, bucket_values, area_names)]
    at = 0
    for batch in source.iter_batches(batch_size=MEMBERSHIP_BATCH, columns=columns):
        end = at + batch.num_rows
        coded[0][at:end] = _chunk_places(unit_index, batch.column("unit"))
        coded[2][at:end] = _chunk_places(area_index, batch.column("cell_id"))
        coded[1][at:end] = np.searchsorted(bucket_values, batch.column("bucket_start").cast(pa.int64()).to_numpy())
        at = end
    tz = bucket_type.tz
    stamps = pd.DatetimeIndex(bucket_values.astype(f"datetime64[{bucket_type.unit}]"))
    return MembershipCodes(
        stamps.tz_localize(tz) if tz else stamps,
        area_names,
        coded[0],
        coded[1],
        coded[2],
        unit_names,  # pd.factorize's uniques, as Python objects, as the frame's way gives them
        None,
    )


def _code_type(distinct: int) -> type:
    """The type `narrow_codes` gives the codes of `distinct` values (0 .. distinct - 1)."""
    return np.int32 if distinct <= 2**31 else np.int64


def _file_stamp(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def _codes_key(rung: str | None, zoning: str | None) -> str:
    return f"membership_codes:{zoning or ''}:{rung or ''}"


def _view_codes(ctx: ReleaseContext, rung: str | None, zoning: str | None) -> MembershipCodes:
    """The view's membership codes, kept in the context (the coarsening loop assesses each candidate it tries
    against the same memberships): those an earlier call read, when the membership file is the one they were
    read from (its size, modification time and inode before and after the read and now), else read now. A read
    that failed fails again where they are asked for."""
    key = _codes_key(rung, zoning)
    mine: Future[MembershipCodes] = Future()
    kept = ctx.cached(key, lambda: mine)
    if kept is not mine:
        codes = kept.result()
        if codes.source is None or codes.source == (_file_stamp(_membership_file(ctx)),) * 2:
            return codes
        ctx.forget(key)  # the file changed since: read again
        kept = ctx.cached(key, lambda: mine)
    try:
        mine.set_result(membership_codes(ctx, rung, zoning))
    except BaseException as error:
        mine.set_exception(error)
        raise
    return mine.result()


def _membership_file(ctx: ReleaseContext) -> Path:
    return ctx.area.counts / "membership.internal.parquet"


def _numbered(codes: np.ndarray, own: pd.Index, every: pd.Index) -> np.ndarray:
    """`codes` (places in `own`) as places in `every` (which holds `own`): themselves when the two are equal."""
    if own.equals(every):
        return codes
    return narrow_codes(np.asarray(every.get_indexer(own), dtype=np.int64)[codes])


def attack_inputs(
    ctx: ReleaseContext, zone_of_cells, rung: str | None = None, proposal: bool = False, zoning: str | None = None
) -> AttackInputs:
    """The candidate's view of the main geometry's cells (or of a linked `zoning`'s areas) at the policy's
    bucket or at time rung `rung` (see `_figures`) and the true memberships, coded: buckets in time order, areas
    numbered over the membership's and the published areas (sorted), units in their sort order. A linked area's
    risk zone is that of the main geometry's area holding its representative point."""
    if zoning is None:
        cells, top = _figures(ctx, rung, proposal)
        geometries = ctx.locator.geometries
        zones_of = lambda names: zone_of_cells(pd.Series(names)).reindex(names).to_numpy(dtype=object)  # noqa: E731
    else:
        from spatial_release.levels import linked_total

        count = ctx.policy.count_column
        margins = ctx.candidate_tables().margins.rename(columns={count: "n"})
        cells = margins[margins["level"] == at_rung(zoning, rung)].rename(columns={"area_id": "cell_id"})
        top = margins[margins["level"] == at_rung(linked_total(zoning), rung)]
        geometries = ctx.layers.linked[zoning].geometries
        zones_of = lambda names: _linked_zones(ctx, zone_of_cells, zoning, names)  # noqa: E731
    codes = _view_codes(ctx, rung, zoning)
    period_buckets = [] if rung else list(pd.to_datetime(ctx.buckets, utc=True))
    # distinct values first, not a set of every membership row's Timestamp
    buckets = pd.DatetimeIndex(sorted(set(period_buckets) | set(codes.buckets) | set(pd.unique(cells["bucket_start"]))))
    names = np.array(sorted(set(codes.names.tolist()) | set(pd.unique(cells["cell_id"]))), dtype=object)
    totals = np.full(len(buckets), -1, dtype=np.int64)
    totals[buckets.get_indexer(top["bucket_start"])] = top["n"].to_numpy()
    hours = bucket_hours(rung or ctx.policy.time.bucket) if rung != PERIOD_RUNG else None
    daytime = day_lag = None
    if hours is not None and hours < 24 and 24 % hours == 0:
        local_hour = buckets.tz_convert(ctx.policy.time.timezone).hour
        daytime = np.asarray((local_hour >= 7) & (local_hour < 22))
        day_lag = int(24 // hours)
    figure_area = pd.Index(names).get_indexer(cells["cell_id"]).astype(np.int64)
    view = ReleaseView(
        steps=len(buckets),
        xy=_centroids(geometries, names, np.isin(np.arange(len(names)), figure_area)),
        figure_step=buckets.get_indexer(cells["bucket_start"]).astype(np.int64),
        figure_area=figure_area,
        figure_count=cells["n"].to_numpy(dtype=np.int64),
        totals=totals,
        additive=ctx.policy.measure == "presence" and rung is None,
        daytime=daytime,
        day_lag=day_lag,
    )
    return AttackInputs(
        view,
        codes.unit,
        _numbered(codes.step, codes.buckets, buckets),
        _numbered(codes.area, pd.Index(codes.names), pd.Index(names)),
        zones_of(names),
        codes.unit_names,
    )


def places(index: pd.Index, values: pd.Series) -> np.ndarray:
    """`index.get_indexer(values)` as int64 (-1: not in it), each distinct value looked up once: Arrow's
    dictionary encoding of each chunk, then the index read per dictionary entry. get_indexer over the 40 M cell
    names of a 50 M-ping membership turned every name into a Python string first (6.3 s; this way 1.0 s, the same
    codes). A chunk with a missing value goes get_indexer's way."""
    # the column as Arrow holds it, or converted from its pandas array (never through `to_numpy()`: tz-aware
    # timestamps become Timestamp objects there, and 40 M of those took 88 s to convert)
    arrow = pa.array(values.array)
    chunks = arrow.chunks if isinstance(arrow, pa.ChunkedArray) else [arrow]
    out = np.empty(len(values), dtype=np.int64)
    at = 0
    for chunk in chunks:
        if chunk.null_count:
            out[at : at + len(chunk)] = index.get_indexer(chunk.to_pandas())
        else:
            out[at : at + len(chunk)] = _chunk_places(index, chunk)
        at += len(chunk)
    return out


def _chunk_places(index: pd.Index, chunk: pa.Array) -> np.ndarray:
    """Each value of an Arrow array with no missing value, placed in `index` (-1: not in it): its dictionary
    encoding, each distinct value looked up once."""
    encoded = pc.dictionary_encode(chunk)
    found = np.asarray(index.get_indexer(encoded.dictionary.to_pandas()), dtype=np.int64)
    return found[encoded.indices.to_numpy(zero_copy_only=False)]


OUTSIDE = "(outside the risk zones)"  # linked areas whose representative point is in no area of the main geometry


def _linked_zones(ctx: ReleaseContext, zone_of_cells, zoning: str, names: np.ndarray) -> np.ndarray:
    main = linked_areas_of_main(ctx, zoning, names)
    main_zone = zone_of_cells(pd.Series([m for m in main if isinstance(m, str)]).drop_duplicates())
    return np.array([main_zone.get(m, OUTSIDE) if isinstance(m, str) else OUTSIDE for m in main], dtype=object)


def _linked_membership(ctx: ReleaseContext, zoning: str) -> pd.DataFrame:
    """unit, bucket_start, cell_id (an area of the linked zoning) from the validated pings, counted as the
    policy's measure counts them: every area a unit was in (visitors), or its dominant area (presence: most
    pings, ties to the smallest id, as the counting breaks them). Read once per context: every view of the
    zoning and the uniqueness keys use it."""
    return ctx.cached(f"linked_membership:{zoning}", lambda: _read_linked_membership(ctx, zoning))


def _read_linked_membership(ctx: ReleaseContext, zoning: str) -> pd.DataFrame:
    pings = pd.read_parquet(ctx.area.ingest / "pings.parquet", columns=["unit", "ts", "lon", "lat"])
    layer = ctx.layers.linked[zoning]
    located = layer.locate(pings["lon"].to_numpy(), pings["lat"].to_numpy())
    starts = pd.DatetimeIndex(pd.to_datetime(sorted(ctx.buckets), utc=True))
    at = np.searchsorted(starts.asi8, pd.DatetimeIndex(pings["ts"]).as_unit("ns").asi8, side="right") - 1
    frame = pd.DataFrame(
        {"unit": pings["unit"].to_numpy(), "bucket_start": starts[np.clip(at, 0, None)], "cell_id": located}
    )
    frame = frame[(at >= 0) & pd.notna(frame["cell_id"])]
    if ctx.policy.measure == "presence":
        counted = frame.groupby(["unit", "bucket_start", "cell_id"]).size().rename("n").reset_index()
        counted = counted.sort_values(["unit", "bucket_start", "n", "cell_id"], ascending=[True, True, False, True])
        return counted.drop_duplicates(["unit", "bucket_start"])[["unit", "bucket_start", "cell_id"]]
    return frame.drop_duplicates()


def linked_areas_of_main(ctx: ReleaseContext, zoning: str, names: np.ndarray) -> np.ndarray:
    """The main geometry's cell holding each linked area's representative point (None outside it)."""
    points = ctx.layers.linked[zoning].geometries(pd.Series(names)).representative_point().to_crs("EPSG:4326")
    return ctx.locator.locate(points.x.to_numpy(), points.y.to_numpy())


def attack_params(landscape) -> AttackParams:
    """The attacks' adversary is the landscape's: p known points, draws per target and anchor, seed."""
    return AttackParams(points=landscape.points, draws=landscape.draws, seed=landscape.seed)


def inputs_digest(inputs: AttackInputs, params: AttackParams) -> str:
    """sha256 of everything `attack_risk` computes from (the coded view, memberships and zones, the
    parameters): equal digests, equal reports."""
    digest = hashlib.sha256(
        json.dumps(
            {
                "params": params.__dict__,
                "additive": inputs.view.additive,
                "steps": inputs.view.steps,
                "day_lag": inputs.view.day_lag,
            },
            sort_keys=True,
        ).encode()
    )
    view = inputs.view
    arrays = [
        view.xy,
        view.figure_step,
        view.figure_area,
        view.figure_count,
        view.totals,
        np.zeros(0) if view.daytime is None else view.daytime,
        inputs.unit,
        inputs.step,
        inputs.area,
        inputs.zone_of_area.astype(str),
    ]
    for array in arrays:
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def cached_attack(
    ctx: ReleaseContext,
    zone_of_cells,
    params: AttackParams,
    rung: str | None = None,
    proposal: bool = False,
    zoning: str | None = None,
) -> AttackReport:
    """`attack_risk` on one view of the candidate (`attack_inputs`), reusing the work area's last report when
    it was computed from identical coded inputs by the same code (the risk step, then the publish step)."""
    inputs = attack_inputs(ctx, zone_of_cells, rung, proposal, zoning)
    digest = reuse.digest_of({"attack": inputs_digest(inputs, params), "rung": rung, "proposal": proposal, "zoning": zoning})
    name = "attack:" + (zoning or "cells") + ("" if rung is None else f"@{rung}{'-proposal' if proposal else ''}")
    memo = ctx.memo()
    saved = memo.load(name, digest)
    if saved is not None:
        try:
            return AttackReport.from_json(saved)
        except (KeyError, TypeError, ValueError):
            pass
    report = attack_risk(inputs.view, inputs.unit, inputs.step, inputs.area, inputs.zone_of_area, params)
    memo.save(name, digest, report.to_json())
    return report


def attack_candidate(ctx: ReleaseContext, zone_of_cells, params: AttackParams) -> AttackReport:
    """The attacks on every zoning and time resolution the candidate publishes: the main geometry's cells and
    each linked zoning's areas, at the policy's bucket and at each rung of its time ladder, each a view of its
    own; per zone, the worst of them. (A recovery over mixed resolutions is not attempted: each view gives the
    attacker the others as withheld.)"""
    reports = []
    for zoning in [None, *(spec.name for spec in ctx.policy.geometry.linked)]:
        for rung in [None, *ctx.policy.time.ladder]:
            reports.append(cached_attack(ctx, zone_of_cells, params, rung, zoning=zoning))
    return worst_of(reports)


def worst_of(reports: list[AttackReport]) -> AttackReport:
    """Per zone, the largest linkage and membership figures of several views (accuracy: the first view's)."""
    merged: dict[str, ZoneAttack] = {}
    for report in reports:
        for zone in report.zones:
            seen = merged.get(zone.zone)
            if seen is None:
                merged[zone.zone] = replace(zone)
                continue
            seen.linkage, seen.membership = max(seen.linkage, zone.linkage), max(seen.membership, zone.membership)
            seen.units = max(seen.units, zone.units)
    return AttackReport(
        sorted(merged.values(), key=lambda z: z.zone),
        reports[0].trajectories,
        reports[0].accuracy,
        sum(r.seconds for r in reports),
    )


def attack_success(linkage: float, membership: float, adversary: Adversary, panel_share: float | None) -> float:
    """The worst of the attacks in a zone. The prosecutor knows the target is in the data: the linkage success
    itself. The journalist does not: a link succeeds only for a target that is in the panel (the zone's panel
    share, as the uniqueness figure scales it), while the membership test is itself what it learns. Both
    take the membership advantage into the worst, even the prosecutor, for whom it tells nothing new: a
    conservative choice that costs nothing where the advantage is small."""
    if adversary is Adversary.JOURNALIST and panel_share is not None and panel_share == panel_share:  # not NaN
        linkage = linkage * panel_share
    return max(linkage, membership)


UNPUBLISHED_ZONES = "(zones with no published figure)"


def with_attack_figures(zones: list[ZoneFigures], attack: AttackReport, adversary: Adversary) -> list[ZoneFigures]:
    """The zones' figures with the attacks' beside the uniqueness ones. The attacks also score units anchored
    in zones that no published figure names; naming such a zone (or its units) would tell the public that a
    withheld area holds units, so they are reported and gated as one entry, UNPUBLISHED_ZONES, with the
    worst of their figures and no unit count."""
    by_zone = {z.zone: z for z in zones}
    out: list[ZoneFigures] = []
    hidden: list[tuple[float, float, float, float]] = []  # linkage, membership, accuracy, success
    for found in attack.zones:
        base = by_zone.pop(found.zone, None)
        figures = (
            round(found.linkage, 6),
            round(found.membership, 6),
            round(found.accuracy, 6),
            round(attack_success(found.linkage, found.membership, adversary, base.panel_share if base else None), 6),
        )
        if base is None:
            hidden.append(figures)
        else:
            linkage, membership, accuracy, success = figures
            out.append(
                replace(
                    base,
                    attack_linkage=linkage,
                    attack_membership=membership,
                    attack_accuracy=accuracy,
                    attack_success=success,
                )
            )
    if hidden:
        linkage, membership, accuracy, success = (max(column) for column in zip(*hidden))
        out.append(
            ZoneFigures(
                UNPUBLISHED_ZONES,
                0,
                0.0,
                0.0,
                0.0,
                None,
                None,
                attack_linkage=linkage,
                attack_membership=membership,
                attack_accuracy=accuracy,
                attack_success=success,
            )
        )
    # a zone with published keys but no attack entry has no unit with a known point there: nothing to attack
    out += [
        replace(z, attack_linkage=0.0, attack_membership=0.0, attack_accuracy=0.0, attack_success=0.0)
        for z in by_zone.values()
    ]
    return sorted(out, key=lambda z: z.zone)


def worst_attack_zone(zones: list[ZoneFigures]) -> tuple[str | None, float | None]:
    """The zone with the highest attack success and that figure: the release figure is the worst zone."""
    scored = [z for z in zones if z.attack_success is not None]
    if not scored:
        return None, None
    worst = max(scored, key=lambda z: (z.attack_success, z.zone))
    return worst.zone, worst.attack_success


def attack_pooled(zones: list[ZoneFigures]) -> float | None:
    """The unit-weighted mean attack success over zones: reported, never gated on."""
    scored = [(z.units, z.attack_success) for z in zones if z.attack_success is not None and z.units]
    if not scored:
        return None
    return sum(units * success for units, success in scored) / sum(units for units, _ in scored)
