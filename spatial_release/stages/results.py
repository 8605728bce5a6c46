"""What each stage hands the next, typed: the ingest summary (ingest/ingest.json), the counts summary
(counts/counts.json), the protection manifest (candidate/manifest.json), the risk assessment
(risk/risk.json) and the review (reviews/review-NNNNNN.json). The release record (release.json) and its parts
are the release format's (`spatial_release.release.record`).

JSON on disk is their serialisation, not their API: `to_json()` gives the file's content (the same keys as
before these types existed; files are written with sorted keys) and `from_json()` reads it back. Nothing
outside this module and the release format reads a stage's JSON by key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeAlias

from spatial_release.dp.frontier import DpFrontierRow
from spatial_release.release.record import PublicCounts, Record, RiskRecord, frontier_from_json, records_json


@dataclass(frozen=True)
class IngestSummary(Record):
    FILE: ClassVar[str] = "ingest.json"
    files: list[str]
    input_columns: list[str]
    rows_read: int
    pings_read: int
    pings_valid: int
    pings_rejected: int
    rejected_share: float
    rejected_by_reason: dict[str, int]
    max_rejected_share: float
    rejected_share_problem: str | None
    quarantine: str
    valid_by_file: dict[str, int] | None = None  # absent from summaries written before it was recorded
    # sha256 over the input files' digests, in name order: what a release says of its inputs (their names
    # may carry a unit id: per-device exports such as `bike-29590.csv`)
    inputs_sha256: str | None = None
    input_digests: list[str] | None = None  # each file's sha256, sorted: the population is keyed on them

    def pings_per_file(self) -> dict[str, int]:
        """Valid pings per input file name (one entry for all files where the ingest did not record it)."""
        if self.valid_by_file is not None:
            return self.valid_by_file
        return {" + ".join(Path(f).name for f in self.files): self.pings_valid}


@dataclass(frozen=True)
class CountsSummary(Record):
    """Internal: the number of groups and of units counted are facts about withheld cells."""

    FILE: ClassVar[str] = "counts.json"
    engine: str
    engine_settings: dict[str, Any]
    pings_located: int
    pings_outside_geometry: int
    outside_file: str
    groups: int
    units: int
    unit_buckets: int
    linked_covers_main: dict[str, bool]
    unsure_coordinates: int
    assignment: dict[str, str]
    seconds: dict[str, float]


@dataclass(frozen=True)
class FrontierRow(Record):
    """One configuration the coarsening tried (`stages.coarsen`), as the internal manifest keeps it: the steps
    each zone climbed, the figures it published, the zones still over the gate with their figures (rounded to
    6 digits), the worst of them, the ceiling and whether it passed."""

    configuration: str
    zones_coarsened: dict[str, int]
    published_cells: int
    published_margins: int
    zones_over: dict[str, float]
    worst_zone_over: str | None
    ceiling: float
    passed: bool


# The frontier of a protection: the configurations the coarsening tried, or those a DP release compared
Frontier: TypeAlias = Sequence[FrontierRow | DpFrontierRow]


@dataclass(frozen=True)
class ProtectionSummary(Record):
    """Internal figures of the protection (in the work area's manifest; printed to the operator only)."""

    groups: int
    smallest_count_before: int | None
    smallest_published_count: int | None
    published_cells: int
    structural_zero_cells_published: int
    structural_zero_conflicts: int
    primary_cells: int
    secondary_cells: int
    published_margins: int
    withheld_margins: int
    unit_counts_withheld: int
    unit_counts_total: int
    share_withheld: float
    by_level: dict[str, dict[str, int]]  # level -> primary, secondary, units_withheld
    suppression: dict[str, Any]  # sweep and repair secondaries, repair rounds, the audit's internal summary
    crs: str
    published_by_level: dict[str, int] | None = None
    ladder: dict[str, Any] | None = None  # what the time ladder offered (suppression.ladder)
    # The utility report (suppression.utility) and, with a time ladder, the same for the single-level release
    # of the policy's bucket at the same k. Internal: its shares of unit counts per level and stratum are sums
    # of withheld figures that the audit never modelled, so they would add equations an attacker could use.
    utility: dict[str, Any] | None = None
    # risk.coarsen apply: every configuration tried (zones coarsened, published figures, the attacks' worst
    # zone and figure, passed), finest first; protection.method dp: the configurations compared at the
    # policy's loss. Internal: the public part goes to release.json's risk section (`stages.coarsen`)
    frontier: Frontier | None = None
    # protection.method dp: the mechanism as release.json records it (`stages.dp`)
    privacy: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "frontier": records_json(self.frontier)}

    @classmethod
    def field_values(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().field_values(data),
            "frontier": frontier_from_json(data.get("frontier"), FrontierRow, DpFrontierRow),
        }

    def public_counts(self) -> PublicCounts:
        return PublicCounts(**{f.name: getattr(self, f.name) for f in fields(PublicCounts)})


@dataclass(frozen=True)
class ProtectionManifest(Record):
    """The candidate's internal summary, the sha256 of each candidate file the checks read, and the method
    that protected it as the release record states it (`ProtectionMethod.describe()` of the protection log;
    None in a manifest written before it was recorded)."""

    FILE: ClassVar[str] = "manifest.json"
    summary: ProtectionSummary
    sha256: dict[str, str]
    method: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary.to_json(), "sha256": self.sha256, "method": self.method}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProtectionManifest:
        return cls(ProtectionSummary.from_json(data["summary"]), data["sha256"], data.get("method"))


@dataclass(frozen=True)
class ZoneFigures(Record):
    """One risk zone's figures, each labelled with the adversary it belongs to."""

    zone: str
    units: int
    prosecutor_mean: float
    prosecutor_at_risk: float
    prosecutor_worst: float
    journalist_mean: float | None
    panel_share: float | None
    # risk.model attack: the attacks' figures in the zone (risk.attack); attack_success is the worst of them
    attack_linkage: float | None = None
    attack_membership: float | None = None
    attack_accuracy: float | None = None
    attack_success: float | None = None
    # risk.model advantage (risk.advantage): what the release adds, the gate's figures of the zone
    targets: int | None = None
    success_without: float | None = None
    success_with: float | None = None
    advantage: float | None = None
    advantage_ucb: float | None = None
    strongest: str | None = None
    exposed: int | None = None  # internal: units over the ceiling (an upper bound), never published
    exposed_share: float | None = None
    classifier: float | None = None  # the membership classifier on the counts, at the quantile
    boundary_units: int | None = None  # internal
    complete: bool | None = None  # every unit of the zone was a target

    def public_row(self, adversary: str) -> dict[str, Any]:
        """The zone's row of release.json's risk.zones: figures rounded up (`public_ratio`, the exposed share to
        one significant digit: with the public population it would name a count of units), and the number of
        targets only when they were sampled (a zone assessed whole would publish its unit count)."""
        from spatial_release.risk.figures import public_ratio

        return {
            "zone": self.zone,
            "targets": None if self.complete else self.targets,
            "success_without": public_ratio(self.success_without),
            "success_with": public_ratio(self.success_with),
            "advantage": public_ratio(self.advantage),
            "advantage_ucb": public_ratio(self.advantage_ucb),
            "strongest": self.strongest,
            "classifier": public_ratio(self.classifier),
            "exposed_share": public_ratio(self.exposed_share, 1),
            "uniqueness_bound": public_ratio(self.journalist_mean if adversary == "journalist" else self.prosecutor_mean),
        }


@dataclass(frozen=True)
class CoarseningProposal(Record):
    """What the gate would say of a release of the cells at one rung of the time ladder instead of the
    policy's bucket (`stages.risk.propose_coarsening`)."""

    rung: str
    status: str
    worst_zone: str | None
    release_figure: float | None
    cumulative: float | None


@dataclass(frozen=True, kw_only=True)
class RiskAssessment(RiskRecord):
    """Per-zone risk of the candidate with the earlier releases of its window, and the gate's decision: the
    release's risk record plus what the work area keeps (earlier figures, the panel, the zones)."""

    FILE: ClassVar[str] = "risk.json"
    previous: list[float]
    panel: str
    landscape_version: int
    units: int
    keys: int
    zones: list[ZoneFigures]  # type: ignore[assignment]  # the internal figures; record() makes the public table
    seconds: float
    # When the gate blocks a policy with a time ladder: per rung, the figures a release of the cells at that
    # rung would get (stages.risk.propose_coarsening), finest first.
    coarsening: list[CoarseningProposal] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "zones": [z.to_json() for z in self.zones],
            "coarsening": records_json(self.coarsening),
        }

    @classmethod
    def field_values(cls, data: dict[str, Any]) -> dict[str, Any]:
        proposals = data.get("coarsening")
        return {
            **super().field_values(data),
            "zones": [ZoneFigures.from_json(z) for z in data["zones"]],
            "coarsening": None if proposals is None else [CoarseningProposal.from_json(p) for p in proposals],
        }

    def record(self) -> RiskRecord:
        public = {f.name: getattr(self, f.name) for f in fields(RiskRecord) if f.name != "zones"}
        table = (
            [z.public_row(self.adversary) for z in self.zones if z.advantage is not None]
            if self.model == "advantage"
            else None
        )
        return RiskRecord(**public, zones=table)

    def worst_zone_figures(self) -> list[ZoneFigures]:
        return [z for z in self.zones if z.zone == self.worst_zone]


@dataclass(frozen=True)
class ReviewedRelease(Record):
    """One published release in a review: re-assessed from its key sets, or (another programme of the same
    population, or past retention) counted with its published figure."""

    dataset: str
    period: str
    ledger_seq: int
    re_assessed: bool
    release_figure: float | None
    cumulative: float
    worst_zone: str | None = None  # re-assessed only
    published_figure: float | None = None  # re-assessed only
    pooled: float | None = None  # re-assessed only

    RE_ASSESSED_ONLY: ClassVar[tuple[str, ...]] = ("worst_zone", "published_figure", "pooled")

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        return out if self.re_assessed else {k: v for k, v in out.items() if k not in self.RE_ASSESSED_ONLY}


@dataclass(frozen=True)
class Breach(Record):
    """A published release now over the per-release ceiling, or pushing the cumulative figure over the
    programme ceiling."""

    release: ReviewedRelease
    per_release_ceiling: float
    cumulative_ceiling: float
    zone_figures: list[ZoneFigures]

    @property
    def period(self) -> str:
        return self.release.period

    def to_json(self) -> dict[str, Any]:
        return {
            **self.release.to_json(),
            "per_release_ceiling": self.per_release_ceiling,
            "cumulative_ceiling": self.cumulative_ceiling,
            "zone_figures": [z.to_json() for z in self.zone_figures],
        }

    def public_json(self) -> dict[str, Any]:
        """What the UI shows: the release's figures against the ceilings, not the zone's row (its unit count
        and exact shares are not published figures)."""
        return {k: v for k, v in self.to_json().items() if k != "zone_figures"}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Breach:
        return cls(
            ReviewedRelease.from_json(data),
            data["per_release_ceiling"],
            data["cumulative_ceiling"],
            [ZoneFigures.from_json(z) for z in data["zone_figures"]],
        )


@dataclass(frozen=True)
class Review(Record):
    """Every published release of a population re-assessed under the current landscape."""

    dataset: str
    landscape_sha256: str
    releases: list[ReviewedRelease]
    cumulative: float
    breaches: list[Breach]
    ledger_entry: str | None = field(default=None)  # set once the review is recorded in the ledger
    # protection.method dp: the population's privacy budget, spent and left (`stages.dp.budget_decision`)
    privacy: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "dataset": self.dataset,
            "landscape_sha256": self.landscape_sha256,
            "releases": [r.to_json() for r in self.releases],
            "cumulative": self.cumulative,
            "breaches": [b.to_json() for b in self.breaches],
        }
        if self.privacy is not None:
            out["privacy"] = self.privacy
        return out if self.ledger_entry is None else {**out, "ledger_entry": self.ledger_entry}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Review:
        return cls(
            data["dataset"],
            data["landscape_sha256"],
            [ReviewedRelease.from_json(r) for r in data["releases"]],
            data["cumulative"],
            [Breach.from_json(b) for b in data["breaches"]],
            data.get("ledger_entry"),
            data.get("privacy"),
        )

    def breach_of(self, period_label: str) -> Breach | None:
        return next((b for b in self.breaches if b.period == period_label), None)
