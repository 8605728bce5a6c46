"""What the attacker's audit decides and reports: the protection criterion, one primary's interval, and the
audit's result (the LP machinery is in `suppression.audit`)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import highspy

from spatial_release.fileio import write_json_atomic


@dataclass(frozen=True)
class Criterion:
    """What "protected" means for a withheld primary of value v: the attacker's integer interval [lo, up]
    must reach lo <= lower(v) and up >= upper(v).

    These are the lower and upper protection levels of Fischetti and Salazar-Gonzalez (2001, Management
    Science): lower(v) = v - LPL and upper(v) = v + UPL. For frequency tables the theory gives no levels;
    ours are LPL = 1 (sdcTable's default) and UPL = max(k - v, 1), which also covers the "sum of primaries
    below k" problem (cf. GaussSuppression's protection intervals, Langsrud, Statistics Norway, which
    ask up >= v + 1).

    Default (ours): lower = v - 1, upper = max(k, v + 1): the value is neither pinned down nor shown to be
    below k. With `range_pct` (compatibility with tau-Argus FREQ(k, p)): lower = v - max(1, ceil(p% v)),
    upper = v + max(1, ceil(p% v)); it does not ask the interval to reach k, so it is weaker. It exists to
    compare patterns on equal terms, never for releases."""

    k: int
    range_pct: float | None = None

    def _step(self, v: int, range_pct: float) -> int:
        return max(1, math.ceil(v * range_pct / 100 - 1e-9))

    def lower(self, v: int) -> int:
        return v - 1 if self.range_pct is None else max(0, v - self._step(v, self.range_pct))

    def upper(self, v: int) -> int:
        return max(self.k, v + 1) if self.range_pct is None else v + self._step(v, self.range_pct)

    def reaches_lower(self, v: int, lo: float) -> bool:
        return lo <= self.lower(v)

    def reaches_upper(self, v: int, up: float) -> bool:
        return up >= self.upper(v)

    def passes(self, v: int, lo: float, up: float) -> bool:
        """Whether the interval [lo, up] protects a primary of value v."""
        return self.reaches_lower(v, lo) and self.reaches_upper(v, up)

    def failing(self, v: int, lo: float, up: float) -> str:
        """Which bound of [lo, up] fails for a primary of value v: "lower", "upper", "both" or "" (it passes)."""
        low_ok, up_ok = self.reaches_lower(v, lo), self.reaches_upper(v, up)
        return "" if low_ok and up_ok else "both" if not (low_ok or up_ok) else "lower" if not low_ok else "upper"

    def describe(self) -> str:
        if self.range_pct is None:
            return "for each primary v: integer lo <= v - 1 and integer up >= max(k, v + 1)"
        return f"tau-Argus FREQ compatibility: lo <= v - max(1, {self.range_pct}% v), up >= v + max(1, {self.range_pct}% v)"


@dataclass(frozen=True)
class Interval:
    node: int
    value: int
    lo: float
    up: float
    passed: bool
    exact_integer: bool  # True when a bound needed an integer (MIP) solve: the LP's optimal vertex was fractional
    failing: str = ""  # "lower", "upper", "both" or ""
    binding: tuple[tuple[int, float], ...] = ()  # published nodes binding the failing bound, with |reduced cost|
    # OPTIMAL: lo and up are the attacker's integer optima. WITNESS: at least one bound comes from an
    # integral feasible point that already clears the protection bound, so the true interval is at least
    # as wide as [lo, up] (the attacker cannot narrow it below a point that is feasible).
    bounds: str = "optimal"

    def margin(self, criterion: Criterion) -> float:
        """Smallest distance to the protection bound (negative when failing)."""
        return min(criterion.lower(self.value) - self.lo, self.up - criterion.upper(self.value))


@dataclass
class AuditResult:
    k: int
    criterion: Criterion | None = None
    intervals: list[Interval] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # figures two releases publish with two values: {"level", "area_id", "bucket_start"}, also in `errors`
    conflicts: list[dict[str, str]] = field(default_factory=list)
    components: int = 0
    lps_solved: int = 0
    mips_solved: int = 0
    bulk_lps: int = 0
    witness_lps: int = 0  # LPs that found a witness point for an unbounded upper bound
    seconds: float = 0.0
    workers: int = 1
    # per audited primary: (lo point, up point), integral points of the attacker's feasible set as
    # {node: value} where they differ from the table's value (see suppression.certificate); None when the
    # solver gave no integral point for that bound
    witnesses: dict[int, tuple[dict | None, dict | None]] = field(default_factory=dict, repr=False)

    @property
    def passed(self) -> bool:
        return not self.errors and all(i.passed for i in self.intervals)

    def failures(self) -> list[Interval]:
        return [i for i in self.intervals if not i.passed]

    def smallest_margin(self) -> float | None:
        criterion = self.criterion or Criterion(self.k)
        margins = [i.margin(criterion) for i in self.intervals]
        return min(margins) if margins else None

    def summary(self) -> AuditSummary:
        smallest = self.smallest_margin()
        return AuditSummary(
            passed=self.passed,
            primaries_audited=len(self.intervals),
            failures=len(self.failures()),
            errors=self.errors[:20],
            components=self.components,
            lps_solved=self.lps_solved,
            bulk_lps=self.bulk_lps,
            mips_solved=self.mips_solved,
            witness_lps=self.witness_lps,
            workers=self.workers,
            smallest_margin_to_bound=None if smallest is None or math.isinf(smallest) else smallest,
            criterion=(self.criterion or Criterion(self.k)).describe(),
            solver=f"HiGHS {highspy.Highs().version()}",
            seconds=round(self.seconds, 3),
        )


@dataclass(frozen=True)
class CertificateSummary:
    """How the blocking audit used the protection step's certificate: components certified from its witness
    points, components re-solved (and the first reasons), points rejected or invalid."""

    certified_components: int
    re_solved_components: int
    rejected: str | None  # why the whole certificate was not usable
    invalid_points: int
    re_solved_because: list[str]


@dataclass(frozen=True)
class AuditSummary:
    """The audit's internal summary (audit.internal.json in the work area, owner-only): counts of withheld
    primaries, components and LPs are facts about withheld figures, never published."""

    FILE = "audit.internal.json"

    passed: bool
    primaries_audited: int
    failures: int
    errors: list[str]
    components: int
    lps_solved: int
    bulk_lps: int
    mips_solved: int
    witness_lps: int
    workers: int
    smallest_margin_to_bound: float | None
    criterion: str
    solver: str
    seconds: float
    certificate: CertificateSummary | None = None
    # withheld figures (primaries and complements) at lower bound exactly 1 (`suppression.existence`), the
    # solver errors there, and the LPs and MIPs that decided it
    at_lower_bound_one: int = 0
    existence_errors: list[str] = field(default_factory=list)
    existence_lps: int = 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.certificate is None:
            del data["certificate"]  # the file has no such key when the audit was solved, not certified
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuditSummary:
        certificate = data.get("certificate")
        return cls(**{**data, "certificate": CertificateSummary(**certificate) if certificate else None})

    def write(self, folder: Path) -> None:
        write_json_atomic(folder / self.FILE, self.to_json())

    @classmethod
    def read(cls, folder: Path) -> AuditSummary:
        return cls.from_json(json.loads((folder / cls.FILE).read_text()))
