"""The risk stage: the per-unit key sets of the candidate, the per-zone risk of this release with the
earlier releases of its window, and the gate's decision (risk/risk.json)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from spatial_release.fileio import atomic_path, scratch_folder, sha256_file
from spatial_release.ledger import Ledger, LedgerCorrupt, ReleaseEntry
from spatial_release.levels import LEAF
from spatial_release.period import Period
from spatial_release.policy import Policy, RiskSpec
from spatial_release.risk import BLOCK, Adversary, ZoneRisk, decide, keysets, pooled_figure, public_ratio, release_figure
from spatial_release.risk.advantage import AdvantageReport
from spatial_release.risk.estimator import KeySets, RiskParams, RiskReport, estimate_digest, estimate_key_sets
from spatial_release.risk.landscape import Landscape, load_landscape, read_population_table
from spatial_release.risk.ranges import KeyRanges, estimate_key_ranges, key_ranges_digest
from spatial_release.stages import advantage as advantage_stage
from spatial_release.stages import attack as attack_stage
from spatial_release.stages import reuse
from spatial_release.stages.attack import attack_params, attack_pooled, with_attack_figures, worst_attack_zone
from spatial_release.stages.carried import UNIT_KEYS, refuse_changed_work_files
from spatial_release.stages.context import LADDER_BUCKETS, ReleaseContext, WorkArea, ZoneLayers, risk_spec
from spatial_release.stages.count import sql_path
from spatial_release.stages.dp import privacy_assessment
from spatial_release.stages.frontier import public_frontier
from spatial_release.stages.results import IngestSummary, RiskAssessment, ZoneFigures
from spatial_release.suppression.ladder import buckets_at_rungs

# Column names that say which adversary each per-zone figure belongs to.
ZONE_LABELS = {
    "mean": "prosecutor_mean",
    "at_risk": "prosecutor_at_risk",
    "worst": "prosecutor_worst",
    "journalist": "journalist_mean",
}


KEY_FORMAT = "%Y-%m-%dT%H:%MZ"  # a key is "<cell id>@<UTC start of its bucket>"


def _parquet(path: Path) -> str:
    return f"read_parquet('{sql_path(path)}')"


def write_ladder_buckets(ctx: ReleaseContext) -> Path | None:
    """The coarse bucket of each policy bucket at every rung of the policy's time ladder (public structure,
    no unit in it), for the risk stage's keys; None without a ladder."""
    links = ctx.structure.time_links if ctx.policy.time.ladder else ()
    if not links:
        return None
    rows = [(rung, fine, coarse) for rung, parent in buckets_at_rungs(links).items() for fine, coarse in parent.items()]
    frame = pd.DataFrame(rows, columns=["rung", "fine", "coarse"])
    path = ctx.area.counts / LADDER_BUCKETS
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)
    return path


AREAS = "risk_areas.parquet"  # counts/: every published area level each leaf belongs to (public structure)
LINKED_MEMBERSHIP = "linked_membership.internal.parquet"  # counts/: per unit, its areas of the linked zonings


def membership_cells(area: WorkArea) -> pd.Series:
    """The distinct cells of the membership, in order, read in DuckDB within its memory limit. The membership
    has a row per (unit, cell, bucket): its cell column alone, read into pandas, took over 15 GB at 500 M
    generated pings."""
    with scratch_folder(area.risk, "risk-cells") as spill:
        con = keysets.connect(spill)
        try:
            query = f"SELECT DISTINCT cell_id FROM {_parquet(area.counts / 'membership.internal.parquet')} ORDER BY cell_id"
            return con.sql(query).to_arrow_table().column(0).to_pandas()
        finally:
            con.close()


def write_risk_areas(ctx: ReleaseContext) -> Path | None:
    """For the uniqueness keys of every zoning (`released_keys_sql`): the areas each leaf is in at the main
    geometry's parent levels and, for the linked zonings, the leaf itself and its parents, with the main
    geometry's cell holding it (whose risk zone the key takes), and each unit's linked areas per bucket
    (from the validated pings, as the attacks count them). None when the geometry has neither."""
    from spatial_release.stages.attack import _linked_membership, linked_areas_of_main

    geometry = ctx.policy.geometry
    if ctx.policy.risk is None:  # no risk zones: assess_risk refuses the release, saying so
        return None
    rows = []
    levels = geometry.level_names()
    if levels:
        hierarchy = ctx.locator.hierarchy(membership_cells(ctx.area))
        for level in levels:
            rows.append(
                pd.DataFrame(
                    {
                        "zoning": LEAF,
                        "leaf": hierarchy["cell_id"],
                        "level": level,
                        "area_id": hierarchy[level],
                        "main_cell": hierarchy["cell_id"],
                    }
                )
            )
    linked = []
    for spec in geometry.linked:
        membership = _linked_membership(ctx, spec.name).assign(zoning=spec.name)
        linked.append(membership)
        leaves = membership["cell_id"].drop_duplicates()
        parents = ctx.layers.linked[spec.name].parent_table().set_index("cell_id").reindex(leaves.to_numpy())
        main = linked_areas_of_main(ctx, spec.name, leaves.to_numpy())
        for level in [spec.name, *(p.level for p in spec.parents)]:
            area = leaves.to_numpy() if level == spec.name else parents[level].to_numpy()
            rows.append(
                pd.DataFrame(
                    {"zoning": spec.name, "leaf": leaves.to_numpy(), "level": level, "area_id": area, "main_cell": main}
                )
            )
    if not rows:
        return None
    areas = pd.concat(rows, ignore_index=True).dropna()
    # A key belongs to one risk zone (the anchor of "I know she was in z"): an area over several risk zones
    # (a 2 km parent over four 1 km zones, a tract across two wards) is left out of the keys; the attacks
    # still read it (stages.attack views every zoning).
    areas["zone"] = _risk_zone_of(ctx, areas["main_cell"]).reindex(areas["main_cell"]).to_numpy() if len(areas) else []
    spread = areas.groupby(["zoning", "level", "area_id"])["zone"].transform("nunique")
    path = ctx.area.counts / AREAS
    with atomic_path(path) as tmp:
        areas[spread == 1].drop(columns="zone").to_parquet(tmp, index=False)
    if linked:
        with atomic_path(ctx.area.counts / LINKED_MEMBERSHIP) as tmp:
            pd.concat(linked, ignore_index=True).to_parquet(tmp, index=False)
    return path


@dataclass(frozen=True)
class _KeyPart:
    """Published keys joined to the memberships counted in them. `members`: rows unit, cell_id, bucket_start
    (and zoning, for the linked zonings' areas); `published`: relations of each published key once per leaf
    area it covers (leaf, bucket_start, key, cell_id: the main geometry's cell whose risk zone the key takes),
    formatted on the published side (a few hundred thousand rows): formatting the keys per membership row took
    18 s of the 50 M-ping risk step."""

    members: str
    published: tuple[str, ...]
    zoned: bool = False

    @property
    def on(self) -> str:
        same_zoning = " AND p.zoning = m.zoning" if self.zoned else ""
        return f"p.leaf = m.cell_id AND p.bucket_start = m.bucket_start{same_zoning}"

    def rows(self) -> str:
        """One join per published relation: the key set file's rows come grouped by kind of key, which
        compresses a third smaller than one join over all of them."""
        return " UNION ALL ".join(
            f"SELECT m.unit, p.key, p.cell_id FROM {self.members} m JOIN ({published}) p ON {self.on}"
            for published in self.published
        )

    def keys(self) -> str:
        return " UNION ALL ".join(f"SELECT key, cell_id FROM ({published})" for published in self.published)

    def coded(self) -> str:
        """The rows coded through risk_units and risk_keys (`keysets.KeySource`) in one join of the members
        with every published relation: only the published side's keys are looked up by name."""
        zoning = "q.zoning, " if self.zoned else ""
        published = " UNION ALL ".join(
            f"SELECT {zoning}q.leaf, q.bucket_start, rk.k FROM ({p}) q JOIN risk_keys rk ON rk.key = q.key"
            for p in self.published
        )
        return (
            f"SELECT ru.u, p.k FROM {self.members} m JOIN risk_units ru ON ru.unit = m.unit "
            f"JOIN ({published}) p ON {self.on}"
        )


def _margin_keys(area: WorkArea) -> str:
    """The candidate's published margins (level, area_id, bucket_start, key "<level>:<area>@<start>")."""
    return (
        f"(SELECT level, area_id, bucket_start, level || ':' || area_id || '@' || strftime(bucket_start, "
        f"'{KEY_FORMAT}') AS key FROM (SELECT DISTINCT level, area_id, bucket_start "
        f"FROM {_parquet(area.candidate / 'margins.parquet')}))"
    )


def _rung_keys(area: WorkArea) -> str:
    """The candidate's published cell figures at the rungs of its time ladder (rung, area_id, bucket_start,
    key "<cell>@<rung>@<start>")."""
    rung = f"substr(level, {len(LEAF) + 2})"
    return (
        f"(SELECT {rung} AS rung, area_id, bucket_start, area_id || '@' || {rung} || '@' || strftime(bucket_start, "
        f"'{KEY_FORMAT}') AS key FROM (SELECT DISTINCT level, area_id, bucket_start "
        f"FROM {_parquet(area.candidate / 'margins.parquet')} WHERE starts_with(level, '{LEAF}@')))"
    )


def _key_parts(area: WorkArea, ladder: Path | None = None) -> list[_KeyPart]:
    """Every published key a unit is counted in (see `released_keys_sql`): one part for the membership (its
    cells, the parent areas of the main geometry and the cells at each rung of the time ladder: one join per
    membership row, not one per kind of key) and one for the linked zonings' memberships."""
    membership = _parquet(area.counts / "membership.internal.parquet")
    published = [
        f"SELECT cell_id AS leaf, bucket_start, cell_id || '@' || strftime(bucket_start, '{KEY_FORMAT}') AS key, "
        f"cell_id FROM (SELECT DISTINCT cell_id, bucket_start FROM {_parquet(area.candidate / 'cells.parquet')})"
    ]
    linked_part = []
    areas = area.counts / AREAS
    if areas.exists():
        zoned = (
            "SELECT a.zoning, a.leaf, g.bucket_start, g.key, a.main_cell AS cell_id "
            f"FROM {_parquet(areas)} a JOIN {_margin_keys(area)} g ON g.level = a.level AND g.area_id = a.area_id"
        )
        published.append(f"SELECT leaf, bucket_start, key, cell_id FROM ({zoned}) WHERE zoning = '{LEAF}'")
        linked = area.counts / LINKED_MEMBERSHIP
        if linked.exists():
            linked_part.append(_KeyPart(_parquet(linked), (zoned,), zoned=True))
    if ladder is not None:
        published.append(
            "SELECT c.area_id AS leaf, r.fine AS bucket_start, c.key, c.area_id AS cell_id "
            f"FROM {_rung_keys(area)} c JOIN {_parquet(ladder)} r ON r.rung = c.rung AND r.coarse = c.bucket_start"
        )
    return [_KeyPart(membership, tuple(published)), *linked_part]


def released_keys_sql(area: WorkArea, ladder: Path | None = None) -> str:
    """A DuckDB query of unit, key, cell_id for every published (cell, bucket) each unit was counted in,
    joining the membership to the candidate's cells in DuckDB (UTC session: keys name UTC instants). A
    streaming join, no DISTINCT: the membership has one row per (unit, cell, bucket), and the key sets
    count a repeated (unit, key) once anyway (risk.keysets). With a time ladder (`ladder`, see
    `write_ladder_buckets`) every published coarser cell figure is a key too ("<cell>@<rung>@<start>") of the
    units counted in that cell in one of its buckets: what an outsider learns from the week's figure. Every
    published area of the main geometry's parent levels and of the linked zonings a unit is counted in is a key
    too (`write_risk_areas`: "<level>:<area>@<start>"), so the bound counts every zoning."""
    return " UNION ALL ".join(part.rows() for part in _key_parts(area, ladder))


def released_key_source(area: WorkArea, ladder: Path | None = None) -> keysets.KeySource:
    """The same key sets as `released_keys_sql`, for `keysets.load_key_sets` to code straight from the work
    area: the units of the memberships, the published keys, and the memberships joined to the published keys
    by code. No key is named per membership row, and no key set file is read back: coding the 50 M-ping key
    set file (118 M rows) took about 19 s, four scans of its key strings."""
    parts = _key_parts(area, ladder)
    members = list(dict.fromkeys(part.members for part in parts))
    return keysets.KeySource(
        units=" UNION ALL ".join(f"SELECT unit FROM {m}" for m in members),
        keys=" UNION ALL ".join(part.keys() for part in parts),
        pairs=" UNION ALL ".join(part.coded() for part in parts),
        exact=False,
    )


def write_released_keys(area: WorkArea, path: Path, ladder: Path | None = None) -> None:
    """Write the candidate's per-unit key sets (unit, key, cell_id) to `path`, in DuckDB: nothing per
    membership row is held in Python."""
    with scratch_folder(area.risk, "risk-keys") as spill, atomic_path(path) as tmp:
        con = keysets.connect(spill)
        try:
            con.execute(f"COPY ({released_keys_sql(area, ladder)}) TO '{sql_path(tmp)}' (FORMAT parquet)")
        finally:
            con.close()


def _risk_zone_of(ctx: ReleaseContext, cells: pd.Series) -> pd.Series:
    level = risk_spec(ctx.policy).zones
    if level == LEAF:
        return pd.Series(cells.to_numpy(), index=cells.to_numpy())
    hierarchy = ctx.locator.hierarchy(cells.drop_duplicates())
    mapping = dict(zip(hierarchy["cell_id"], hierarchy[level]))
    return pd.Series([mapping[c] for c in cells], index=cells.to_numpy())


def zone_population(
    policy: Policy, landscape: Landscape, landscape_path: Path, layers: ZoneLayers | None = None
) -> dict[str, float] | None:
    """Public population per risk zone: each population polygon counts in the zone holding its
    representative point (zones geometry only; a grid has no polygons to join)."""
    if landscape.population is None:
        return None
    if landscape.population.table:  # the bounded, checked read the policy's load made too
        return read_population_table(landscape_path, landscape)
    if policy.geometry.kind != "zones":
        return None
    if landscape.population.path is None:
        raise ValueError(f"{landscape_path}: population names neither a table nor polygons")
    import geopandas as gpd

    source = gpd.read_file((landscape_path.parent / landscape.population.path).resolve())
    layer = (layers or ZoneLayers(policy)).main_zones
    zones = layer.frame[[policy.geometry.id, "geometry"]].rename(columns={policy.geometry.id: "cell_id"})
    level = risk_spec(policy).zones
    if level != LEAF:
        parents = layer.parent_table()[["cell_id", level]]
        zones = zones.merge(parents, on="cell_id").dissolve(by=level).reset_index()
        zones = zones.rename(columns={level: "zone"})
    else:
        zones = zones.rename(columns={"cell_id": "zone"})
    points = source.set_geometry(source.representative_point()).to_crs(zones.crs)
    joined = gpd.sjoin(points[[landscape.population.value, "geometry"]], zones[["zone", "geometry"]], predicate="within")
    return joined.groupby("zone")[landscape.population.value].sum().astype(float).to_dict()


def spent_figures(entries: Iterable[ReleaseEntry]) -> list[float]:
    """The risk figure each earlier release spent of the budget. Every published release has one (the gate
    blocks a release without an estimate), so an entry without it cannot be counted as spending nothing."""
    figures = []
    for entry in entries:
        if entry.release_figure is None:
            raise LedgerCorrupt(
                entry.seq, f"release {entry.dataset} {entry.period} records no risk figure: the budget it spent is unknown"
            )
        figures.append(entry.release_figure)
    return figures


def population_releases(policy: Policy, ledger: Ledger, inputs: Iterable[str] = ()) -> list[ReleaseEntry]:
    """Every release, of any programme, drawn on the policy's population (ledger order), from a ledger read
    under its lock and cross-checked with releases/ (a deleted or truncated ledger must not reset the
    cumulative risk).

    The population is keyed on the data too: a release that read one of the same input files (by content:
    `inputs`, the sha256 of this release's files, and those the dataset's own releases recorded) is of the
    population whatever its label says, so a copy of a policy under another name and without `population:`
    spends the same budget and is audited with it."""
    entries = ledger.checked_releases()
    # A dataset's own earlier releases always count, whatever population they were recorded under: renaming
    # the population must not reset the budget.
    own = [e for e in entries if e.population == policy.population_key or e.dataset == policy.name]
    files = set(inputs) | {digest for e in own for digest in e.inputs}
    return [e for e in entries if e in own or files & set(e.inputs)]


def release_inputs(ctx: ReleaseContext) -> list[str]:
    """The sha256 of each input file of the release (empty before ingest, or for an older ingest summary)."""
    path = ctx.area.ingest / IngestSummary.FILE
    return list(IngestSummary.read(ctx.area.ingest).input_digests or []) if path.exists() else []


def earlier_releases(policy: Policy, period: Period, ledger: Ledger, inputs: Iterable[str] = ()) -> list[ReleaseEntry]:
    """The earlier releases in the risk window: this dataset's and those of every programme that shares its
    population (a quarterly and a monthly programme over the same bikes spend one budget)."""
    entries = [e for e in population_releases(policy, ledger, inputs) if e.key != (policy.name, period.label)]
    window = policy.risk.window if policy.risk else None
    return entries[-window:] if window else entries


def population_releases_before(ctx: ReleaseContext, ledger: Ledger) -> list[ReleaseEntry]:
    """Every earlier release of the policy's population (no window: a privacy budget counts them all)."""
    return [
        e
        for e in population_releases(ctx.policy, ledger, release_inputs(ctx))
        if e.key != (ctx.policy.name, ctx.period.label)
    ]


def key_set_path(work_root: Path, policy: Policy, period_label: str) -> Path:
    return WorkArea(work_root / policy.name / period_label).unit_keys


def key_retention_days(policy: Policy) -> int:
    """How long a release's per-unit artefacts are kept: the policy's `risk.key_retention_days`, or its default
    for a policy without a risk section (a DP programme's membership files are per-unit data too)."""
    if policy.risk is None:
        return int(RiskSpec.model_fields["key_retention_days"].default)
    return policy.risk.key_retention_days


def expired(policy: Policy, entry: ReleaseEntry, now: datetime) -> bool:
    """Whether a release entry is past the policy's key retention (its per-unit data may be gone)."""
    return now - entry.recorded_at > timedelta(days=key_retention_days(policy))


def _earlier_keys(ctx: ReleaseContext, entries: list[ReleaseEntry]) -> list[Path]:
    """Per-unit key set files of this dataset's earlier releases. Releases of other programmes of the same
    population count through their published figures in the cumulative risk; their key sets are not merged,
    because their keys are cells of another geometry and buckets that the risk zones here do not map."""
    paths = []
    now = datetime.now(UTC)
    own = [e for e in entries if e.dataset == ctx.policy.name]
    refuse_changed_work_files(((ctx.area_of(e.period), e) for e in own), names={UNIT_KEYS})
    for entry in own:
        path = ctx.area_of(entry.period).unit_keys
        if path.exists():
            paths.append(path)
        elif not expired(ctx.policy, entry, now):
            raise FileNotFoundError(
                f"the per-unit key sets of release {entry.period} ({path}) are missing "
                "within their retention: the risk over the window cannot be estimated"
            )
    return paths


def window_key_sets(
    ctx: ReleaseContext,
    unit_keys: pd.DataFrame | Path | None,
    earlier: list[ReleaseEntry],
    earlier_keys: list[Path] | None = None,
    ranges_above: int | None = None,
) -> KeySets | KeyRanges:
    """The coded key sets of this release (a DataFrame, a key set file of either kind, or None: coded straight
    from the work area's memberships and candidate, `released_key_source`) and of the earlier releases of the
    window (`earlier_keys`: their key set files, when already found), built in DuckDB; in ranges of units on
    disk above `ranges_above` rows.

    Derived from the work area over that limit (or `CODED_UP_TO`; the rows hinted by the key set file the risk
    step kept), this release's key sets are read from (unit, key, cell_id) rows written to scratch first. At
    500 M generated pings (1.2 G rows) the coded join, whose published side holds every published key once per
    leaf it covers, ran DuckDB out of its 1 GB; the rows' road is the one measured there (3,233 s, 4.7 GB)."""
    earlier_keys = _earlier_keys(ctx, earlier) if earlier_keys is None else earlier_keys
    selects: list[str] = []
    files: list[keysets.KeySource] = []
    for path in earlier_keys:
        _key_set_part(path, selects, files)
    frames, coded = None, None
    current = ctx.area.unit_keys if unit_keys is None else unit_keys
    rows_hint = _rows_in([*earlier_keys, *([] if isinstance(current, pd.DataFrame) else [Path(current)])])
    if rows_hint is not None and isinstance(current, pd.DataFrame):
        rows_hint += len(current)
    limit = CODED_UP_TO if ranges_above is None else min(ranges_above, CODED_UP_TO)
    if unit_keys is None and rows_hint is not None and rows_hint > limit:
        with scratch_folder(ctx.area.risk, "released-keys") as folder:
            path = Path(folder) / "unit_keys.parquet"
            write_released_keys(ctx.area, path, write_ladder_buckets(ctx))
            return window_key_sets(ctx, path, earlier, earlier_keys, ranges_above)
    if unit_keys is None:
        coded = [released_key_source(ctx.area, write_ladder_buckets(ctx))]
    elif isinstance(unit_keys, pd.DataFrame):
        selects.insert(0, "SELECT unit, key, cell_id FROM current_keys")
        frames = {"current_keys": unit_keys}
    else:
        _key_set_part(Path(unit_keys), selects, files)
    coded = [*(coded or []), *files]
    zones = lambda cells: _risk_zone_of(ctx, cells)  # noqa: E731
    return keysets.window_key_sets(selects, zones, frames, ranges_above, coded, ctx.area.risk, rows_hint)


def _key_set_part(path: Path, selects: list[str], files: list[keysets.KeySource]) -> None:
    """Add a key set file to the window's parts: a coded one (what the risk step keeps, `keysets.write_coded`)
    as a coded part, one of (unit, key, cell_id) rows (over `CODED_UP_TO`, or written before the coded
    files) as a query. Either gives the same figures, in any order: the window is numbered over all parts."""
    if keysets.coded_file_counts(path) is not None:
        files.append(keysets.coded_file_source(path))
    else:
        selects.append(f"SELECT unit, key, cell_id FROM {_parquet(path)}")


def key_set_rows(path: Path) -> pd.DataFrame:
    """The (unit, key, cell_id) rows of a key set file of either kind, for a notebook or a test (whole in
    memory: small releases only)."""
    con = duckdb.connect()
    try:
        return con.sql(keysets.file_rows_query(path)).df()
    finally:
        con.close()


def _rows_in(paths: list[Path]) -> int | None:
    """The (unit, key) rows of the key set files, from their Parquet metadata (no scan), or None when one is
    unreadable: the risk step has just written this release's file from the same rows it codes."""
    try:
        return sum(keysets.file_rows(path) for path in paths)
    except (OSError, ValueError, pa.ArrowException):
        return None


def labelled_zones(frame: pd.DataFrame) -> list[ZoneFigures]:
    return [ZoneFigures.from_json(z) for z in frame.rename(columns=ZONE_LABELS).to_dict("records")]


ESTIMATE = "estimate.internal.json"  # risk/: the last estimate and the sha256 of what it was computed from
# Above this many (unit, key) rows read, the estimate holds one range of units at a time (`risk.ranges`): the
# window's key sets whole hold about 12 bytes a row while they are coded, 3 GB here (at 50 M generated pings
# they are 118 M rows, whole; at 500 M about 1.2 G, in ranges).
RANGES_ABOVE = 250_000_000
# Up to this many rows this release's key sets are coded straight from the work area (`released_key_source`);
# above, from a key set file. The coded join was measured at 118 M rows (50 M generated pings) and ran out of
# DuckDB's 1 GB at 1.2 G; the file's road was measured at both.
CODED_UP_TO = 150_000_000


def _saved_report(path: Path, digest: str | None) -> RiskReport | None:
    """The estimate saved at `path` under `digest`, or None (none, other inputs, or unreadable)."""
    saved = reuse.load_saved(path, digest)
    try:
        return None if saved is None else RiskReport.from_json(saved)
    except (KeyError, TypeError, ValueError):
        return None


def estimate_once(
    area: WorkArea, sets: KeySets | KeyRanges, params: RiskParams, population: dict[str, float] | None, started: float
) -> RiskReport:
    """`estimate_key_sets`, reusing the work area's last estimate when it was computed from byte-identical
    inputs by the same code (`estimate_digest`: the coded key sets, the parameters and the population;
    `reuse.digest_of` adds the code). The publish step builds the key sets again from the candidate and the
    ledger's window, so it re-estimates whenever any of them changed (another release in the window, an edited
    candidate) and otherwise reuses the risk step's estimate instead of drawing every knowledge set again.
    The decision is always taken afresh, on the ledger read under the publication's lock."""
    if isinstance(sets, KeyRanges):
        try:
            # keyed by the ranges' own digest (every range's unit-major arrays): one more reading of each
            payload = {
                "params": params.__dict__,
                "population": sorted((population or {}).items()),
                "ranges": key_ranges_digest(sets),
            }
            digest = reuse.digest_of({"risk_estimate_ranges": json.dumps(payload, sort_keys=True, default=str)})
            return _saved_or_computed(area, digest, lambda: estimate_key_ranges(sets, params, population, started))
        finally:
            sets.close()
    digest = reuse.digest_of({"risk_estimate": estimate_digest(sets, params, population)})
    return _saved_or_computed(area, digest, lambda: estimate_key_sets(sets, params, population, started))


def _saved_or_computed(area: WorkArea, digest: str | None, compute: Callable[[], RiskReport]) -> RiskReport:
    path = area.risk / ESTIMATE
    saved = _saved_report(path, digest)
    if saved is not None:
        return saved
    report = compute()
    reuse.save(path, digest, report.to_json())
    return report


ESTIMATE_BY_INPUTS = "estimate_inputs.internal.json"  # risk/: the same estimate, keyed by the files it derives from


def window_inputs_digest(
    ctx: ReleaseContext, earlier_keys: list[Path], params: RiskParams, population: dict[str, float] | None
) -> str | None:
    """sha256 of what the window's estimate derives from when this release's key sets come from the work area
    (`released_keys_sql`): the membership, the candidate files, the policy and period (the time ladder), the
    earlier key set files, the risk zone of every cell they name (zone files shape it; no other hash covers
    them), the parameters, the population and the code (`reuse.digest_of`). Hashing the files costs about a
    second at 50 M pings; building the coded key sets again cost 28 s."""
    area = ctx.area
    membership = area.counts / "membership.internal.parquet"
    sources = [membership, *earlier_keys]
    con = duckdb.connect()
    try:
        cells = pd.Series(
            sorted(
                {
                    row[0]
                    for path in sources
                    for row in con.execute(
                        f"SELECT DISTINCT cell_id FROM {_parquet(path)} WHERE cell_id IS NOT NULL"
                    ).fetchall()
                }
            ),
            dtype=object,
        )
    finally:
        con.close()
    zones = _risk_zone_of(ctx, cells) if len(cells) else pd.Series(dtype=object)
    return reuse.digest_of(
        {
            "risk_inputs": {
                name: sha256_file(path)
                for name, path in (
                    ("membership", membership),
                    ("cells", area.candidate / "cells.parquet"),
                    ("margins", area.candidate / "margins.parquet"),
                    ("areas", area.counts / AREAS),
                    ("linked", area.counts / LINKED_MEMBERSHIP),
                )
                if path.exists()
            },
            "policy": ctx.policy.sha256,
            "period": ctx.period.label,
            "earlier": [[str(path), sha256_file(path)] for path in earlier_keys],
            "zones": [[str(c), str(z)] for c, z in zip(cells, zones.reindex(cells).to_numpy())],
            "params": params.__dict__,
            "population": sorted((population or {}).items()),
        }
    )


def estimate_window(
    ctx: ReleaseContext,
    unit_keys: pd.DataFrame | Path | None,
    earlier: list[ReleaseEntry],
    params: RiskParams,
    population: dict[str, float] | None,
    started: float,
    keys_from_area: bool = False,
    this_release: KeySets | None = None,
) -> RiskReport:
    """The estimate over this release's key sets and the earlier ones of the window. When this release's key
    sets derive from the work area (the publish step, or the risk step that has just derived them), an
    estimate saved for byte-identical source files is reused without building the key sets at all;
    otherwise the coded key sets are built and `estimate_once` reuses or computes the estimate."""
    earlier_keys = _earlier_keys(ctx, earlier)
    inputs = None
    if unit_keys is None or keys_from_area:
        try:
            inputs = window_inputs_digest(ctx, earlier_keys, params, population)
        except (KeyError, ValueError, OSError, duckdb.Error):
            inputs = None  # the key sets' own checks below name what is wrong with the inputs
    saved = _saved_report(ctx.area.risk / ESTIMATE_BY_INPUTS, inputs)
    if saved is not None:
        return saved
    sets: KeySets | KeyRanges
    if this_release is not None and not earlier_keys and len(this_release.unit_keys) <= RANGES_ABOVE:
        sets = this_release  # the window is this release alone: the arrays its numbering gives, as coded
    else:
        # the file the risk step has just kept is read (coded: its codes joined to the window's numbering; rows:
        # kept so because the coded join was over its limit, so not tried again)
        current = None if keys_from_area and not isinstance(unit_keys, Path) else unit_keys
        sets = window_key_sets(ctx, current, earlier, earlier_keys, RANGES_ABOVE)
    report = estimate_once(ctx.area, sets, params, population, started)
    if inputs is not None:
        reuse.save(ctx.area.risk / ESTIMATE_BY_INPUTS, inputs, report.to_json())
    return report


def _required_risk(policy: Policy) -> RiskSpec:
    if policy.risk is None:
        raise ValueError(f"{policy.path}: no 'risk' section: a release without a risk estimate is blocked")
    return policy.risk


def assess_risk(
    ctx: ReleaseContext,
    ledger: Ledger,
    unit_keys: pd.DataFrame | Path | None = None,
    earlier: list[ReleaseEntry] | None = None,
    keys_from_area: bool = False,
    rung: str | None = None,
    this_release: KeySets | None = None,
) -> RiskAssessment:
    """Per-zone risk of this release plus the earlier ones in the window, and the gate's decision.

    unit_keys: this release's per-unit key sets (unit, key, cell_id), as a DataFrame or a key set file;
    None derives them from the work area (`keys_from_area`: the file was just derived from it, as the risk
    step does). The window's key sets are read and coded in DuckDB (memory: the units, the keys and 8 bytes
    per released (unit, key) pair, never a row per ping). Under `risk.model: attack` the attacks run on the
    candidate's cells (`rung`: on the cells at that rung of the time ladder instead, for a coarsening proposal)
    and gate; the uniqueness figure is reported beside them as the upper bound."""
    policy, period = ctx.policy, ctx.period
    if policy.protection.method == "dp":  # the population's privacy budget gates (stages.dp)
        return privacy_assessment(ctx, population_releases_before(ctx, ledger) if earlier is None else earlier)
    risk = _required_risk(policy)
    landscape_path = policy.resolve(risk.landscape)
    landscape, landscape_sha = load_landscape(landscape_path)
    earlier = earlier_releases(policy, period, ledger, release_inputs(ctx)) if earlier is None else earlier
    started = time.perf_counter()
    params, population = landscape.params(), zone_population(policy, landscape, landscape_path, ctx.layers)
    report = estimate_window(ctx, unit_keys, earlier, params, population, started, keys_from_area, this_release)
    # The gated figure follows the landscape's adversary (itself fixed by who is in the panel); every
    # figure of the report is labelled with the adversary it belongs to.
    adversary = Adversary(landscape.adversary)
    figures = _model_figures(
        ctx, risk.model, landscape, report, adversary, rung, unit_keys if isinstance(unit_keys, Path) else None
    )
    previous = spent_figures(earlier)
    decision = decide(
        figures.figure, figures.worst_zone, previous, risk.per_release_ceiling, risk.cumulative_ceiling, risk.warn_at
    )
    return RiskAssessment(
        status=decision.status,
        reason=f"{adversary.value} adversary, {risk.model} model: {decision.reason}",
        worst_zone=decision.worst_zone,
        release_figure=figures.figure,
        pooled=figures.pooled,
        cumulative=decision.cumulative,
        headroom=decision.headroom,
        previous=previous,
        measure=figures.measure,
        adversary=adversary.value,
        panel=landscape.panel,
        landscape_sha256=landscape_sha,
        landscape_version=landscape.version,
        points=landscape.points,
        units=report.units,
        keys=report.keys,
        window_periods=[e.period for e in earlier] + [period.label],
        zones=figures.zones,
        seconds=round(time.perf_counter() - started, 2),
        model=risk.model,
        frontier=_public_frontier(ctx),
        upper_bound=figures.bound,
        upper_bound_zone=figures.bound_zone.zone if figures.bound_zone else None,
        warning=_bound_warning(figures, risk.model, risk.per_release_ceiling),
    )


@dataclass(frozen=True)
class _ModelFigures:
    """The figures the gate reads under the policy's risk model, rounded as they are published, and the
    uniqueness figure reported beside them as the upper bound."""

    zones: list[ZoneFigures]
    worst_zone: str | None
    figure: float | None
    pooled: float | None
    measure: str
    bound: float | None
    bound_zone: ZoneRisk | None


def _model_figures(
    ctx: ReleaseContext,
    model: str,
    landscape: Landscape,
    report: RiskReport,
    adversary: Adversary,
    rung: str | None,
    key_set_file: Path | None = None,
) -> _ModelFigures:
    """Under `attack` the attacks on the candidate's cells (at `rung` of the time ladder for a coarsening
    proposal) give the figures; under `uniqueness` the estimate's worst zone does."""
    bound_zone, bound = release_figure(report, adversary)
    zones = labelled_zones(report.frame())
    if model == "advantage":
        found = candidate_advantage(ctx, landscape, key_set_file, rung)
        zones = with_advantage_figures(zones, found)
        worst = found.worst()
        return _ModelFigures(
            zones,
            worst.zone if worst else None,
            public_ratio(worst.gated()) if worst else None,
            None,  # never a mean over units or zones: padding dilutes it
            "advantage_ucb",
            public_ratio(bound),
            bound_zone,
        )
    if model == "attack":
        zone_of = lambda cells: _risk_zone_of(ctx, cells)  # noqa: E731
        attack = (
            attack_stage.attack_candidate(ctx, zone_of, attack_params(landscape))
            if rung is None
            else attack_stage.attack_once(ctx, zone_of, attack_params(landscape), rung, proposal=True)
        )
        zones = with_attack_figures(zones, attack, adversary)
        worst_zone, figure = worst_attack_zone(zones)
        pooled = attack_pooled(zones)
        measure = "attack_success"
    else:
        worst_zone, figure = (bound_zone.zone if bound_zone else None), bound
        pooled = pooled_figure(report, adversary)
        measure = adversary.measure
    return _ModelFigures(
        zones, worst_zone, public_ratio(figure), public_ratio(pooled), measure, public_ratio(bound), bound_zone
    )


def candidate_advantage(
    ctx: ReleaseContext, landscape: Landscape, key_set_file: Path | None = None, rung: str | None = None
) -> AdvantageReport:
    """The advantage of the candidate (`stages.advantage`) from its kept key sets (`key_set_file`, the risk
    step's own by default), with the landscape's adversary and public population and the ceiling the gate
    applies. Only this release's key sets: the earlier releases of the window are the uniqueness bound's."""
    risk = _required_risk(ctx.policy)
    path = ctx.area.unit_keys if key_set_file is None else key_set_file
    if not path.exists():  # the publish step's assessment, or a review, on a work area without kept key sets
        keep_released_keys(ctx, write_ladder_buckets(ctx))
        path = ctx.area.unit_keys
    landscape_path = ctx.policy.resolve(risk.landscape)
    population = zone_population(ctx.policy, landscape, landscape_path, ctx.layers)
    zone_of = lambda cells: _risk_zone_of(ctx, cells)  # noqa: E731
    params = advantage_stage.advantage_params(landscape)
    # one memo of the assessment per set of inputs: the climbing loop's last pass, the risk step and the publish
    # step assess the same candidate
    inputs = {
        "key_sets": sha256_file(path),
        "candidate": [sha256_file(ctx.area.candidate / n) for n in ("cells.parquet", "margins.parquet")],
        "membership": sha256_file(ctx.area.counts / "membership.internal.parquet"),
        "params": params.__dict__,
        "ceiling": risk.per_release_ceiling,
        "population": population,
        "policy": ctx.policy.sha256,
        "rung": rung,
    }
    digest = reuse.digest_of(inputs)
    memo = ctx.area.risk / ADVANTAGE_MEMO
    saved = reuse.load_saved(memo, digest)
    if saved is not None:
        try:
            return AdvantageReport.from_json(saved)
        except (KeyError, TypeError, ValueError):
            pass
    found = advantage_stage.advantage_of(ctx, path, zone_of, params, risk.per_release_ceiling, population, rung)
    reuse.save(memo, digest, found.to_json())
    return found


ADVANTAGE_MEMO = "advantage.internal.json"  # risk/: the last advantage assessment and the digest of its inputs


def with_advantage_figures(zones: list[ZoneFigures], found: AdvantageReport) -> list[ZoneFigures]:
    """The zones' uniqueness figures with the advantage figures beside them. Zones with no published figure
    are one entry with their units' figures (never 0) and no unit count."""
    by_zone = {z.zone: z for z in zones}
    out = []
    for z in found.zones:
        base = by_zone.pop(z.zone, None) or ZoneFigures(z.zone, 0, 0.0, 0.0, 0.0, None, None)
        out.append(
            replace(
                base,
                targets=z.targets,
                success_without=round(z.success_without, 6),
                success_with=round(z.success_with, 6),
                advantage=round(z.advantage, 6),
                advantage_ucb=round(z.advantage_ucb, 6),
                strongest=z.strongest,
                exposed=z.exposed,
                exposed_share=None if z.exposed_share is None else round(z.exposed_share, 6),
                boundary_units=z.boundary_units,
                complete=z.targets == z.units,
            )
        )
    return sorted(out + list(by_zone.values()), key=lambda z: z.zone)


def _bound_warning(figures: _ModelFigures, model: str, ceiling: float) -> str | None:
    """A warning when the uniqueness upper bound is over the per-release ceiling while the attacks, which the gate
    reads, are within it."""
    bound, figure = figures.bound, figures.figure
    if (
        model in ("attack", "advantage")
        and figures.bound_zone is not None
        and bound is not None
        and bound > ceiling
        and figure is not None
        and figure <= ceiling
    ):
        return (
            f"the uniqueness upper bound (perfect trajectory recovery) of zone {figures.bound_zone.zone} is "
            f"{bound:.3f}, over the ceiling {ceiling}; "
            + (
                f"what the release adds to the attackers run on it reaches {figure:.3f}: the gate reads the advantage"
                if model == "advantage"
                else f"the attacks run on the published figures reach {figure:.3f}: the gate reads the attacks"
            )
            + f" (risk.model: {model})"
        )
    return None


def _public_frontier(ctx: ReleaseContext) -> list[dict] | None:
    """The public part of the configurations protection tried (`stages.coarsen`), from the candidate's manifest."""
    from spatial_release.stages.results import ProtectionManifest

    try:
        return public_frontier(ProtectionManifest.read(ctx.area.candidate).summary.frontier, list(ctx.policy.time.ladder))
    except (OSError, ValueError, KeyError):
        return None


def coarser_keys_sql(area: WorkArea, ladder: Path, rung: str, k: int) -> str:
    """The key sets of a release that would show the cells at `rung` only: every cell figure of that rung that
    passes k (true counts: no complementary suppression, so at least as many keys as such a release would
    show) as a key of each unit counted in it."""
    level = f"{LEAF}@{rung}"
    return (
        "SELECT m.unit, c.key, m.cell_id "
        f"FROM {_parquet(area.counts / 'membership.internal.parquet')} m "
        f"JOIN {_parquet(ladder)} r ON r.fine = m.bucket_start AND r.rung = '{rung}' "
        f"JOIN (SELECT area_id, bucket_start, area_id || '@{rung}@' || strftime(bucket_start, '{KEY_FORMAT}') AS key "
        f"FROM {_parquet(area.counts / 'margin_counts.parquet')} WHERE level = '{level}' AND n >= {int(k)}) c "
        "ON c.area_id = m.cell_id AND c.bucket_start = r.coarse"
    )


def propose_coarsening(ctx: ReleaseContext, ledger: Ledger, ladder: Path) -> list[dict]:
    """Risk-driven coarsening, proposed: for each rung of the time ladder (finest first), the gate's figures
    for a release that would show the cells at that rung instead of the policy's bucket, estimated with the
    same landscape, window and ceilings. Applying one is a policy change in review (time.bucket), never a
    run-time switch, like lowering k or raising a ceiling."""
    proposals = []
    for rung in ctx.policy.time.ladder:
        with scratch_folder(ctx.area.risk, "risk-coarser") as spill:
            path = Path(spill) / "keys.parquet"
            con = keysets.connect(spill)
            try:
                con.execute(
                    f"COPY ({coarser_keys_sql(ctx.area, ladder, rung, ctx.policy.k)}) TO '{sql_path(path)}' (FORMAT parquet)"
                )
            finally:
                con.close()
            assessment = assess_risk(ctx, ledger, path, rung=rung)
        proposals.append(
            {
                "rung": rung,
                "status": assessment.status,
                "worst_zone": assessment.worst_zone,
                "release_figure": assessment.release_figure,
                "cumulative": assessment.cumulative,
            }
        )
    return proposals


def _with_proposal(assessment: RiskAssessment, proposals: list[dict]) -> RiskAssessment:
    passing = [p for p in proposals if p["status"] != BLOCK]
    if passing:
        best = passing[0]
        note = (
            f"; coarsening proposed: cells at the ladder's {best['rung']} rung would give "
            f"{best['release_figure']:.4g} (worst zone {best['worst_zone']}), within the ceilings: set "
            f"time.bucket to {best['rung']} in a reviewed policy change"
        )
    else:
        note = "; no rung of the time ladder passes the gate either: coarser zones or a larger k are needed"
    return replace(assessment, reason=assessment.reason + note, coarsening=proposals)


def keep_released_keys(ctx: ReleaseContext, ladder: Path | None) -> KeySets | None:
    """Code this release's key sets straight from the work area and keep them as its coded key set file
    (`keysets.write_coded`), returning them; over `CODED_UP_TO` rows keep them as (unit, key, cell_id) rows
    instead (written by DuckDB, for the ranged road) and return None. At 50 M generated pings the rows took
    15-20 s to write; with the coded file the whole risk step took 12 s less (medians of 2 alternating runs)."""
    zones = lambda cells: _risk_zone_of(ctx, cells)  # noqa: E731
    source = released_key_source(ctx.area, ladder)
    sets = keysets.code_and_keep(source, zones, CODED_UP_TO, ctx.area.risk, ctx.area.unit_keys)
    if sets is None:
        write_released_keys(ctx.area, ctx.area.unit_keys, ladder)
    return sets


def run_risk(ctx: ReleaseContext, ledger: Ledger) -> RiskAssessment:
    """Keep the candidate's per-unit key sets (internal, for later releases and reviews) and assess its risk;
    when the gate blocks a policy with a time ladder, say which rung would pass (`propose_coarsening`). Under
    `protection.method: dp` the population's privacy budget gates instead (`stages.dp.privacy_assessment`)."""
    if ctx.policy.protection.method == "dp":
        ctx.area.risk.mkdir(parents=True, exist_ok=True)
        assessment = assess_risk(ctx, ledger)
        assessment.write(ctx.area.risk)
        return assessment
    _required_risk(ctx.policy)  # before anything is coded: the key sets' zones are the policy's risk zones
    ctx.area.risk.mkdir(parents=True, exist_ok=True)
    ladder = write_ladder_buckets(ctx)
    write_risk_areas(ctx)
    this_release = keep_released_keys(ctx, ladder)
    assessment = assess_risk(ctx, ledger, ctx.area.unit_keys, keys_from_area=True, this_release=this_release)
    if assessment.status == BLOCK and ladder is not None:
        assessment = _with_proposal(assessment, propose_coarsening(ctx, ledger, ladder))
    assessment.write(ctx.area.risk)
    return assessment


def read_risk(area: WorkArea) -> RiskAssessment:
    return RiskAssessment.read(area.risk)
