"""release.json, typed: what a release is, how it was protected and checked, and its ledger entry, with the
record's parts (the policy it was published under, the figures its tables show, what went in, the audit's
verdict, the risk figures) and the fixed wording of its format (`K_BOUNDARY`, `BUCKET_START`).

JSON on disk is the record's serialisation, not its API: `to_json()` gives the file's content and
`from_json()` reads it back. `Record` is the base of every typed JSON file of the package (the pipeline's
summaries in `stages.results` too).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeAlias

from spatial_release import __version__
from spatial_release.fileio import write_json_atomic
from spatial_release.period import Period
from spatial_release.policy import Policy


class Record:
    """A flat record: its JSON is its fields, in order; reading takes the fields the file has (a file written
    before a field existed gets the field's default)."""

    FILE: ClassVar[str] = ""
    __dataclass_fields__: ClassVar[dict[str, Any]]  # every record is a dataclass (for `fields` and its type)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]):
        return cls(**cls.field_values(data))

    @classmethod
    def field_values(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The fields `data` has, as JSON holds them (a record with typed parts replaces those)."""
        return {f.name: data[f.name] for f in fields(cls) if f.name in data}

    def write(self, folder: Path) -> None:
        self.write_to(folder / self.FILE)

    def write_to(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def read(cls, folder: Path):
        return cls.read_from(folder / cls.FILE)

    @classmethod
    def read_from(cls, path: Path):
        return cls.from_json(json.loads(path.read_text()))


@dataclass(frozen=True)
class PublicCounts(Record):
    """The figures of the protection summary that the published tables themselves show. Every other figure
    (groups, primaries, secondaries, withheld units and their share, the smallest count before suppression,
    withheld margins, units counted) is a fact about withheld cells that the attacker-LP audit never saw, so
    it stays in the internal manifest and never reaches release.json or Dagster metadata."""

    published_cells: int
    published_margins: int
    smallest_published_count: int | None
    structural_zero_cells_published: int
    # published figures per level (`cell`, `tract`, `cell@1w`, ...): what the files show, so public
    published_by_level: dict[str, int] | None = None


@dataclass(frozen=True)
class AuditVerdict(Record):
    """The audit figures that may be published: the verdict and how it was reached. Counts of primaries,
    components and the smallest margin are facts about withheld figures, kept in audit.internal.json."""

    passed: bool
    criterion: str
    solver: str


def records_json(records: Sequence[Record] | None) -> list[dict[str, Any]] | None:
    """A list of typed parts as their file holds them."""
    return None if records is None else [r.to_json() for r in records]


@dataclass(frozen=True)
class PublicFrontierRow(Record):
    """A configuration the coarsening tried, as release.json may carry it: how many zones it coarsened to which
    rung, whether it passed the risk gate and whether it is this release. No zone is named (a zone coarsened
    holds units, and its cells may all be withheld) and no figure is given (the counts and attack figures of a
    configuration not published are facts about unpublished data)."""

    configuration: str
    passed: bool
    published: bool


@dataclass(frozen=True)
class PublicDpFrontierRow(Record):
    """A configuration a DP release compared at the policy's loss, as release.json may carry it: what follows
    from the policy alone (its bounds, sensitivity, noise scale and threshold), never its share of figures
    shown or its error (facts about the true counts)."""

    configuration: str
    max_buckets: int
    max_areas: int
    l0: int
    scale: float
    threshold: int
    interval95: float
    published: bool


PublicFrontier: TypeAlias = list[PublicFrontierRow | PublicDpFrontierRow]


def frontier_from_json(rows: list[dict[str, Any]] | None, tried: type[Record], compared: type[Record]) -> list[Any] | None:
    """A frontier read back (release.json's public rows or the manifest's internal ones): the rows of the
    configurations a DP release compared carry their noise scale, those the coarsening tried do not."""
    if rows is None:
        return None
    return [compared.from_json(r) if "scale" in r else tried.from_json(r) for r in rows]


@dataclass(frozen=True)
class RiskRecord(Record):
    """The risk figures a release record and its ledger entry carry."""

    status: str
    reason: str
    worst_zone: str | None
    release_figure: float | None
    pooled: float | None
    cumulative: float | None
    headroom: float | None
    measure: str
    adversary: str
    landscape_sha256: str
    points: int
    window_periods: list[str]
    # The model the gate read ('attack' or 'uniqueness'), and the uniqueness figure of the worst zone, the upper
    # bound ("perfect recovery"), reported whichever model gates; a warning when it is over the ceiling and
    # the gated attack figure is not.
    model: str = "uniqueness"
    # risk.coarsen apply: the configurations protection tried, finest first (public part: which zones were
    # coarsened to which rung, whether it passed, which one this release is); protection.method dp: the
    # configurations compared at the policy's loss (what follows from the policy alone)
    frontier: PublicFrontier | None = None
    upper_bound: float | None = None
    upper_bound_zone: str | None = None
    warning: str | None = None
    # risk.model advantage: per zone, zone, targets, success_without, success_with, advantage, advantage_ucb,
    # strongest, classifier, exposed_share, uniqueness_bound (stages.results.ZoneFigures.public_row)
    zones: list[dict[str, Any]] | None = None
    # protection.method dp: the population's privacy accounting (accounting, measure, loss, budget, spent before
    # and with this release, left); absent from a k-anonymous release's record
    privacy: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {**super().to_json(), "frontier": records_json(self.frontier)}
        return out if self.privacy is not None else {k: v for k, v in out.items() if k != "privacy"}

    @classmethod
    def field_values(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().field_values(data),
            "frontier": frontier_from_json(data.get("frontier"), PublicFrontierRow, PublicDpFrontierRow),
        }


@dataclass(frozen=True)
class PolicyRef(Record):
    name: str
    version: int
    sha256: str

    @classmethod
    def of(cls, policy: Policy) -> PolicyRef:
        return cls(policy.name, policy.version, policy.sha256)


class IngestFigures(Protocol):
    """What a release says of its ingest (the pipeline's ingest summary has these)."""

    files: list[str]
    inputs_sha256: str | None
    rows_read: int
    pings_read: int
    pings_rejected: int
    rejected_by_reason: dict[str, int]


class CountsFigures(Protocol):
    """What a release says of its counting (the pipeline's counts summary has it)."""

    pings_outside_geometry: int


@dataclass(frozen=True)
class ReleaseInputs(Record):
    """What went in: how many input files and a digest of their contents (never their names: a per-device
    export such as `bike-29590.csv` names a unit), rows and pings read, quarantined and outside the
    geometry.

    Under differential privacy every one of these is null and `withheld` says why (`withheld_under_dp`): each
    is an exact function of the data that one unit's pings move (its rows, its rejected pings and their
    reasons, its pings outside the geometry, even the digest and the number of files of a per-unit export),
    published outside the mechanism, so a release that carried them would not be (epsilon, delta)-DP as a
    whole. The exact figures stay in the owner-only work area (the ingest and counts summaries)."""

    files: int | None
    files_sha256: str | None
    rows_read: int | None
    pings_read: int | None
    pings_rejected: int | None
    rejected_by_reason: dict[str, int] | None
    pings_outside_geometry: int | None
    # why the figures above are null; absent from a record that carries them (k-anonymity)
    withheld: str | None = None

    @classmethod
    def of(cls, ingest: IngestFigures, counts: CountsFigures) -> ReleaseInputs:
        return cls(
            len(ingest.files),
            ingest.inputs_sha256,
            ingest.rows_read,
            ingest.pings_read,
            ingest.pings_rejected,
            ingest.rejected_by_reason,
            counts.pings_outside_geometry,
        )

    @classmethod
    def withheld_under_dp(cls) -> ReleaseInputs:
        """The inputs block of a DP release: every figure null, with the reason (the class's docstring)."""
        return cls(None, None, None, None, None, None, None, withheld=INPUTS_WITHHELD_UNDER_DP)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        return out if self.withheld is not None else {k: v for k, v in out.items() if k != "withheld"}


# The reason a DP release's inputs block gives for its null figures.
INPUTS_WITHHELD_UNDER_DP = (
    "withheld under differential privacy: input files, their digest, rows and pings read, quarantined "
    "(by reason) and outside the geometry are exact figures of the data outside the mechanism, which one "
    "unit's pings move; they stay in the owner-only work area"
)


K_BOUNDARY = "inclusive: a count n is published only if n >= k"
BUCKET_START = "UTC instant of the bucket's start in the policy's time zone"


@dataclass(frozen=True)
class ReleaseRecord(Record):
    """release.json: what a release is, how it was protected and checked, and its ledger entry."""

    FILE: ClassVar[str] = "release.json"
    dataset: str
    period: str
    policy: PolicyRef
    k: int
    k_boundary: str
    unit: str
    count_column: str
    measure: str
    geometry: dict[str, Any]  # the policy's geometry spec and the cells' CRS
    time: dict[str, Any]  # the policy's time spec
    bucket_start: str
    counts: PublicCounts
    complementary_suppression: str  # the method that protected the release, as its protection step ran it
    audit: AuditVerdict | None
    risk: RiskRecord | None
    ledger_entry: str | None
    input: ReleaseInputs
    checks: dict[str, str]
    software: dict[str, str]
    published_at: str
    files: dict[str, str]
    # protection.method dp: the mechanism's parameters (library, mechanism, accounting, loss, scale, threshold,
    # 95 % interval of the noise, contribution bounds, sensitivity) and its guarantee; never a noise draw.
    # Absent from a k-anonymous release's record.
    privacy: dict[str, Any] | None = None

    NESTED: ClassVar[dict[str, type[Record]]] = {
        "policy": PolicyRef,
        "counts": PublicCounts,
        "audit": AuditVerdict,
        "risk": RiskRecord,
        "input": ReleaseInputs,
    }

    @property
    def bucket(self) -> str:
        """The length of the time buckets, as the policy's time spec says (e.g. `1w`)."""
        return self.time["bucket"]

    @classmethod
    def build(
        cls,
        policy: Policy,
        period: Period,
        counts: PublicCounts,
        inputs: ReleaseInputs,
        files: dict[str, str],
        crs: str,
        checks: dict[str, str],
        audit: AuditVerdict | None = None,
        risk: RiskRecord | None = None,
        *,
        method: str,
        privacy: dict[str, Any] | None = None,
    ) -> ReleaseRecord:
        """The record before publication (no ledger entry yet). `method`: the sentence the protection step
        recorded for the method it ran (`suppression.ProtectionMethod.describe()`, kept in the protection
        manifest), never a fixed text."""
        return cls(
            policy.name,
            period.label,
            PolicyRef.of(policy),
            policy.k,
            K_BOUNDARY,
            policy.unit,
            policy.count_column,
            policy.measure,
            {**policy.geometry.model_dump(exclude={"path"}), "crs": crs},
            policy.time.model_dump(),
            BUCKET_START,
            counts,
            method,
            audit,
            risk,
            None,
            inputs,
            checks,
            {"spatial_release": __version__},
            datetime.now(UTC).isoformat(),
            files,
            privacy,
        )

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        for name in self.NESTED:
            value = getattr(self, name)
            out[name] = None if value is None else value.to_json()
        return out if self.privacy is not None else {k: v for k, v in out.items() if k != "privacy"}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReleaseRecord:
        values = {f.name: data[f.name] for f in fields(cls) if f.name != "privacy"}
        values["privacy"] = data.get("privacy")
        for name, kind in cls.NESTED.items():
            values[name] = None if data[name] is None else kind.from_json(data[name])
        return cls(**values)

    @classmethod
    def key_names(cls, policy: Policy, rejected_reasons: list[str], files: list[str]) -> set[str]:
        """Every key a release record of `policy` carries, at any depth, from the record's types and the
        policy's specs: the identifiers check compares them with the input's columns."""
        keys = {f.name for f in fields(cls)} | {f.name for kind in cls.NESTED.values() for f in fields(kind)}
        specs = [policy.geometry.model_dump(exclude={"path"}), policy.time.model_dump()]
        return (
            keys
            | {"crs", "spatial_release"}
            | set(rejected_reasons)
            | set(files)
            | {k for spec in specs for k in _keys(spec)}
        )


def _keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()
