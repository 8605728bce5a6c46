"""What every stage of one release works on: the policy, the period, the work area and what follows from
them (the zone layers, the validated structural zeros, the period's buckets, the release structure),
loaded once and handed to each stage instead of being re-derived from folder names or re-read per call.

A Dagster run may execute each step in its own process, so each step builds its own context; within a step
(and within the whole publication) every input is loaded at most once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import pandas as pd

from spatial_release.counting import period_buckets
from spatial_release.counting.buckets import cut_buckets, rung_parents
from spatial_release.fileio import restrict_umask
from spatial_release.geometry import Locator, ZoneLayer, make_locator
from spatial_release.geometry.grid import CELL_ID
from spatial_release.geometry.locate import make_linked_locators
from spatial_release.ledger import Ledger
from spatial_release.levels import LEAF, TOTAL, at_rung, linked_total
from spatial_release.period import Period
from spatial_release.policy import Policy, RiskSpec
from spatial_release.policy.zeros import ZerosFileError, read_structural_zeros
from spatial_release.risk.landscape import Landscape, read_population_table
from spatial_release.stages import reuse
from spatial_release.stages.results import CountsSummary, IngestSummary
from spatial_release.suppression.ladder import time_links
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.release_system import DisclosureSpec, Structure
from spatial_release.suppression.table import Chain, grid_chain, zones_chain

T = TypeVar("T")

LADDER_BUCKETS = "ladder_buckets.parquet"  # counts/: (rung, fine, coarse) bucket starts of a time ladder

# Relative to a work area: per-unit data, deleted when the release's retention ends.
PER_UNIT_ARTEFACTS = (
    "traces",
    "ingest/pings.parquet",
    "ingest/quarantine.parquet",
    "ingest/spill",
    "counts/membership.internal.parquet",
    "counts/outside.parquet",
    "counts/spill",
    "counts/linked_membership.internal.parquet",
    "counts/risk_areas.parquet",
    "risk/unit_keys.internal.parquet",
    "audit_intervals.internal.parquet",
    "audit_certificate",
    # aggregates, but keyed by digests of the per-unit data: deleted with it
    "memo.internal.json",
    ".memo.internal.json.lock",  # empty, but named for the memo
)


def risk_spec(policy: Policy) -> RiskSpec:
    """The policy's `risk` section, for the steps that run only with one (`assess_risk` refuses a release
    without it)."""
    if policy.risk is None:
        raise ValueError(f"{policy.path}: no 'risk' section")
    return policy.risk


@dataclass(frozen=True)
class WorkArea:
    """Internal artefacts of one (dataset, period); never published."""

    root: Path

    def __post_init__(self) -> None:
        restrict_umask()  # whatever the caller did to the umask since import: owner-only from creation

    @classmethod
    def for_release(cls, work_root: Path, policy: Policy, period: Period) -> WorkArea:
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

    @property
    def unit_keys(self) -> Path:
        """The release's per-unit key sets (internal): read by later releases' risk and by reviews."""
        return self.risk / "unit_keys.internal.parquet"

    @property
    def lock(self) -> Path:
        return self.root.parent / f".{self.root.name}.lock"


@dataclass(frozen=True)
class Published:
    """Where the programme's published releases and their ledger are, for checks that look beyond the
    candidate."""

    ledger: Ledger
    releases_root: Path


def _is_grid_cell(cell_id: str, size_m: int) -> bool:
    """`cell_id` names a cell of the grid exactly as the counting names it: a leading zero or an off-grid
    corner would be published as a false 0 beside the real cell."""
    match = CELL_ID.match(cell_id)
    if match is None:
        return False
    size, east, north = (int(g) for g in match.groups())
    return size == size_m and east % size_m == 0 and north % size_m == 0 and cell_id == f"{size_m}mE{east}N{north}"


def structural_zeros(policy: Policy, locator: Locator | None = None) -> frozenset[str]:
    """The policy's structural-zero cells, each checked to be a cell of the main geometry (`locator`, the
    main geometry's layer, is loaded when not given)."""
    if not policy.suppression.zeros:
        return frozenset()
    path = policy.resolve(policy.suppression.zeros)
    zeros = read_structural_zeros(path)
    geometry = policy.geometry
    if geometry.kind == "grid":
        unknown = sorted(z for z in zeros if not _is_grid_cell(z, geometry.size_m))
    else:
        layer = locator if locator is not None else make_locator(policy)
        if not isinstance(layer, ZoneLayer):
            raise TypeError(f"a zones policy's main geometry is a ZoneLayer, not {type(layer).__name__}")
        unknown = sorted(zeros - set(layer.parent_table()["cell_id"]))
    if unknown:
        raise ZerosFileError(
            f"{path}: {len(unknown)} listed cell(s) are not cells of the policy's geometry, e.g. {unknown[:3]}"
        )
    return zeros


class ZoneLayers:
    """The policy's main geometry and its linked zonings as locators, each read from its file on first use."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._main: Locator | None = None
        self._linked: dict[str, ZoneLayer] | None = None

    @property
    def main(self) -> Locator:
        if self._main is None:
            self._main = make_locator(self.policy)
        return self._main

    @property
    def main_zones(self) -> ZoneLayer:
        """The main geometry as polygon zones (its frame, its parent table): a zones policy's only."""
        main = self.main
        if not isinstance(main, ZoneLayer):
            raise TypeError(f"the main geometry of policy {self.policy.name!r} is a {self.policy.geometry.kind}, not zones")
        return main

    @property
    def linked(self) -> dict[str, ZoneLayer]:
        """One zone layer per linked zoning, by name, in the policy's order."""
        if self._linked is None:
            self._linked = make_linked_locators(self.policy)
        return self._linked


def release_structure(
    policy: Policy, layers: ZoneLayers, linked_covers_main: dict[str, bool], period: Period | None = None
) -> Structure:
    """The structure an outsider knows: every zoning's hierarchy (from the full zone lists, not only the
    observed zones), where a linked zoning covers every counted ping the identity of its bucket total with
    the main total, and for a time ladder the same at every rung plus the links between rungs (`period`
    gives the rungs' buckets; required with a ladder)."""
    geometry = policy.geometry
    if geometry.kind == "grid":
        chains = [grid_chain(geometry.size_m, geometry.parents_m, geometry.level_names())]
    else:
        chains = [zones_chain(LEAF, layers.main_zones.parent_table(), geometry.level_names())]
    identities = []
    for spec, layer in zip(geometry.linked, layers.linked.values()):
        chains.append(zones_chain(spec.name, layer.parent_table(), [p.level for p in spec.parents], linked_total(spec.name)))
        if linked_covers_main[spec.name]:
            identities.append((TOTAL, linked_total(spec.name)))
    links: tuple = ()
    if policy.time.ladder:
        if period is None:
            raise ValueError("a policy with a time ladder needs the period to know its rungs' buckets")
        links = time_links(
            policy.time.ladder,
            lambda fine, coarse: rung_parents(policy, period, fine, coarse),
            lambda rung: cut_buckets(policy, period, rung),
        )
        chains += [
            Chain(tuple(at_rung(level, link.coarse) for level in chain.levels), chain.parent_of, chain.children_count)
            for link in links
            for chain in list(chains)
        ]
    cut = tuple(pd.Timestamp(b) for b in cut_buckets(policy, period, None)) if period is not None else ()
    return Structure(tuple(chains), tuple(identities), links, cut)


CELL_COLUMNS = ("cell_id", "bucket_start")  # a candidate cell figure's key; then its count
MARGIN_COLUMNS = ("level", "area_id", "bucket_start")  # a candidate margin figure's key; then its count


@dataclass(frozen=True)
class CandidateTables:
    """The candidate's published figures without geometry: `cells` (cell_id, bucket_start, count) and `margins`
    (level, area_id, bucket_start, count), the count named as the policy names it. The protection loop holds
    each configuration it tries as one of these and writes only the last one; the later steps read it back
    from the files. `digest` is the same for both: it is the candidate's identity, whatever holds it."""

    cells: pd.DataFrame
    margins: pd.DataFrame
    count_column: str

    @classmethod
    def read(cls, folder: Path, count_column: str) -> CandidateTables:
        cells = pd.read_parquet(folder / "cells.parquet", columns=[*CELL_COLUMNS, count_column])
        margins = pd.read_parquet(folder / "margins.parquet", columns=[*MARGIN_COLUMNS, count_column])
        return cls(cells, margins, count_column)

    def digest(self) -> str:
        """sha256 of the figures, each table in the order of its keys, bucket starts as UTC nanoseconds: what
        is published, not how a file encodes it (computed once per value)."""
        return self._digest

    @cached_property
    def _digest(self) -> str:
        digest = hashlib.sha256()
        for frame, keys in ((self.cells, CELL_COLUMNS), (self.margins, MARGIN_COLUMNS)):
            columns = [*keys, self.count_column]
            ordered = frame.sort_values(list(keys), kind="stable")
            digest.update(f"{len(ordered)}:{','.join(columns)}".encode())
            for column in columns:
                values = ordered[column]
                if column == "bucket_start":
                    data = pd.DatetimeIndex(pd.to_datetime(values, utc=True)).as_unit("ns").asi8.tobytes()
                elif column == self.count_column:
                    data = values.to_numpy(dtype="int64").tobytes()
                else:
                    data = "\x1f".join(values.astype(str)).encode()
                digest.update(hashlib.sha256(data).digest())
        return digest.hexdigest()


@dataclass(frozen=True)
class ReleaseContext:
    """One release (policy, period) and its work area under `work_root`. Costly inputs load lazily, once.

    Building one refuses a period of the other cadence (Policy.check_period), so no stage of a monthly job
    ever runs a quarterly policy."""

    policy: Policy
    period: Period
    work_root: Path
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.policy.check_period(self.period)

    def hold_candidate(self, candidate: CandidateTables | None) -> None:
        """Make `candidate` the one `candidate_tables` answers (the protection loop's configuration, not yet
        written); None: the candidate files again."""
        self._cache["held_candidate"] = candidate

    def candidate_tables(self) -> CandidateTables:
        """The candidate the protection loop holds, else the candidate files as written (read again when
        either file changed since it was last read here)."""
        held = self._cache.get("held_candidate")
        if held is not None:
            return held
        folder = self.area.candidate
        stamp = tuple(
            (s.st_ino, s.st_size, s.st_mtime_ns)
            for s in (folder.joinpath(n).stat() for n in ("cells.parquet", "margins.parquet"))
        )
        read = self._cache.get("written_candidate")
        if read is None or read[0] != stamp:
            read = (stamp, CandidateTables.read(folder, self.policy.count_column))
            self._cache["written_candidate"] = read
        return read[1]

    def memo(self) -> reuse.Memo:
        """The work area's memo for the candidate as it is now (`stages.reuse`)."""
        return reuse.Memo(self.area.root / reuse.MEMO, self.candidate_tables().digest())

    def held_candidate(self) -> CandidateTables | None:
        return self._cache.get("held_candidate")

    def cached(self, name: str, load: Callable[[], T]) -> T:
        """`load()`'s value under `name`, computed on the first call and kept for this context's life: the
        inputs every stage reads (the work area, the zone layers, ...) and what a stage reads more than once."""
        if name not in self._cache:
            self._cache[name] = load()
        return self._cache[name]

    def forget(self, name: str) -> None:
        """Drop what `cached` keeps under `name` (a value found stale): the next call loads it again."""
        self._cache.pop(name, None)

    @property
    def area(self) -> WorkArea:
        return self.cached("area", lambda: WorkArea.for_release(self.work_root, self.policy, self.period))

    def area_of(self, period_label: str) -> WorkArea:
        """The work area of another period of the same dataset (an earlier release's key sets)."""
        return WorkArea(self.work_root / self.policy.name / period_label)

    @property
    def layers(self) -> ZoneLayers:
        return self.cached("layers", lambda: ZoneLayers(self.policy))

    @property
    def locator(self) -> Locator:
        return self.layers.main

    def risk_zones(self, cells: pd.Series) -> pd.Series:
        """The risk zone (an area of the level `risk.zones` names) of each cell of the main geometry, indexed by
        cell."""
        level = risk_spec(self.policy).zones
        if level == LEAF:
            return pd.Series(cells.to_numpy(), index=cells.to_numpy())
        hierarchy = self.locator.hierarchy(cells.drop_duplicates())
        mapping = dict(zip(hierarchy["cell_id"], hierarchy[level]))
        return pd.Series([mapping[c] for c in cells], index=cells.to_numpy())

    def input_digests(self) -> list[str]:
        """The sha256 of each input file of the release, as its ingest summary records them (empty before
        ingest, or for an older ingest summary)."""
        path = self.area.ingest / IngestSummary.FILE
        return list(IngestSummary.read(self.area.ingest).input_digests or []) if path.exists() else []

    @property
    def zeros(self) -> frozenset[str]:
        """The validated structural zeros (a list naming a cell outside the geometry is refused)."""
        return self.cached("zeros", lambda: structural_zeros(self.policy, self.layers.main))

    @property
    def buckets(self) -> list[datetime]:
        """Every bucket start (UTC) that overlaps the period."""
        return self.cached("buckets", lambda: period_buckets(self.policy, self.period))

    @property
    def structure(self) -> Structure:
        """The release structure (known once the counts say which linked zonings cover every ping)."""
        return self.cached(
            "structure",
            lambda: release_structure(
                self.policy, self.layers, CountsSummary.read(self.area.counts).linked_covers_main, self.period
            ),
        )

    @property
    def disclosure(self) -> DisclosureSpec:
        """What the release must guarantee apart from the counts (structure, k, measure, zeros, buckets,
        count column): the one spec that protection and the suppression audit share."""
        policy = self.policy
        return self.cached(
            "disclosure",
            lambda: DisclosureSpec(
                self.structure,
                policy.k,
                policy.measure,
                self.zeros,
                tuple(self.buckets),
                policy.count_column,
                climb=policy.suppression.climb,
                budget=policy.suppression.budget,
                method=ProtectionMethod.release(cost=policy.suppression.cost),
            ),
        )


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
