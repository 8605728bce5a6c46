"""The release pipeline's stages as plain functions over a work area, callable from a notebook.

Each stage reads the previous stage's files from the work area and writes its own, with a small JSON
summary, so the stages can run as separate Dagster steps (or processes) and be re-run one at a time.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from spatial_release import guarantees
from spatial_release.counting import CountResult, count_pings, data_extent, period_buckets
from spatial_release.counting.engines import Engine, open_engine
from spatial_release.counting.plan import Extent, ZoningPlan, evaluate_with, grid_plan, zones_plan
from spatial_release.errors import Blocked
from spatial_release.fileio import (
    atomic_path, folder_lock, remove_stale_temporaries, restrict_umask, sha256_file, write_json_atomic,
)
from spatial_release.geometry import Grid, coverage, make_locator
from spatial_release.geometry.locate import make_linked_locators
from spatial_release.geometry.grid import CELL_ID
from spatial_release.geometry.zeros import ZerosFileError, read_structural_zeros
from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.progress import Progress, log_progress, silent
from spatial_release.release import (
    RELEASE_FILES, build_record, publish, read_tables, recover_interrupted, release_dir, release_tables,
    write_tables,
)
from spatial_release.ledger import Ledger, check_releases, find_release
from spatial_release.risk import BLOCK, cumulative_risk, decide, estimate_risk
from spatial_release.risk.landscape import Landscape, load_landscape
from spatial_release.suppression.primary import ProtectedTable
from spatial_release.suppression.release_system import DisclosureSpec, Structure, audit_published, protect_release
from spatial_release.suppression.table import LEAF, TOTAL, grid_chain, zones_chain
from spatial_release.traces.ingest import ingest_traces, resolve_trace_paths
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings


class CandidateChanged(Blocked, RuntimeError):
    """The candidate files differ from the ones that were checked; nothing is published."""


# Relative to a work area: per-unit data, deleted when the release's retention ends.
PER_UNIT_ARTEFACTS = ("traces", "ingest/pings.parquet", "ingest/quarantine.parquet", "ingest/spill",
                      "counts/membership.internal.parquet", "counts/outside.parquet", "counts/spill",
                      "risk/unit_keys.internal.parquet", "audit_intervals.internal.parquet")


@dataclass(frozen=True)
class WorkArea:
    """Internal artefacts of one (dataset, period); never published."""

    root: Path

    def __post_init__(self) -> None:
        restrict_umask()  # whatever the caller did to the umask since import: owner-only from creation

    @classmethod
    def for_release(cls, work_root: Path, policy: Policy, period: Period) -> "WorkArea":
        return cls(work_root / policy.name / period.label)

    def per_unit_artefacts(self) -> list[Path]:
        """Every file or folder of the work area that holds per-unit data (ids, raw rows, memberships, key
        sets, pings) or the audit's per-cell intervals. Aggregates (true counts, candidate, summaries) stay
        for `spatial-release audit`."""
        return [self.root / name for name in PER_UNIT_ARTEFACTS]

    @property
    def traces(self) -> Path:
        return self.root / "traces"

    @property
    def ingest(self) -> Path:
        return self.root / "ingest"

    @property
    def counts(self) -> Path:
        return self.root / "counts"

    @property
    def candidate(self) -> Path:
        return self.root / "candidate"

    @property
    def risk(self) -> Path:
        return self.root / "risk"


@dataclass(frozen=True)
class Published:
    """Where the programme's published releases and their ledger are, for checks that look beyond the
    candidate."""

    ledger: Ledger
    releases_root: Path


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def synthetic_traces(policy: Policy, period: Period, area: WorkArea) -> list[Path]:
    """Generate the policy's synthetic traces for the period (demo policies only)."""
    spec = policy.source.synthetic
    if spec is None:
        raise ValueError(f"{policy.path}: no trace files given and the policy has no 'source.synthetic' section")
    days = (period.end - period.start).days
    config = SyntheticConfig(persons=spec.persons, seed=spec.seed, start=period.start, days=days)
    suffix = ".csv" if spec.file_format == "csv" else ".parquet"
    return [write_pings(generate_pings(config), area.traces / f"pings-{period.label}{suffix}")]


def run_ingest(policy: Policy, period: Period, area: WorkArea, traces: Sequence[str | Path] = (),
               progress: Progress = log_progress) -> dict:
    files = resolve_trace_paths(policy, traces, period) if (traces or policy.source.paths) else \
        synthetic_traces(policy, period, area)
    result = ingest_traces(policy, period, files, area.ingest, progress)
    summary = {
        "files": list(result.files),
        "input_columns": list(result.input_columns),
        "rows_read": result.rows_read,
        "pings_read": result.pings_read,
        "pings_valid": result.pings_valid,
        "pings_rejected": result.pings_rejected,
        "rejected_share": result.rejected_share,
        "rejected_by_reason": result.rejected_by_reason,
        "max_rejected_share": policy.source.max_rejected_share,
        "rejected_share_problem": result.rejected_share_problem(policy.source.max_rejected_share),
        "quarantine": str(result.quarantine_path),
        "valid_by_file": result.valid_by_file,
    }
    write_json_atomic(area.ingest / "ingest.json", summary)
    return summary


def read_ingest_summary(area: WorkArea) -> dict:
    return _read_json(area.ingest / "ingest.json")


def geometry_bounds(policy: Policy) -> coverage.Bounds:
    """Lon/lat bounds a valid ping of the policy should fall in: the zones' extent, or a grid CRS's area of
    use."""
    if policy.geometry.kind == "grid":
        return coverage.crs_area_of_use(policy.geometry.crs)
    west, south, east, north = make_locator(policy).frame.to_crs("EPSG:4326").total_bounds
    return (float(west), float(south), float(east), float(north))


def _outside_points(policy: Policy, area: WorkArea, bounds: coverage.Bounds) -> pd.DataFrame:
    """lon, lat (and file, when ingest recorded it) of the valid pings outside the geometry (internal)."""
    con = duckdb.connect()
    try:
        if policy.geometry.kind == "grid":
            west, south, east, north = bounds
            source = (f"SELECT * FROM read_parquet('{_sql_path(area.ingest / 'pings.parquet')}') WHERE NOT "
                      f"(lon BETWEEN {west} AND {east} AND lat BETWEEN {south} AND {north})")
        else:
            source = f"SELECT * FROM read_parquet('{_sql_path(area.counts / 'outside.parquet')}')"
        frame = con.execute(source).df()
    finally:
        con.close()
    return frame


def _pings_per_file(area: WorkArea) -> dict[str, int]:
    ingest = read_ingest_summary(area)
    if "valid_by_file" in ingest:
        return ingest["valid_by_file"]
    files = [Path(f).name for f in ingest["files"]]
    return {" + ".join(files): ingest["pings_valid"]}


def measure_coverage(policy: Policy, area: WorkArea) -> coverage.Coverage:
    """Valid pings outside the geometry, by input file where the ingest recorded the file of each ping."""
    bounds = geometry_bounds(policy)
    outside = _outside_points(policy, area, bounds)
    valid_by_file = _pings_per_file(area)
    if "src" in outside.columns:
        names = [Path(f).name for f in read_ingest_summary(area)["files"]]
        outside_by_file = outside["src"].map(lambda i: names[int(i)]).value_counts().to_dict()
    else:
        outside_by_file = {next(iter(valid_by_file)): len(outside)}
    by_file = {name: (int(outside_by_file.get(name, 0)), int(valid)) for name, valid in valid_by_file.items()}
    return coverage.Coverage(sum(valid_by_file.values()), len(outside), policy.source.max_outside_share,
                             coverage.diagnose(outside["lon"].to_numpy(), outside["lat"].to_numpy(), bounds),
                             by_file)


def check_outside_share(policy: Policy, area: WorkArea, published: Published | None = None
                        ) -> guarantees.CheckOutcome:
    """Blocks a release whose valid pings fall outside the geometry beyond the policy's ceiling: a month of
    swapped coordinates would otherwise go missing from the release without a word."""
    measured = measure_coverage(policy, area)
    problem = measured.problem()
    text = problem or (f"{measured.pings_outside:,} of {measured.pings_valid:,} valid pings "
                       f"({measured.share:.2%}) outside the geometry, within the limit of {measured.limit:.2%}")
    return guarantees.CheckOutcome(
        "outside_share", problem is None, text,
        figures={"outside_share": round(measured.share, 6), "limit": measured.limit,
                 "pings_outside": measured.pings_outside})


def check_rejected_share(policy: Policy, area: WorkArea, published: Published | None = None
                         ) -> guarantees.CheckOutcome:
    summary = read_ingest_summary(area)
    problem = summary["rejected_share_problem"]
    return guarantees.CheckOutcome(
        "rejected_share", problem is None,
        problem or f"{summary['pings_rejected']} of {summary['pings_read']} pings quarantined",
        figures={"rejected_share": round(summary["rejected_share"], 6), "limit": summary["max_rejected_share"],
                 "rejected_by_reason": summary["rejected_by_reason"]})


def zoning_plans(policy: Policy, engine: Engine, extent: Extent | None = None) -> list[ZoningPlan]:
    """The main geometry first, then each linked zoning, with SQL projections validated on `engine`
    (fitted to the pings' `extent` when it is given)."""
    geometry, evaluate = policy.geometry, evaluate_with(engine)
    levels = tuple(geometry.level_names())
    if geometry.kind == "grid":
        plans = [grid_plan(LEAF, Grid(geometry), levels, evaluate, extent)]
    else:
        plans = [zones_plan(LEAF, make_locator(policy), levels, TOTAL, evaluate, extent=extent)]
    for spec in geometry.linked:
        plans.append(zones_plan(spec.name, make_linked_locators(policy)[spec.name],
                                tuple(p.level for p in spec.parents), f"{spec.name}_total", evaluate, extent=extent))
    return plans


def count_validated_pings(policy: Policy, period: Period, pings: Sequence[Path], out_dir: Path, engine: Engine,
                          progress: Progress = log_progress) -> CountResult:
    """The counting step on pings from the ingest step: projections fitted to their extent, then counts."""
    plans = zoning_plans(policy, engine, data_extent(engine, pings))
    return count_pings(policy, period, pings, plans, out_dir, engine, progress)


def run_counts(policy: Policy, area: WorkArea, period: Period | None = None, engine: Engine | None = None,
               progress: Progress = log_progress) -> dict:
    """Counts the ingested pings. `period` defaults to the work area's (it is named by the period label);
    `engine` defaults to DuckDB with its spill files in the work area."""
    period = period or Period.parse(area.root.name)
    with ExitStack() as stack:
        if engine is None:
            engine = stack.enter_context(open_engine("duckdb", scratch=area.counts / "spill"))
        result = count_validated_pings(policy, period, [area.ingest / "pings.parquet"], area.counts, engine, progress)
        settings = engine.describe()
    summary = {
        "engine": engine.name,
        "engine_settings": settings,
        "pings_located": result.pings_located,
        "pings_outside_geometry": result.pings_outside,
        "outside_file": str(result.outside_path),
        "groups": result.groups,
        "units": result.units,
        "unit_buckets": result.unit_buckets,
        "linked_covers_main": result.linked_covers_main,
        "unsure_coordinates": result.unsure_coordinates,
        "assignment": result.methods,
        "seconds": result.seconds,
    }
    write_json_atomic(area.counts / "counts.json", summary)
    return summary


def withheld_by_level(protected: ProtectedTable, true_margins: pd.DataFrame) -> dict:
    """Primaries, secondaries and withheld units per level (cells and every margin level)."""
    out = {}
    frames = [protected.withheld_cells.assign(level=LEAF), protected.withheld_margins]
    withheld = pd.concat(frames, ignore_index=True)
    for level, group in withheld.groupby("level"):
        out[level] = {"primary": int((group["reason"] == "primary").sum()),
                      "secondary": int((group["reason"] == "secondary").sum()),
                      "units_withheld": int(group["n"].sum())}
    return out


def read_true_counts(area: WorkArea) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (pd.read_parquet(area.counts / "cell_counts.parquet"),
            pd.read_parquet(area.counts / "margin_counts.parquet"))


def structural_zeros(policy: Policy) -> frozenset[str]:
    """The policy's structural-zero cells, each checked to be a cell of the main geometry."""
    if not policy.suppression.zeros:
        return frozenset()
    path = policy.resolve(policy.suppression.zeros)
    zeros = read_structural_zeros(path)
    geometry = policy.geometry
    if geometry.kind == "grid":
        unknown = sorted(z for z in zeros if not z.startswith(f"{geometry.size_m}mE") or not CELL_ID.match(z))
    else:
        unknown = sorted(zeros - set(make_locator(policy).parent_table()["cell_id"]))
    if unknown:
        raise ZerosFileError(f"{path}: {len(unknown)} listed cell(s) are not cells of the policy's geometry, "
                             f"e.g. {unknown[:3]}")
    return zeros


def release_structure(policy: Policy, area: WorkArea) -> Structure:
    """The structure an outsider knows: every zoning's hierarchy (from the full zone lists, not only the
    observed zones) and, where a linked zoning covers every counted ping, the identity of its bucket total
    with the main total."""
    covers = _read_json(area.counts / "counts.json")["linked_covers_main"]
    geometry = policy.geometry
    if geometry.kind == "grid":
        chains = [grid_chain(geometry.size_m, geometry.parents_m, geometry.level_names())]
    else:
        chains = [zones_chain(LEAF, make_locator(policy).parent_table(), geometry.level_names())]
    identities = []
    for spec, layer in zip(geometry.linked, make_linked_locators(policy).values()):
        chains.append(zones_chain(spec.name, layer.parent_table(), [p.level for p in spec.parents],
                                  f"{spec.name}_total"))
        if covers[spec.name]:
            identities.append((TOTAL, f"{spec.name}_total"))
    return Structure(tuple(chains), tuple(identities))


def run_protect(policy: Policy, period: Period, area: WorkArea, progress: Progress = log_progress) -> dict:
    true_cells, true_margins = read_true_counts(area)
    spec = DisclosureSpec(release_structure(policy, area), policy.k, policy.measure, structural_zeros(policy),
                          tuple(period_buckets(policy, period)), policy.count_column)
    protected, log, _ = protect_release(true_cells, true_margins, spec, progress=progress)
    tables = release_tables(protected, make_locator(policy), policy.count_column)
    write_tables(tables, area.candidate)
    protected.withheld_cells.to_parquet(area.candidate / "withheld_cells.internal.parquet", index=False)
    summary = protected.summary(true_cells)
    summary["by_level"] = withheld_by_level(protected, true_margins)
    summary["suppression"] = {"sweep_secondaries": log.sweep_secondaries,
                              "repair_secondaries": log.repair_secondaries, "repair_rounds": log.rounds,
                              "audit": log.audit.summary()}
    summary["crs"] = tables.cells.crs.to_string()
    manifest = {"summary": summary, "sha256": {n: sha256_file(area.candidate / n) for n in RELEASE_FILES}}
    write_json_atomic(area.candidate / "manifest.json", manifest)
    return summary


def read_manifest(area: WorkArea) -> dict:
    return _read_json(area.candidate / "manifest.json")


class ReleaseTampered(Blocked, RuntimeError):
    """A release file does not match the hash its release.json records."""


def verify_release_files(folder: Path) -> dict:
    record = _read_json(folder / "release.json")
    for name, digest in record["files"].items():
        if sha256_file(folder / name) != digest:
            raise ReleaseTampered(f"{folder / name}: sha256 differs from release.json; the file was altered")
    return record


def _verify_candidate(area: WorkArea) -> None:
    expected = read_manifest(area)["sha256"]
    for name, digest in expected.items():
        if sha256_file(area.candidate / name) != digest:
            raise CandidateChanged(f"{area.candidate / name} changed after it was written; re-run the release")


def _release_frames(area: WorkArea) -> tuple[pd.DataFrame, pd.DataFrame]:
    _verify_candidate(area)
    tables = read_tables(area.candidate)
    return tables.cells, tables.margins


def check_k_floor(policy: Policy, area: WorkArea, published: Published | None = None) -> guarantees.CheckOutcome:
    cells, margins = _release_frames(area)
    true_cells, true_margins = read_true_counts(area)
    return guarantees.check_k_floor(cells, margins, true_cells, true_margins, policy.k,
                                    structural_zeros(policy), policy.count_column)


def check_structural_zeros(policy: Policy, area: WorkArea, published: Published | None = None
                           ) -> guarantees.CheckOutcome:
    true_cells, _ = read_true_counts(area)
    return guarantees.check_structural_zeros(true_cells, structural_zeros(policy))


def check_withheld_absent(policy: Policy, area: WorkArea, published: Published | None = None) -> guarantees.CheckOutcome:
    cells, margins = _release_frames(area)
    true_cells, true_margins = read_true_counts(area)
    return guarantees.check_withheld_absent(cells, margins, true_cells, true_margins, policy.k,
                                            structural_zeros(policy), policy.count_column)


def distinct_units(pings: Path) -> list[str]:
    """Every unit id as text, read by DuckDB so that hundreds of millions of pings never sit in pandas."""
    con = duckdb.connect()
    try:
        rows = con.execute(f"SELECT DISTINCT CAST(unit AS VARCHAR) FROM read_parquet('{_sql_path(pings)}')").fetchall()
    finally:
        con.close()
    return [r[0] for r in rows]


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def check_no_identifiers(policy: Policy, area: WorkArea, published: Published | None = None) -> guarantees.CheckOutcome:
    cells, margins = _release_frames(area)
    units = distinct_units(area.ingest / "pings.parquet")
    record_keys = _record_keys(_draft_record(policy, area))
    return guarantees.check_no_identifiers(
        {"cells.parquet": cells, "margins.parquet": margins}, record_keys,
        policy.source.protected_columns(), read_ingest_summary(area)["input_columns"], units, policy.count_column)


def related_releases(policy: Policy, period: Period, published: Published) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """Published (cells, margins) of the datasets in `suppression.audit_with` whose periods overlap this one."""
    frames = []
    for dataset in policy.suppression.audit_with:
        for entry in published.ledger.releases(dataset):
            other = Period.parse(entry["period"])
            if other.start < period.end and period.start < other.end:
                folder = published.releases_root / dataset / entry["period"]
                verify_release_files(folder)
                tables = read_tables(folder)
                count_column = next(c for c in tables.margins.columns if c.startswith("n_"))
                if count_column != policy.count_column:
                    raise ValueError(f"{folder}: counts {count_column}, this policy counts {policy.count_column}")
                frames.append((tables.cells, tables.margins))
    return frames


def check_suppression_audit(policy: Policy, area: WorkArea, options: dict | None = None,
                            earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]] = (),
                            release: Path | None = None, published: Published | None = None,
                            progress: Progress = silent) -> guarantees.CheckOutcome:
    """The attacker LP over the candidate files (or a published release folder): withheld figures are
    those absent from the files, and from the overlapping releases of the datasets in
    `suppression.audit_with` when `published` says where they are. Writes the per-primary intervals to
    the work area (internal only)."""
    if policy.suppression.audit_with:
        if published is None:
            raise ValueError(f"{policy.path}: suppression.audit_with needs the published releases and ledger")
        earlier = [*earlier, *related_releases(policy, Period.parse(area.root.name), published)]
    if release is None:
        cells, margins = _release_frames(area)
    else:
        verify_release_files(release)
        tables = read_tables(release)
        cells, margins = tables.cells, tables.margins
    true_cells, true_margins = read_true_counts(area)
    period = Period.parse(area.root.name)
    spec = DisclosureSpec(release_structure(policy, area), policy.k, policy.measure, structural_zeros(policy),
                          tuple(period_buckets(policy, period)), policy.count_column, solver_options=options or {})
    result, table = audit_published(true_cells, true_margins, cells, margins, spec, earlier, progress)
    intervals = pd.DataFrame([{**table.key(i.node), "value": i.value, "attacker_lo": i.lo, "attacker_up": i.up,
                               "passed": i.passed, "integer_solve": i.exact_integer} for i in result.intervals])
    with atomic_path(area.root / "audit_intervals.internal.parquet") as tmp:
        intervals.to_parquet(tmp, index=False)
    # Offending rows name the cell and what fails; the true value and the attacker's interval are
    # per-unit facts that stay in the internal intervals file (never in a log or Dagster metadata).
    offending = [{**table.key(i.node), "failing": i.failing} for i in result.failures()[:20]]
    offending += [{"error": e} for e in result.errors[:20]]
    summary = result.summary()
    write_json_atomic(area.root / "audit.internal.json", summary)
    text = ("every withheld primary is protected" if result.passed else
            f"{summary['failures']} primaries recoverable or shown below k, {len(result.errors)} audit errors; "
            f"first: {offending[0] if offending else None}; intervals in {area.root / 'audit_intervals.internal.parquet'}")
    return guarantees.CheckOutcome("suppression_audit", result.passed, text, offending, public_audit(summary))


def public_audit(summary: dict) -> dict:
    """The audit figures that may be published: the verdict and how it was reached. Counts of primaries,
    components and the smallest margin are facts about withheld figures, kept in audit.internal.json."""
    return {k: summary[k] for k in ("passed", "criterion", "solver")}


def check_suppression_budget(policy: Policy, area: WorkArea, published: Published | None = None) -> guarantees.CheckOutcome:
    """Re-derives the withheld share from the true counts and the published keys."""
    cells, _ = _release_frames(area)
    true_cells, _ = read_true_counts(area)
    published = pd.MultiIndex.from_frame(cells[["cell_id", "bucket_start"]])
    withheld = ~pd.MultiIndex.from_frame(true_cells[["cell_id", "bucket_start"]]).isin(published)
    outcome = guarantees.check_suppression_budget(int(true_cells.loc[withheld, "n"].sum()),
                                                  int(true_cells["n"].sum()), policy.suppression.budget)
    if not outcome.passed:
        return outcome  # nothing is published, so the figures may explain the block
    # With the published cells, the withheld share would give the withheld total: keep it internal.
    return guarantees.CheckOutcome(outcome.name, True,
                                   f"the unit counts in withheld cells are within the budget of "
                                   f"{policy.suppression.budget:.0%} (figures in the work area)",
                                   figures={"budget": policy.suppression.budget})


def _record_keys(record: object) -> set[str]:
    if isinstance(record, dict):
        return set(record) | {k for v in record.values() for k in _record_keys(v)}
    if isinstance(record, list):
        return {k for v in record for k in _record_keys(v)}
    return set()


def _draft_record(policy: Policy, area: WorkArea, period: Period | None = None,
                  checks: dict[str, str] | None = None, audit: dict | None = None, risk: dict | None = None) -> dict:
    manifest = read_manifest(area)
    ingest = read_ingest_summary(area)
    counts = _read_json(area.counts / "counts.json")
    inputs = {
        "files": [Path(f).name for f in ingest["files"]],
        "rows_read": ingest["rows_read"],
        "pings_read": ingest["pings_read"],
        "pings_rejected": ingest["pings_rejected"],
        "rejected_by_reason": ingest["rejected_by_reason"],
        "pings_outside_geometry": counts["pings_outside_geometry"],
    }
    label = period or Period.parse(area.root.name)
    return build_record(policy, label, public_counts(manifest["summary"]), inputs, manifest["sha256"],
                        manifest["summary"]["crs"], checks or {}, audit, risk)


# Figures of the protection summary that the published tables themselves show. Every other figure
# (groups, primaries, secondaries, withheld units and their share, the smallest count before suppression,
# withheld margins, units counted) is a fact about withheld cells that the attacker-LP audit never saw, so
# it stays in the internal manifest (work area) and never reaches release.json or Dagster metadata.
PUBLIC_COUNTS = ("published_cells", "published_margins", "smallest_published_count",
                 "structural_zero_cells_published")


def public_counts(summary: dict) -> dict:
    return {k: summary[k] for k in PUBLIC_COUNTS}


class GuaranteeFailed(Blocked, RuntimeError):
    def __init__(self, outcome: guarantees.CheckOutcome):
        super().__init__(f"{outcome.name} failed: {outcome.summary}")
        self.outcome = outcome


GUARANTEES = (check_k_floor, check_structural_zeros, check_withheld_absent, check_no_identifiers,
              check_suppression_audit, check_suppression_budget)


# The input checks block before counting and protection in the asset graph; publication re-evaluates them.
INPUT_CHECKS = (check_rejected_share, check_outside_share)


def run_guarantees(policy: Policy, area: WorkArea, published: Published | None = None
                   ) -> list[guarantees.CheckOutcome]:
    """Every input check and publication guarantee; `published` (ignored by the checks that look only at
    the candidate) lets the audit see related datasets' releases."""
    return [check(policy, area, published=published) for check in (*INPUT_CHECKS, *GUARANTEES)]


def _released_keys(area: WorkArea) -> pd.DataFrame:
    """unit, key for every published (cell, bucket) each unit was counted in (set semantics)."""
    membership = pd.read_parquet(area.counts / "membership.internal.parquet")
    cells = pd.read_parquet(area.candidate / "cells.parquet", columns=["cell_id", "bucket_start"])
    keys = membership.merge(cells, on=["cell_id", "bucket_start"])
    keys["key"] = keys["cell_id"] + "@" + keys["bucket_start"].dt.strftime("%Y-%m-%dT%H:%MZ")
    return keys[["unit", "key", "cell_id"]].drop_duplicates(["unit", "key"])


def _risk_zone_of(policy: Policy, cells: pd.Series) -> pd.Series:
    level = policy.risk.zones
    if level == "cell":
        return pd.Series(cells.to_numpy(), index=cells.to_numpy())
    hierarchy = make_locator(policy).hierarchy(cells.drop_duplicates())
    mapping = dict(zip(hierarchy["cell_id"], hierarchy[level]))
    return pd.Series([mapping[c] for c in cells], index=cells.to_numpy())


def zone_population(policy: Policy, landscape: Landscape, landscape_path: Path) -> dict[str, float] | None:
    """Public population per risk zone: each population polygon counts in the zone holding its
    representative point (zones geometry only; a grid has no polygons to join)."""
    if landscape.population is None:
        return None
    if landscape.population.table:
        table = pd.read_csv((landscape_path.parent / landscape.population.table).resolve(), dtype={"zone": str})
        return dict(zip(table["zone"], table["population"].astype(float)))
    if policy.geometry.kind != "zones":
        return None
    import geopandas as gpd

    source = gpd.read_file((landscape_path.parent / landscape.population.path).resolve())
    layer = make_locator(policy)
    zones = layer.frame[[policy.geometry.id, "geometry"]].rename(columns={policy.geometry.id: "cell_id"})
    if policy.risk.zones != "cell":
        parents = layer.parent_table()[["cell_id", policy.risk.zones]]
        zones = zones.merge(parents, on="cell_id").dissolve(by=policy.risk.zones).reset_index()
        zones = zones.rename(columns={policy.risk.zones: "zone"})
    else:
        zones = zones.rename(columns={"cell_id": "zone"})
    points = source.set_geometry(source.representative_point()).to_crs(zones.crs)
    joined = gpd.sjoin(points[[landscape.population.value, "geometry"]], zones[["zone", "geometry"]],
                       predicate="within")
    return joined.groupby("zone")[landscape.population.value].sum().astype(float).to_dict()


def population_of(entry: dict) -> str:
    return entry.get("population") or entry["dataset"]


def population_releases(policy: Policy, ledger: Ledger) -> list[dict]:
    """Every release, of any programme, drawn on the policy's population (ledger order), from a ledger read
    under its lock and cross-checked with releases/ (a deleted or truncated ledger must not reset the
    cumulative risk)."""
    return [e for e in ledger.checked_releases() if population_of(e) == policy.population_key]


def earlier_releases(policy: Policy, period: Period, ledger: Ledger) -> list[dict]:
    """The earlier releases in the risk window: this dataset's and those of every programme that shares its
    population (a quarterly and a monthly programme over the same bikes spend one budget)."""
    entries = [e for e in population_releases(policy, ledger)
               if not (e["dataset"] == policy.name and e["period"] == period.label)]
    window = policy.risk.window if policy.risk else None
    return entries[-window:] if window else entries


def key_set_path(work_root: Path, policy: Policy, period_label: str) -> Path:
    return work_root / policy.name / period_label / "risk" / "unit_keys.internal.parquet"


def _expired(policy: Policy, entry: dict, now: datetime) -> bool:
    recorded = datetime.fromisoformat(entry["recorded_at"])
    return now - recorded > timedelta(days=policy.risk.key_retention_days)


def _remove(path: Path) -> bool:
    if path.is_dir():
        shutil.rmtree(path)
        return True
    if path.exists():
        path.unlink()
        return True
    return False


def prune_per_unit_artefacts(policy: Policy, ledger: Ledger, work_root: Path, now: datetime | None = None
                             ) -> list[str]:
    """Delete every per-unit artefact (WorkArea.per_unit_artefacts) of the releases older than the policy's
    `risk.key_retention_days`; returns their periods. Such releases keep counting in the cumulative figure
    (from the ledger) but no longer in the per-unit window of later estimates."""
    now = now or datetime.now(timezone.utc)
    pruned = []
    for entry in ledger.releases(policy.name):
        if not _expired(policy, entry, now):
            continue
        area = WorkArea.for_release(work_root, policy, Period.parse(entry["period"]))
        removed = [_remove(path) for path in area.per_unit_artefacts()]
        if any(removed):
            pruned.append(entry["period"])
    return pruned


def _earlier_keys(work_root: Path, policy: Policy, entries: list[dict]) -> list[pd.DataFrame]:
    """Per-unit key sets of this dataset's earlier releases. Releases of other programmes of the same
    population count through their published figures in the cumulative risk; their key sets are not merged,
    because their keys are cells of another geometry and buckets that the risk zones here do not map."""
    frames = []
    now = datetime.now(timezone.utc)
    for entry in (e for e in entries if e["dataset"] == policy.name):
        path = key_set_path(work_root, policy, entry["period"])
        if path.exists():
            frames.append(pd.read_parquet(path))
        elif not _expired(policy, entry, now):
            raise FileNotFoundError(f"the per-unit key sets of release {entry['period']} ({path}) are missing "
                                    "within their retention: the risk over the window cannot be estimated")
    return frames


def assess_risk(policy: Policy, period: Period, area: WorkArea, ledger: Ledger,
                unit_keys: pd.DataFrame | None = None, earlier: list[dict] | None = None) -> dict:
    """Per-zone risk of this release plus the earlier ones in the window, and the gate's decision."""
    if policy.risk is None:
        raise ValueError(f"{policy.path}: no 'risk' section: a release without a risk estimate is blocked")
    landscape_path = policy.resolve(policy.risk.landscape)
    landscape, landscape_sha = load_landscape(landscape_path)
    keys = _released_keys(area) if unit_keys is None else unit_keys
    earlier = earlier_releases(policy, period, ledger) if earlier is None else earlier
    window = pd.concat([keys, *_earlier_keys(area.root.parents[1], policy, earlier)], ignore_index=True)
    zone_of_key = pd.Series(_risk_zone_of(policy, window["cell_id"]).to_numpy(), index=window["key"].to_numpy())
    zone_of_key = zone_of_key[~zone_of_key.index.duplicated()]
    report = estimate_risk(window[["unit", "key"]], zone_of_key, landscape.params(),
                           zone_population(policy, landscape, landscape_path))
    # The gated figure follows the landscape's adversary (itself fixed by who is in the panel); every
    # figure of the report is labelled with the adversary it belongs to.
    field = "journalist" if landscape.adversary == "journalist" else "mean"
    worst = report.worst_zone(field) if len(window) else None
    scored = [z for z in report.zones if getattr(z, field) is not None]
    pooled = (sum(z.units * getattr(z, field) for z in scored) / sum(z.units for z in scored)) if scored else None
    figure = getattr(worst, field) if worst else None
    previous = [e["risk"]["release_figure"] for e in earlier]
    decision = decide(figure, worst.zone if worst else None, previous, policy.risk.per_release_ceiling,
                      policy.risk.cumulative_ceiling, policy.risk.warn_at)
    return {
        "status": decision.status, "reason": f"{landscape.adversary} adversary: {decision.reason}",
        "worst_zone": decision.worst_zone, "release_figure": figure, "pooled": pooled,
        "cumulative": decision.cumulative, "headroom": decision.headroom, "previous": previous,
        "measure": f"{landscape.adversary}_mean", "adversary": landscape.adversary, "panel": landscape.panel,
        "landscape_sha256": landscape_sha, "landscape_version": landscape.version,
        "points": landscape.points, "units": report.units, "keys": report.keys,
        "window_periods": [e["period"] for e in earlier] + [period.label],
        "zones": labelled_zones(report.frame()), "seconds": round(report.seconds, 2),
    }


# Column names that say which adversary each per-zone figure belongs to.
ZONE_LABELS = {"mean": "prosecutor_mean", "at_risk": "prosecutor_at_risk", "worst": "prosecutor_worst",
               "journalist": "journalist_mean"}


def labelled_zones(frame: pd.DataFrame) -> list[dict]:
    return frame.rename(columns=ZONE_LABELS).to_dict("records")


def run_risk(policy: Policy, period: Period, area: WorkArea, ledger: Ledger) -> dict:
    keys = _released_keys(area)
    area.risk.mkdir(parents=True, exist_ok=True)
    with atomic_path(area.risk / "unit_keys.internal.parquet") as tmp:
        keys.to_parquet(tmp, index=False)
    assessment = assess_risk(policy, period, area, ledger, keys)
    write_json_atomic(area.risk / "risk.json", assessment)
    return assessment


def read_risk(area: WorkArea) -> dict:
    return _read_json(area.risk / "risk.json")


def check_risk_budget(policy: Policy, area: WorkArea) -> guarantees.CheckOutcome:
    risk = read_risk(area)
    offending = [z for z in risk["zones"] if z["zone"] == risk["worst_zone"]]
    return guarantees.CheckOutcome("risk_budget", risk["status"] != BLOCK, risk["reason"], offending,
                                   {k: risk[k] for k in ("status", "worst_zone", "release_figure", "pooled",
                                                         "cumulative", "headroom", "measure", "adversary")})


class AlreadyPublished(Blocked, FileExistsError):
    """The (dataset, period) is published: its release folder and its work area are never overwritten."""


class WorkAreaBusy(Blocked, RuntimeError):
    """Another run of the same (dataset, period) owns the work area."""


def refuse_if_published(policy: Policy, period: Period, ledger: Ledger, releases_root: Path) -> None:
    """Raise AlreadyPublished when the ledger records the (dataset, period) or its release folder exists.
    Under the ledger lock, an interrupted publication is finished first (so its re-run is refused, not
    left half done)."""
    target = release_dir(releases_root, policy, period)
    with ledger.locked():
        entries = ledger.read()
        recover_interrupted(releases_root, entries)
        entry = find_release(entries, policy.name, period.label)
    if entry is not None or target.exists():
        recorded = f"ledger entry {entry['seq']}" if entry else "a folder the ledger does not record"
        raise AlreadyPublished(f"{policy.name} {period.label} is already published: {target} ({recorded}). "
                               "A published release, and the work area its audit reads, are never overwritten")


def work_lock_path(area: WorkArea) -> Path:
    return area.root.parent / f".{area.root.name}.lock"


@contextmanager
def work_area_step(policy: Policy, period: Period, area: WorkArea, published: Published | None,
                   run_id: str | None, starts_run: bool,
                   run_is_live: Callable[[str], bool | None] = lambda run_id: None) -> Iterator[None]:
    """Hold the work area of one (dataset, period) for one step of a run that writes it.

    Design: Dagster may run each step in its own process, so no lock can span a run. Each step that writes
    the work area instead holds an exclusive flock on `<work>/<dataset>/.<period>.lock` for its whole
    duration, and the lock file names the run that owns the area: the run's first step (ingest) claims
    it, and a later step of another run is refused (WorkAreaBusy), so two runs of one period can never
    mix their files. A later run takes over a claim whose run is not known to be live; a new run is
    refused only when the owner is known to be live (`run_is_live`, from the Dagster instance; an
    ephemeral instance cannot know, so a crashed run never blocks the period for good). With `published`,
    each step first refuses a (dataset, period) the ledger records (AlreadyPublished), so a re-run never
    replaces the counts, key sets or candidate of a published release. Under the lock, temporaries a killed
    step left in the step folders are removed (the root holds the checks' files, written without this lock).
    """
    with folder_lock(work_lock_path(area)) as handle:
        if published is not None:
            refuse_if_published(policy, period, published.ledger, published.releases_root)
        handle.seek(0)
        owner = handle.read().strip()
        if run_id is not None and owner != run_id:
            live = run_is_live(owner) if owner else False
            if (live is True) or (not starts_run and owner and live is not False):
                raise WorkAreaBusy(f"the work area {area.root} belongs to run {owner} of {policy.name} "
                                   f"{period.label}{' (still running)' if live else ''}; this run ({run_id}) "
                                   "stops so the two never mix their files: re-run the whole job once it ends")
            handle.seek(0)
            handle.truncate()
            handle.write(run_id + "\n")
            handle.flush()
        for folder in (area.traces, area.ingest, area.counts, area.candidate, area.risk):
            remove_stale_temporaries(folder, recursive=True)
        yield


def run_publish(policy: Policy, period: Period, area: WorkArea, releases_root: Path,
                ledger: Ledger) -> tuple[Path, dict]:
    """Publish the candidate with its ledger entry. The guarantees and the risk gate are evaluated again
    here, so a release can never be written by a run that skipped the blocking checks (Dagster blocks
    only within one run).

    One ledger lock spans the "already published?" test, the cross-check of releases/ with the ledger,
    the guarantees (the audit reads related datasets' releases from the ledger), the risk assessment that
    reads the earlier releases, and the append: two releases at once are serialised, and the second one's
    cumulative risk includes the first. Interrupted publications are rolled forward or back first."""
    ledger = ledger.with_releases(releases_root)
    target = release_dir(releases_root, policy, period)
    with ledger.locked():
        entries = ledger.read()
        finished = recover_interrupted(releases_root, entries)
        if find_release(entries, policy.name, period.label) is not None:
            if target in finished:  # a crash after the ledger append, before the rename: now finished
                return target, _read_json(target / "release.json")
            raise AlreadyPublished(f"the ledger already records {policy.name} {period.label} ({target}); "
                                   "releases are immutable")
        check_releases(entries, releases_root)
        outcomes = run_guarantees(policy, area, Published(ledger, releases_root))
        for outcome in outcomes:
            if not outcome.passed:
                raise GuaranteeFailed(outcome)
        risk = assess_risk(policy, period, area, ledger)
        if risk["status"] == BLOCK:
            raise GuaranteeFailed(guarantees.CheckOutcome("risk_budget", False, risk["reason"]))
        audit = next(o.figures for o in outcomes if o.name == "suppression_audit")
        risk_record = {k: risk[k] for k in ("status", "reason", "worst_zone", "release_figure", "pooled",
                                            "cumulative", "headroom", "measure", "adversary", "landscape_sha256", "points",
                                            "window_periods")}
        record = _draft_record(policy, area, period, {o.name: "passed" for o in outcomes}, audit, risk_record)

        def register(full_record: dict) -> str:
            entry = ledger.append({
                "kind": "release", "dataset": policy.name, "period": period.label,
                "policy": {"name": policy.name, "version": policy.version, "sha256": policy.sha256},
                "files": full_record["files"], "risk": risk_record, "population": policy.population_key,
            })
            return entry["hash"]

        publish(area.candidate, target, record, register)
    return target, _read_json(target / "release.json")


def review_programme(policy: Policy, ledger: Ledger, work_root: Path) -> dict:
    """Re-assess every published release of the dataset, in ledger order, under the current landscape.

    Release i is assessed with its own key sets and those of the releases before it in the window, as
    when it was published; the cumulative figure is recomputed from the new figures. A release now over the
    per-release ceiling, or that pushes the cumulative figure over the programme ceiling, is a breach."""
    releases = population_releases(policy, ledger)
    reviewed, figures, breaches = [], [], []
    for i, entry in enumerate(releases):
        if entry["dataset"] != policy.name:
            # another programme over the same units: its published figure spends this budget too
            figures.append(entry["risk"]["release_figure"])
            reviewed.append({"dataset": entry["dataset"], "period": entry["period"], "ledger_seq": entry["seq"],
                             "re_assessed": False, "release_figure": entry["risk"]["release_figure"],
                             "cumulative": cumulative_risk(figures)})
            continue
        period = Period.parse(entry["period"])
        area = WorkArea.for_release(work_root, policy, period)
        keys_path = area.risk / "unit_keys.internal.parquet"
        if not keys_path.exists():
            if not _expired(policy, entry, datetime.now(timezone.utc)):
                raise FileNotFoundError(f"{keys_path}: key sets of {entry['period']} are missing within their "
                                        "retention; cannot review it")
            # past retention: the published figure stands, it can no longer be re-assessed
            figures.append(entry["risk"]["release_figure"])
            reviewed.append({"dataset": policy.name, "period": entry["period"], "ledger_seq": entry["seq"],
                             "re_assessed": False, "release_figure": entry["risk"]["release_figure"],
                             "cumulative": cumulative_risk(figures)})
            continue
        window = releases[:i][-policy.risk.window:] if policy.risk.window else releases[:i]
        risk = assess_risk(policy, period, area, ledger, pd.read_parquet(keys_path), window)
        figure = risk["release_figure"]
        figures.append(figure if figure is not None else float("nan"))
        cumulative = cumulative_risk(figures)
        row = {"dataset": policy.name, "period": entry["period"], "ledger_seq": entry["seq"],
               "re_assessed": True, "worst_zone": risk["worst_zone"],
               "release_figure": figure, "published_figure": entry["risk"]["release_figure"],
               "cumulative": cumulative, "pooled": risk["pooled"]}
        reviewed.append(row)
        if figure is None or figure > policy.risk.per_release_ceiling or cumulative > policy.risk.cumulative_ceiling:
            breaches.append({**row, "per_release_ceiling": policy.risk.per_release_ceiling,
                             "cumulative_ceiling": policy.risk.cumulative_ceiling,
                             "zone_figures": [z for z in risk["zones"] if z["zone"] == risk["worst_zone"]]})
    landscape_sha = load_landscape(policy.resolve(policy.risk.landscape))[1]
    return {"dataset": policy.name, "landscape_sha256": landscape_sha, "releases": reviewed,
            "cumulative": cumulative_risk(figures) if figures else 0.0, "breaches": breaches}
