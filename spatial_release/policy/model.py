"""The policy model: pydantic classes validated field by field (a repeated key and the files a policy names
are checked by `loading`). Each validator's error becomes "field '<where>': <what>" in the policy's error."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import duckdb
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from spatial_release.configfile import ConfigFileError
from spatial_release.levels import LEAF, TOTAL, linked_total
from spatial_release.period import Period

BUCKET_PATTERN = re.compile(r"^([1-9][0-9]*)([hdw])$")
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
MAX_K = 10**9


class PolicyError(ConfigFileError):
    """A policy file is missing, unreadable or invalid; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    """The IANA zone names this machine knows, but `localtime`: the host's own zone (a link some systems
    keep among the zones), which would make one policy give other instants on another machine."""
    return frozenset(available_timezones() - {"localtime"})


def _check_timezone(value: str) -> str:
    # a name, not a file of the zone database: a folder (`America`) made ZoneInfo raise IsADirectoryError
    if value not in _zone_names():
        raise ValueError(f"unknown IANA time zone {value!r} (a zone name such as 'America/New_York' or 'UTC')")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown IANA time zone {value!r}") from exc
    return value


TimeZoneName = Annotated[str, AfterValidator(_check_timezone)]


@lru_cache(maxsize=256)
def _strptime_problem(spec: str) -> str | None:
    """DuckDB's complaint about a strptime format, or None. Asking DuckDB itself (not a list of directives
    kept here) guarantees that a format accepted at load is one ingest can use."""
    con = duckdb.connect()
    try:
        con.execute("SELECT try_strptime('', " + "'" + spec.replace("'", "''") + "')").fetchall()
    except duckdb.Error as exc:
        return str(exc).splitlines()[0].removeprefix("Invalid Input Error: ")
    finally:
        con.close()
    return None


# A zone written as literal text ("... UTC", "...+00:00") would be matched and ignored, so the row would be
# read as a wall-clock time in source.timezone: a silent shift.
_LITERAL_ZONE = re.compile(r"\b(UTC|GMT|Z)\b|[+-]\d{2}:?\d{2}\s*$")


def _literal_zone_problem(spec: str) -> str | None:
    if "%z" in spec or "%Z" in spec or spec.endswith("Z"):
        return None  # an instant: the zone is read, not matched
    literal = re.sub(r"%.", " ", spec)
    if _LITERAL_ZONE.search(literal):
        return (
            "it spells a time zone as literal text, which would be matched and ignored (the time read "
            "as source.timezone): use %Z for a zone name or %z for an offset"
        )
    return None


def _check_strptime(value: str) -> str:
    problem = _strptime_problem(value) or _literal_zone_problem(value)
    if problem:
        raise ValueError(f"{value!r} is not a usable strptime format: {problem}")
    return value


StrptimeFormat = Annotated[str, AfterValidator(_check_strptime)]

# Literal texts that mean "no id" in exported files; compared case-insensitively after trimming.
DEFAULT_MISSING_UNIT_VALUES = ["NULL", "NA", "N/A", "nan", "NaN", "None", "-"]


class TripEnd(_Strict):
    """Columns of one end (origin or destination) of a trip row."""

    time: str
    lon: str
    lat: str


class SyntheticSource(_Strict):
    """Generate traces with the built-in generator when no trace files are given (demo policies)."""

    persons: int = Field(default=3000, ge=1)
    seed: int = 20180101
    file_format: Literal["csv", "parquet"] = "parquet"


class SourceSpec(_Strict):
    """How raw files become pings: file format, column mapping, timestamp formats and time zone."""

    format: Literal["pings", "trips"]
    file_format: Literal["auto", "csv", "parquet"] = "auto"
    paths: list[str] = Field(default_factory=list, description="glob patterns, relative to the policy file")
    unit: str = Field(description="column holding the person or device identifier")
    time: str | None = None
    lon: str | None = None
    lat: str | None = None
    origin: TripEnd | None = None
    destination: TripEnd | None = None
    time_formats: list[StrptimeFormat] = Field(
        default_factory=lambda: ["%Y-%m-%d %H:%M:%S"],
        min_length=1,
        description="DuckDB strptime formats tried in order; one with %z or %Z (or a literal trailing Z, UTC) "
        "gives an instant, one without gives a local time in `timezone`",
    )
    timezone: TimeZoneName = Field(description="IANA zone of naive timestamps in the files")
    missing_unit_values: list[str] = Field(
        default_factory=lambda: list(DEFAULT_MISSING_UNIT_VALUES),
        description="texts meaning 'no unit id' (case-insensitive, after trimming); such pings, and those "
        "whose id is null, blank or NaN, are quarantined as missing_unit_id",
    )
    identifiers: list[str] = Field(
        default_factory=list,
        description="identifier and quasi-identifier columns of the input; none may reach a release",
    )
    max_rejected_share: float = Field(default=0.01, ge=0.0, le=1.0)
    max_outside_share: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="ceiling on the share of valid pings outside the geometry (swapped axes, wrong region)",
    )
    synthetic: SyntheticSource | None = None

    @model_validator(mode="after")
    def _columns_match_format(self) -> SourceSpec:
        if self.format == "pings":
            missing = [f for f in ("time", "lon", "lat") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"format 'pings' needs the columns {missing}")
            if self.origin or self.destination:
                raise ValueError("format 'pings' takes time/lon/lat, not origin/destination")
        else:
            if self.origin is None or self.destination is None:
                raise ValueError("format 'trips' needs both 'origin' and 'destination' ({time, lon, lat})")
            if self.time or self.lon or self.lat:
                raise ValueError("format 'trips' takes origin/destination, not time/lon/lat")
        return self

    def protected_columns(self) -> list[str]:
        """Columns that must never reach a release: the unit id plus every declared (quasi-)identifier."""
        return sorted({self.unit, *self.identifiers})


class LinkedZoning(_Strict):
    """A second zoning published beside the main geometry over the same pings (e.g. census blocks beside
    council wards). Its areas and parents are published as margins (level = its name), and its bucket total
    as level `<name>_total`. The suppression audit links it to the main table through the bucket total."""

    name: str = Field(pattern=NAME_PATTERN)
    path: str
    id: str
    parents: list[ZoneParent] = Field(default_factory=list)

    def level_names(self) -> list[str]:
        return [self.name, *(p.level for p in self.parents), linked_total(self.name)]


class GridGeometry(_Strict):
    kind: Literal["grid"]
    crs: str = Field(description="projected CRS, e.g. EPSG:32618")
    size_m: int = Field(gt=0)
    parents_m: list[int] = Field(default_factory=list)
    linked: list[LinkedZoning] = Field(default_factory=list)

    @field_validator("crs")
    @classmethod
    def _projected_in_metres(cls, value: str) -> str:
        """Cells are `size_m` metres in this CRS: a geographic CRS (degrees) or one in feet would make a 500 m
        grid one of 500 degrees or feet, and a code pyproj does not know would fail only when counting."""
        from pyproj import CRS
        from pyproj.exceptions import CRSError

        try:
            crs = CRS.from_user_input(value)
        except CRSError as error:
            raise ValueError(f"unknown CRS {value!r} ({error})") from None
        units = {axis.unit_name for axis in crs.axis_info}
        if not crs.is_projected or units != {"metre"}:
            raise ValueError(
                f"CRS {value!r} is not a projected CRS in metres (axes in {sorted(units)}): grid cells are size_m "
                "metres, e.g. a UTM zone such as EPSG:32618"
            )
        return value

    @model_validator(mode="after")
    def _parents_nest(self) -> GridGeometry:
        previous = self.size_m
        for size in self.parents_m:
            if size <= previous or size % previous:
                raise ValueError(
                    f"parents_m must grow by integer multiples ({size} is not a multiple of {previous} "
                    "larger than it), so that each parent is exactly the union of its children"
                )
            previous = size
        return self

    def level_names(self) -> list[str]:
        return [f"grid_{size}m" for size in self.parents_m]


class ZoneParent(_Strict):
    """A parent level of a zoning: read from a column of the zones file or a prefix of the zone id."""

    level: str = Field(pattern=NAME_PATTERN)
    column: str | None = None
    prefix: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> ZoneParent:
        if (self.column is None) == (self.prefix is None):
            raise ValueError("give exactly one of 'column' or 'prefix'")
        return self


class ZonesGeometry(_Strict):
    kind: Literal["zones"]
    path: str = Field(description="GeoJSON, GeoPackage, GeoParquet or shapefile, relative to the policy file")
    id: str
    parents: list[ZoneParent] = Field(default_factory=list)
    linked: list[LinkedZoning] = Field(default_factory=list)

    def level_names(self) -> list[str]:
        return [p.level for p in self.parents]


Geometry = Annotated[GridGeometry | ZonesGeometry, Field(discriminator="kind")]


PERIOD_RUNG = "period"  # the coarsest time rung: the whole release period (a quarter or a month)
_HOURS = {"h": 1, "d": 24, "w": 168}


def bucket_hours(bucket: str) -> int:
    number, unit = BUCKET_PATTERN.match(bucket).groups()  # type: ignore[union-attr]
    return int(number) * _HOURS[unit]


def interval_sql(bucket: str) -> str:
    """DuckDB interval of a bucket like 1h, 1d, 1w (weeks as 7 days, so they start on Mondays)."""
    number, unit = BUCKET_PATTERN.match(bucket).groups()  # type: ignore[union-attr]
    days_or_hours = {"h": ("hours", 1), "d": ("days", 1), "w": ("days", 7)}[unit]
    return f"INTERVAL {int(number) * days_or_hours[1]} {days_or_hours[0]}"


class TimeSpec(_Strict):
    """The policy's time bucket and, optionally, its generalisation ladder: coarser buckets published where
    a figure at the finer one is withheld (see `suppression.ladder`). Each rung must contain whole buckets of
    the one below (a multiple of it; `period` is the whole release period), checked again on the real bucket
    edges when counting, so a week figure always covers exactly its days."""

    bucket: str = Field(description="1h, 6h, 1d, 1w, ...")
    timezone: TimeZoneName
    ladder: list[str] = Field(
        default_factory=list,
        description="coarser time rungs, finest first, e.g. [1w, period]: where a figure fails k at the "
        "policy's bucket, the release shows the finest rung above it that passes",
    )

    @field_validator("bucket")
    @classmethod
    def _bucket_form(cls, value: str) -> str:
        if not BUCKET_PATTERN.match(value):
            raise ValueError(f"bucket {value!r} is not a positive multiple of h, d or w (e.g. 1h, 1d, 1w)")
        return value

    @model_validator(mode="after")
    def _ladder_nests(self) -> TimeSpec:
        previous = self.bucket
        for i, rung in enumerate(self.ladder):
            if rung == PERIOD_RUNG:
                if i != len(self.ladder) - 1:
                    raise ValueError(f"ladder: {PERIOD_RUNG!r} is the coarsest rung and must come last")
                continue
            if not BUCKET_PATTERN.match(rung):
                raise ValueError(f"ladder rung {rung!r} is neither {PERIOD_RUNG!r} nor a multiple of h, d or w")
            coarse, fine = bucket_hours(rung), bucket_hours(previous)
            if coarse <= fine or coarse % fine:
                raise ValueError(
                    f"ladder rung {rung!r} must be a larger multiple of {previous!r} (the rung "
                    "below it), so that each of its buckets is a union of whole finer buckets"
                )
            previous = rung
        return self

    def bucket_interval_sql(self) -> str:
        return interval_sql(self.bucket)


class SuppressionSpec(_Strict):
    budget: float = Field(default=0.10, gt=0.0, le=1.0, description="largest share of unit counts in withheld cells")
    cost: Literal["unit_value", "cells"] = Field(
        default="unit_value",
        description="what a complementary suppression costs: unit_value ((n + 1) x a level weight: withhold "
        "small figures, keep unit counts) or cells (every non-empty figure alike: withhold fewer "
        "figures)",
    )
    climb: Literal["where_withheld", "to_budget"] = Field(
        default="where_withheld",
        description="with a time ladder: where_withheld offers the coarser figure over every figure withheld as "
        "a primary; to_budget climbs only the main geometry's cells, and only as far as the budget "
        "needs (the steps that show the most withheld unit counts per finer bucket merged first)",
    )
    zeros: str | None = Field(default=None, description="public list of structural-zero cell ids, relative to the policy")
    audit_with: list[str] = Field(
        default_factory=list,
        description="other datasets published over the same units, cells and buckets (e.g. a monthly and a "
        "quarterly programme): their releases that overlap the period are part of the audit",
    )


class RiskSpec(_Strict):
    """Risk zones are the areas of one level of the main geometry (`cell` for the zones themselves, or a
    parent level such as a coarse grid), fixed across releases; the landscape file states what outsiders
    know. Ceilings are changed here, in review, never at run time."""

    zones: str = Field(default=LEAF, description="level of the main geometry whose areas are the risk zones")
    model: Literal["advantage", "attack", "uniqueness"] = Field(
        default="advantage",
        description="what the gate reads: 'advantage' (default), per zone the upper confidence bound of the 95th "
        "percentile of what the release adds to the strongest of several attackers (each run on the candidate "
        "and on the release without the target: risk.advantage) and the share of the zone's public population "
        "over the ceiling; 'attack', the success of trajectory recovery and linkage on the candidate (it "
        "credits what the adversary knew before the release); 'uniqueness', the upper bound that scores each "
        "unit's published keys as if its trajectory were recovered perfectly. The uniqueness bound is computed "
        "and reported whichever gates",
    )
    coarsen: Literal["propose", "apply"] = Field(
        default="propose",
        description="when a risk zone is over the gate (risk.model advantage or attack): 'apply' withholds its cells at "
        "the policy's bucket (shown at the next rung of the time ladder, or by the parent areas) and "
        "protects again, rung by rung, until every zone passes (the frontier of what was tried is "
        "recorded); 'propose' only names the rung that would pass",
    )
    count_classifier: Literal["report", "gate"] = Field(
        default="report",
        description="the membership classifier on the published counts (Pyrgelis et al.; risk.advantage "
        "`membership_classifier`): 'report' shows its figure per zone beside the gate's, 'gate' makes the gate read "
        "it too. Exact counts of tens to hundreds of units give each of them an advantage of about 0.1 against it "
        "(docs/risk.md), so 'gate' with a ceiling of 0.05 refuses most exact-count releases: what differential "
        "privacy (protection.method dp) is for",
    )
    landscape: str = Field(description="the auxiliary-landscape YAML, relative to the policy file")
    per_release_ceiling: float = Field(default=0.05, gt=0.0, le=1.0)
    cumulative_ceiling: float = Field(default=0.20, gt=0.0, le=1.0)
    warn_at: float = Field(default=0.75, gt=0.0, le=1.0)
    window: int | None = Field(default=None, ge=1, description="earlier releases counted; None: the whole programme")
    key_retention_days: int = Field(default=730, ge=1, description="how long per-unit key sets are kept for reviews")


class KanonProtection(_Strict):
    """The default protection: a k threshold with complementary suppression and the LP audit."""

    method: Literal["kanon"]


class PrivacyBudget(_Strict):
    """A population's privacy-loss budget over all its releases: epsilon and delta under approximate DP, or
    rho and delta under zCDP (the `accounting` of the protection that spends it)."""

    epsilon: float | None = Field(default=None, gt=0)
    rho: float | None = Field(default=None, gt=0)
    delta: float = Field(gt=0, lt=1)


class DpConfiguration(_Strict):
    """Another way to publish the period under the same loss, compared in the release's frontier."""

    rung: str | None = Field(
        default=None,
        description="a coarser time rung ('period' or a multiple of the policy's bucket, in time.ladder or not); "
        "none: the policy's bucket",
    )
    max_buckets: int = Field(ge=1, description="buckets of that rung a unit contributes to, at most")
    max_areas: int = Field(default=1, ge=1, description="cells a unit contributes to per bucket, at most")


class DpProtection(_Strict):
    """Differential privacy instead of a k threshold (`spatial_release.dp`): each unit keeps at most
    `max_buckets` buckets of the period and `max_areas` areas per bucket (seeded sampling), then one OpenDP
    thresholded measurement selects the keys and adds noise to every published count, margins included."""

    method: Literal["dp"]
    accounting: Literal["approx", "zcdp"] = Field(
        default="approx", description="approx: (epsilon, delta), Laplace noise; zcdp: (rho, delta), Gaussian noise"
    )
    epsilon: float | None = Field(default=None, gt=0, description="privacy loss of one release (approx)")
    rho: float | None = Field(default=None, gt=0, description="privacy loss of one release (zcdp)")
    delta: float = Field(gt=0, lt=1, description="of one release")
    max_buckets: int = Field(ge=1, description="buckets a unit contributes to per period, at most")
    max_areas: int = Field(default=1, ge=1, description="cells a unit contributes to per bucket, at most")
    seed: int | Literal["random"] = Field(
        description="the contribution bounding's sampling: an integer (reproducible; which rows a unit keeps "
        "depends on that unit alone, so the seed may be public) or 'random' (drawn from the OS per release)"
    )
    budget: PrivacyBudget = Field(description="the population's budget over all its releases")
    compare: list[DpConfiguration] = Field(
        default_factory=list,
        description="configurations (time rung, bounds B and C) compared with the policy's at the same loss in "
        "the release's frontier: each is calibrated and run on the data internally; release.json records "
        "their parameters only, the internal manifest their share shown and median error",
    )

    @model_validator(mode="after")
    def _loss_of_the_accounting(self) -> DpProtection:
        spent, other = ("epsilon", "rho") if self.accounting == "approx" else ("rho", "epsilon")
        for block, where in ((self, ""), (self.budget, "budget.")):
            if getattr(block, spent) is None:
                raise ValueError(f"{where}{spent} is required under accounting {self.accounting!r}")
            if getattr(block, other) is not None:
                raise ValueError(f"{where}{other} is not used under accounting {self.accounting!r}; give {spent}")
        if getattr(self, spent) > getattr(self.budget, spent) or self.delta > self.budget.delta:
            raise ValueError(f"one release's ({spent}, delta) exceeds the population's budget")
        return self

    @property
    def loss(self) -> tuple[float, float]:
        """(epsilon or rho, delta) of one release."""
        return (self.epsilon if self.accounting == "approx" else self.rho) or 0.0, self.delta

    @property
    def budget_loss(self) -> tuple[float, float]:
        budget = self.budget
        return (budget.epsilon if self.accounting == "approx" else budget.rho) or 0.0, budget.delta


Protection = Annotated[KanonProtection | DpProtection, Field(discriminator="method")]


class AlertsSpec(_Strict):
    """Who receives this programme's alerts (a blocked release, a review breach), besides the deployment's
    recipients. Addresses and the name of an environment variable only: the webhook URL and the SMTP server
    and credentials are the deployment's (SPATIAL_RELEASE_SMTP_*, SPATIAL_RELEASE_SLACK_WEBHOOK_URL), never
    written in a policy file."""

    email_to: list[Annotated[str, Field(pattern=r"^[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+$")]] = Field(
        default_factory=list, description="e-mail addresses, added to SPATIAL_RELEASE_SMTP_TO"
    )
    slack_webhook_env: str | None = Field(
        default=None,
        pattern=r"^[A-Z][A-Z0-9_]*$",
        description="name of the environment variable holding this programme's Slack incoming-webhook URL "
        "(instead of SPATIAL_RELEASE_SLACK_WEBHOOK_URL); the URL itself is a secret",
    )


class Policy(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    version: int = Field(ge=1)
    unit: Literal["persons", "devices"]
    # the ceiling: no population of units comes near a billion per cell, while a k past 64-bit integers
    # (10**23 was tried) overflowed the counting and blocked with a misleading "no risk estimate"
    k: int = Field(ge=2, le=MAX_K, description="smallest publishable count; the boundary is inclusive (n >= k)")
    measure: Literal["presence", "visitors"] = "presence"
    source: SourceSpec
    geometry: Geometry
    time: TimeSpec
    suppression: SuppressionSpec = SuppressionSpec()
    protection: Protection = KanonProtection(method="kanon")
    risk: RiskSpec | None = None
    alerts: AlertsSpec | None = None
    period: Literal["quarter", "month"] = "quarter"
    first_period: str | None = Field(
        default=None,
        description="the first period of the programme (2018-Q1, or 2018-01 for a monthly programme): its first "
        "partition. Default: the first period whose trace files all exist (source.paths with {month}), else 2018's "
        "first",
    )
    last_period: str | None = Field(
        default=None,
        description="the last period of the programme, when it ends. Default: the last period whose trace files "
        "all exist (source.paths with {month}), else none (every period that is over)",
    )
    population: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="the units this programme draws on; policies that name the same population (e.g. a "
        "quarterly and a monthly programme over the same bikes) share one cumulative risk budget; "
        "default: the policy's own name",
    )
    owners: list[Annotated[str, Field(pattern=r"^(team:[A-Za-z0-9_-]+|[^@\s]+@[^@\s]+\.[^@\s]+)$")]] = Field(
        default_factory=list,
        description="who answers for this programme: e-mail addresses or `team:name` (shown as the owners of "
        "its assets in the Dagster UI)",
    )

    _path: Path | None = PrivateAttr(None)
    _sha256: str = PrivateAttr("")

    @property
    def population_key(self) -> str:
        return self.population or self.name

    @property
    def path(self) -> Path:
        if self._path is None:
            raise PolicyError("this policy was not loaded from a file")
        return self._path

    @property
    def sha256(self) -> str:
        return self._sha256

    @property
    def count_column(self) -> str:
        return f"n_{self.unit}"

    def check_period(self, period: Period) -> None:
        """Refuse a period of the other cadence: a monthly programme publishes months, a quarterly one
        quarters (the command line and the asset graph both ask, so the monthly job refuses a quarterly
        policy)."""
        if period.kind != self.period:
            expected = "a month like 2018-01" if self.period == "month" else "a quarter like 2018-Q1"
            raise PolicyError(
                f"{self._path or self.name}: the policy's release period is a {self.period}; "
                f"give {expected}, not {period.label!r}"
            )

    def resolve(self, relative: str) -> Path:
        """A path named in the policy, relative to the policy file's folder."""
        candidate = Path(relative)
        return candidate if candidate.is_absolute() else (self.path.parent / candidate).resolve()

    @model_validator(mode="after")
    def _periods_of_the_cadence(self) -> Policy:
        bounds = [Period.parse(p) for p in (self.first_period, self.last_period) if p is not None]
        for bound in bounds:
            if bound.kind != self.period:
                raise ValueError(f"first_period and last_period are {self.period}s, like the releases: not {bound.label!r}")
        if len(bounds) == 2 and bounds[1].start < bounds[0].start:
            raise ValueError(f"last_period {self.last_period!r} is before first_period {self.first_period!r}")
        return self

    @model_validator(mode="after")
    def _level_names_unique(self) -> Policy:
        names = self.margin_levels()
        repeated = sorted({n for n in names if names.count(n) > 1} | ({LEAF} & set(names)))
        if repeated:
            raise ValueError(f"geometry level names must be unique and not {LEAF!r}: {repeated} repeat")
        return self

    @model_validator(mode="after")
    def _risk_level_exists(self) -> Policy:
        if self.risk and self.risk.zones not in (LEAF, *self.geometry.level_names()):
            raise ValueError(
                f"risk.zones {self.risk.zones!r} is not {LEAF!r} nor a level of the main geometry "
                f"{self.geometry.level_names()}"
            )
        return self

    @model_validator(mode="after")
    def _dp_publishes_what_it_bounds(self) -> Policy:
        """The DP method counts the main geometry's membership (at the policy's bucket and at every rung of its
        time ladder): a linked zoning (its own membership) or structural zeros (a published 0 for a listed
        cell) have no DP mechanism here yet."""
        if not isinstance(self.protection, DpProtection):
            return self
        if self.geometry.linked:
            raise ValueError("protection.method 'dp' does not publish linked zonings; remove geometry.linked")
        if self.suppression.zeros:
            raise ValueError("protection.method 'dp' publishes no structural zeros; remove suppression.zeros")
        for i, configuration in enumerate(self.protection.compare):
            rung = configuration.rung
            if rung is None or rung == PERIOD_RUNG:
                continue
            if not BUCKET_PATTERN.match(rung) or bucket_hours(rung) % bucket_hours(self.time.bucket):
                raise ValueError(
                    f"protection.compare[{i}].rung {rung!r} is neither {PERIOD_RUNG!r} nor a multiple of the "
                    f"policy's bucket {self.time.bucket!r}; leave it out for the policy's bucket"
                )
        return self

    def margin_levels(self) -> list[str]:
        """Every margin level, in release order: main parents, each linked zoning's levels, then the total."""
        linked = [name for zoning in self.geometry.linked for name in zoning.level_names()]
        return [*self.geometry.level_names(), *linked, TOTAL]
