"""From a policy's counts to the linear system of its release, and back to published tables.

`system_for` builds the table of every figure the release could show (leaf cells, margins at every level
of every zoning, totals) with its relations; `protect_release` runs primary and complementary suppression
on it; `audit_published` rebuilds the system from the true counts and the keys actually present in the
release files, so the audit never relies on the suppressor's own pattern. Both take the same
`DisclosureSpec`: what the release must guarantee, apart from the counts themselves.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd

from spatial_release.levels import LEAF, at_rung, space_level
from spatial_release.progress import Progress, ProgressEvent, silent, without_closing
from spatial_release.suppression.audit import AuditResult, Criterion, audit
from spatial_release.suppression.certificate import Certificate, Verification, verify
from spatial_release.suppression.complementary import ProtectionLog
from spatial_release.suppression.ladder import (
    UNOFFERED,
    TimeLink,
    add_absent_fine,
    climb_to_budget,
    cut_figures,
    offer_needed,
    relate_time,
)
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.primary import ProtectedTable, structural_zero_rows
from spatial_release.suppression.protection import protect
from spatial_release.suppression.rules import below_k
from spatial_release.suppression.table import (
    EMPTY,
    EQ,
    PRIMARY,
    PUBLISHED,
    REST,
    SECONDARY,
    Chain,
    Relation,
    Table,
    build_table,
)

CELL_KEY = ["cell_id", "bucket_start"]
MARGIN_KEY = ["level", "area_id", "bucket_start"]


@dataclass(frozen=True)
class Structure:
    """What an outsider knows of the release's structure, independent of the counts: every zoning's chain
    (at the policy's bucket and, renamed `<level>@<rung>`, at each rung of the time ladder), the identities
    between totals, and the links between time rungs (`suppression.ladder.TimeLink`)."""

    chains: tuple[Chain, ...]
    identities: tuple[tuple[str, str], ...] = ()  # (level a, level b): the same figure in every bucket
    time_links: tuple[TimeLink, ...] = ()
    # Buckets of the policy's bucket cut by the period's edges (a week across the end of a month): their
    # figures are counted and withheld at no cost, never published under the whole bucket's key.
    cut: tuple[pd.Timestamp, ...] = ()

    def level_depth(self) -> dict[str, int]:
        depth: dict[str, int] = {}
        for chain in self.chains:
            for d, level in enumerate(chain.levels):
                depth.setdefault(level, d)
        return depth

    @property
    def rungs(self) -> tuple[str, ...]:
        """The coarser time rungs of the ladder, finest first (empty without a ladder)."""
        return tuple(link.coarse for link in self.time_links)


@dataclass(frozen=True)
class DisclosureSpec:
    """What a release must guarantee and what an outsider knows of it, apart from the counts: shared by
    `protect_release` (which withholds figures to meet it) and `audit_published` (which checks the files
    against it), so the two can never be called with different rules.

    - `structure`: every zoning's hierarchy and the identities between totals (`Structure`);
    - `k`: the threshold; a count is withheld as a primary when `rules.below_k(n, k)`;
    - `measure`: "presence" (a parent is the sum of its children: EQ relations) or "visitors" (distinct
      units over the parent's areas: max(children) <= parent <= sum(children), UNION relations);
    - `zeros`: the public structural-zero cells, published as 0 in every bucket where they hold no unit;
    - `buckets`: every bucket start of the period (where the structural zeros are published);
    - `count_column`: the count column of the release files (e.g. `n_devices`);
    - `criterion`: the protection levels a withheld primary must reach (default `Criterion(k)`);
    - `solver_options`: HiGHS options for the attacker LPs (e.g. a time limit; default none);
    - `method`: how protection chooses the pattern (default: the release method, `ProtectionMethod`), with what
      a secondary costs (`method.cost`: the policy's suppression.cost). With a time ladder it runs without
      pruning (`protect_release`).
    """

    structure: Structure
    k: int
    measure: str
    zeros: frozenset[str] = frozenset()
    buckets: tuple = ()
    count_column: str = "n"
    criterion: Criterion | None = None
    solver_options: Mapping[str, object] = field(default_factory=dict)
    climb: str = "where_withheld"  # with a time ladder: see `suppression.ladder` and the policy's suppression.climb
    budget: float = 1.0  # the share of the main cells' unit counts that may stay unshown (climb = "to_budget")
    method: ProtectionMethod = ProtectionMethod()

    def __post_init__(self) -> None:
        object.__setattr__(self, "zeros", frozenset(self.zeros))
        object.__setattr__(self, "buckets", tuple(self.buckets))
        if self.criterion is None:
            object.__setattr__(self, "criterion", Criterion(self.k))
        elif self.criterion.k != self.k:
            raise ValueError(f"criterion is for k = {self.criterion.k}, the spec for k = {self.k}")
        if self.measure not in ("presence", "visitors"):
            raise ValueError(f"measure {self.measure!r} is neither 'presence' nor 'visitors'")

    def digest(self) -> str:
        """sha256 of everything in the spec that decides the audit, apart from the structure's functions
        (the policy's own sha256 covers them): k, measure, zeros, buckets, levels, identities, count column,
        criterion and solver options."""
        criterion = self.criterion or Criterion(self.k)
        payload = {
            "k": self.k,
            "measure": self.measure,
            "zeros": sorted(self.zeros),
            "buckets": [str(pd.Timestamp(b)) for b in self.buckets],
            "count_column": self.count_column,
            "levels": [list(c.levels) for c in self.structure.chains],
            "identities": [list(i) for i in self.structure.identities],
            "time_links": [link.digest_payload() for link in self.structure.time_links],
            "criterion": [criterion.k, criterion.range_pct],
            "solver_options": sorted((str(k), str(v)) for k, v in self.solver_options.items()),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def zero_keys(self) -> list[tuple[str, object]]:
        """(cell, bucket) of every listed structural zero in every bucket."""
        return zero_keys(self.zeros, self.buckets)

    def zero_keys_by_level(self) -> dict[str, list[tuple[str, object]]]:
        """The structural zeros' (cell, bucket) keys by leaf level: the policy's bucket (published as 0) and
        each rung of the ladder (empty there too, and known so by anyone who reads the public list)."""
        out = {LEAF: self.zero_keys()}
        for link in self.structure.time_links:
            out[at_rung(LEAF, link.coarse)] = zero_keys(self.zeros, link.coarse_buckets())
        return out


def _leaves(cells: pd.DataFrame) -> pd.DataFrame:
    return cells.rename(columns={"cell_id": "area_id"})[["area_id", "bucket_start", "n"]]


def system_for(true_cells: pd.DataFrame, true_margins: pd.DataFrame, spec: DisclosureSpec) -> Table:
    """The linear system of the release: every figure from the true counts (primaries where below k),
    the relations of every chain and the identities between totals."""
    structure = spec.structure
    zeros = spec.zero_keys_by_level()
    known = {level: {(cell, pd.Timestamp(bucket)) for cell, bucket in keys} for level, keys in zeros.items()}
    table = build_table(
        _leaves(true_cells),
        true_margins,
        structure.chains,
        spec.k,
        spec.measure,
        zeros,
        prepare=lambda t: add_absent_fine(t, structure.time_links, known),
    )
    for level_a, level_b in structure.identities:
        for rung in (None, *structure.rungs):
            a, b = at_rung(level_a, rung), at_rung(level_b, rung)
            for i in range(len(table)):
                if table.level[i] == a:
                    j = table.index.get((b, level_b, table.bucket[i]))
                    if j is None:
                        raise ValueError(f"{b} has no count for bucket {table.bucket[i]} where {a} has one")
                    table.relations.append(Relation(EQ, i, (j,), None, None, a))
    for link in structure.time_links:
        relate_time(table, link)
    return table


def _frame(table: Table, nodes: list[int], leaf: bool) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "level": [table.level[i] for i in nodes],
            "area_id": [table.area[i] for i in nodes],
            "bucket_start": pd.to_datetime([table.bucket[i] for i in nodes], utc=True),
            "n": pd.array([table.value[i] for i in nodes], dtype="int64"),
            "reason": [table.status[i] for i in nodes],
        }
    )
    if leaf:
        frame = frame.drop(columns="level").rename(columns={"area_id": "cell_id"})
        return frame.sort_values(CELL_KEY).reset_index(drop=True)
    return frame.sort_values(MARGIN_KEY).reset_index(drop=True)


def tables_from_status(
    table: Table, zeros: Iterable[str], buckets: Sequence[datetime], true_cells: pd.DataFrame
) -> ProtectedTable:
    real = [i for i in range(len(table)) if table.status[i] not in (REST, UNOFFERED, EMPTY)]
    leaves = [i for i in real if table.level[i] == LEAF]
    margins = [i for i in real if table.level[i] != LEAF]
    published_leaves = [i for i in leaves if table.status[i] == PUBLISHED]
    cells = _frame(table, published_leaves, leaf=True).drop(columns="reason")
    zero_rows = structural_zero_rows(set(zeros), buckets, true_cells)
    if len(zero_rows):
        cells = pd.concat([cells, zero_rows], ignore_index=True).sort_values(CELL_KEY).reset_index(drop=True)
    zeros = frozenset(zeros)
    return ProtectedTable(
        cells=cells,
        margins=_frame(table, [i for i in margins if table.status[i] == PUBLISHED], leaf=False).drop(columns="reason"),
        withheld_cells=_frame(table, [i for i in leaves if table.status[i] != PUBLISHED], leaf=True),
        withheld_margins=_frame(table, [i for i in margins if table.status[i] != PUBLISHED], leaf=False),
        structural_zero_conflicts=int(true_cells["cell_id"].isin(zeros).sum()),
    )


def structure_digest(
    structure: Structure, true_cells: pd.DataFrame, true_margins: pd.DataFrame, zeros: Iterable[str]
) -> str:
    """sha256 of what the structure's functions answer wherever a system over these counts can ask them:
    each chain's `parent_of` of every area the counts hold at a level of the same spatial level (any time
    rung), and of every parent so reached, and `children_count` of every such parent. With the spec's own
    digest (levels, identities, time links, zeros, buckets), equal digests mean the same system for the
    same counts, whatever files the zonings were read from (zones files, their parents' columns)."""
    areas: dict[str, set[str]] = {LEAF: {str(a) for a in pd.unique(true_cells["cell_id"])} | set(zeros)}
    for level, group in true_margins.groupby("level", sort=False)["area_id"]:
        areas.setdefault(space_level(str(level)), set()).update(str(a) for a in pd.unique(group))
    digest = hashlib.sha256()
    for chain in structure.chains:
        current: set[object] = set(areas.get(space_level(chain.levels[0]), ()))
        for depth, (parent_of, count_of) in enumerate(zip(chain.parent_of, chain.children_count)):
            mapping = sorted((area, _answer(parent_of, area)) for area in current)
            current = {parent for _, parent in mapping} | areas.get(space_level(chain.levels[depth + 1]), set())
            counts = sorted((parent, _answer(count_of, parent)) for parent in current)
            digest.update(json.dumps([chain.levels[depth], mapping, counts]).encode())
    return digest.hexdigest()


def _answer(function, area: object) -> object:
    """What a structure function answers for `area`, or the name of the error it raises (a zoning's map
    refuses an area it does not hold): the digest records either, the same way every time."""
    try:
        return function(area)
    except Exception as error:  # noqa: BLE001 - any refusal is an answer the digest must record
        return f"!{type(error).__name__}"


def zero_keys(zeros: Iterable[str], buckets: Sequence[object]) -> list[tuple[str, object]]:
    return [(cell, pd.Timestamp(bucket)) for cell in sorted(zeros) for bucket in buckets]


def absent_listed_zero_floors(table: Table, zeros: Iterable[str], buckets: Sequence[object]) -> dict[int, int]:
    """Lower bound 1 for every withheld leaf that is a listed structural zero in a bucket of the release.

    The zeros list is public and a listed cell that holds no unit is published as 0 in every bucket, so an
    outsider who finds one absent knows it holds at least one unit. (A listed zero published as 0 is a
    known 0: it is no node of the table, and its parent's rest excludes it.) The suppressor does not model
    this: a listed zero that holds units contradicts the list, and that blocks the release on its own
    (guarantees.check_structural_zeros); the audit still sees the gap for what it is."""
    zeros, listed = set(zeros), {pd.Timestamp(bucket) for bucket in buckets}
    return {
        i: 1
        for i in range(len(table))
        if table.area[i] in zeros
        and table.level[i] == LEAF
        and table.status[i] != PUBLISHED
        and pd.Timestamp(table.bucket[i]) in listed
    }


def force_withheld(table: Table, withhold: frozenset[tuple[str, str, int]]) -> list[int]:
    """Mark the figures of `withhold` as withheld at no cost (`UNOFFERED`: never published, a free complement):
    a figure that an earlier release of the population withheld is never published by a later one, so the
    earlier release's audit stays true whatever the later one shows. Returns the figures marked."""
    if not withhold:
        return []
    instants = {bucket: _instant(bucket) for bucket in set(table.bucket)}
    marked = []
    for i in range(len(table)):
        if table.status[i] in (REST, EMPTY, PRIMARY):
            continue
        if (table.level[i], table.area[i], instants[table.bucket[i]]) in withhold:
            table.status[i] = UNOFFERED
            marked.append(i)
    return marked


def protect_release(
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    spec: DisclosureSpec,
    progress: Progress = silent,
    withhold: frozenset[tuple[str, str, int]] = frozenset(),
) -> tuple[ProtectedTable, ProtectionLog, Table]:
    """Primary and complementary suppression of one release.

    `true_cells` (cell_id, bucket_start, n) and `true_margins` (level, area_id, bucket_start, n) are the
    true distinct-unit counts of every non-empty figure; `spec` says what must hold. Every figure below k
    is withheld as a primary; further figures are withheld as secondaries until the attacker's LP
    (Fischetti and Salazar-Gonzalez, "Solving the cell suppression problem on tabular data with linkable
    information", Management Science 47(7), 2001) can neither pin a primary down nor show it below k
    (`protection.protect` with `spec.method`: elimination, then audit-and-repair where each repair withholds
    the published figure binding the failing bound, a greedy reading of their capacity cuts, then pruning).
    Empty cells are free complements (absent anyway); structural zeros are published as 0.

    `withhold`: keys (level, area, bucket as ns since the epoch) that must not be published, whatever their
    count: figures an earlier release of the same population withheld (`force_withheld`). They are withheld
    at no cost, like an empty cell, so they are free complements.

    Returns the protected tables (published and internal withheld frames), the protection log (stage-1
    and repair secondaries, the final audit, the method that ran) and the solved system. Raises `SuppressionError` when the
    table cannot be protected."""
    table = system_for(true_cells, true_margins, spec)
    forced = force_withheld(table, withhold)
    if forced:
        progress(
            ProgressEvent(
                "suppression", "suppression: figures an earlier release of the population withheld are withheld here too"
            )
        )
    links = spec.structure.time_links
    cut = cut_figures(table, links, spec.structure.cut)
    if cut:
        progress(ProgressEvent("suppression", "suppression: the figures of buckets cut by the period's edges are withheld"))
    for i in cut:  # a bucket cut by the period's edge: a free complement, never published
        table.status[i] = UNOFFERED
    forced = sorted(set(forced) | set(cut))

    # With a time ladder the system is one large linked component, where each pruning try is an audit of
    # that whole component (minutes for the first tries on a quarter of Citi Bike, where the protection
    # without pruning takes well under one), so ladders are not pruned.
    method = spec.method if not links else spec.method.with_prune_tries(0)

    def run() -> ProtectionLog:
        return protect(
            table,
            spec.k,
            spec.structure.level_depth(),
            method,
            criterion=spec.criterion,
            options=dict(spec.solver_options),
            progress=progress,
        )

    if not links or spec.climb == "where_withheld":
        table.ladder = {"climb": spec.climb, "offered": offer_needed(table, links, frozenset(forced))} if links else {}
        log = run()
    else:
        log = climb_to_budget(table, links, spec.budget, run, progress, never=frozenset(forced))
    for i in forced:  # withheld like any complement in the internal frames and the summary's withheld counts
        table.status[i] = SECONDARY
    # a structural zero's 0 is shown in every bucket but the cut ones: nothing is published under their keys
    cut_buckets = set(spec.structure.cut)
    shown_buckets = [b for b in spec.buckets if pd.Timestamp(b) not in cut_buckets]
    return tables_from_status(table, spec.zeros, shown_buckets, true_cells), log, table


def published_system(
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    published_cells: pd.DataFrame,
    published_margins: pd.DataFrame,
    spec: DisclosureSpec,
    earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]] = (),
) -> tuple[Table, list[dict[str, str]], list[int]]:
    """The release as an outsider sees it (see `audit_published`): the system, the conflicts between
    releases (the figures published with two values, by level, area and bucket), and the figures known only
    from the `earlier` releases."""
    count_column, k = spec.count_column, spec.k
    table = system_for(true_cells, true_margins, spec)
    known: dict[tuple, int] = {}
    conflicts: list[dict[str, str]] = []

    def learn(key: tuple, value: int) -> None:
        if key in known and known[key] != value:
            # identifiers only: one of the two values is the candidate's, unpublished (it would reach the
            # check's metadata, the run log and the alert)
            conflicts.append(
                {"level": str(key[0]), "area_id": str(key[1]), "bucket_start": pd.Timestamp(key[2], tz="UTC").isoformat()}
            )
        known.setdefault(key, value)

    this_release: set[tuple] = set()
    for n, (cells, margins) in enumerate([(published_cells, published_margins), *earlier]):
        for level, area, bucket, value in _published_keys(cells, margins, count_column):
            learn((level, area, bucket), value)
            if n == 0:
                this_release.add((level, area, bucket))
    # Buckets are compared as instants (ns since the epoch, a naive time read as UTC), each distinct bucket
    # converted once (a few thousand), not once per figure: hashing integers instead of Timestamps
    as_instant = {bucket: _instant(bucket) for bucket in set(table.bucket)}
    from_earlier = []
    for i in range(len(table)):
        if table.status[i] in (REST, EMPTY):
            continue
        key = (table.level[i], table.area[i], as_instant[table.bucket[i]])
        if key in known:
            table.status[i] = PUBLISHED
            table.value[i] = known[key]
            if key not in this_release:
                from_earlier.append(i)
        else:
            table.status[i] = PRIMARY if below_k(table.value[i], k) else SECONDARY
    table.floor.update(absent_listed_zero_floors(table, spec.zeros, spec.buckets))
    return table, conflicts, from_earlier


def _instant(bucket: object) -> int:
    return pd.Timestamp(bucket).value


def _published_keys(cells: pd.DataFrame, margins: pd.DataFrame, count_column: str) -> Iterable[tuple[str, str, int, int]]:
    """(level, area, bucket as an instant (`_instant`), value) of every figure of a release's files."""
    for frame, area, level in ((cells, "cell_id", LEAF), (margins, "area_id", None)):
        if frame.empty:
            continue
        levels = [level] * len(frame) if level else frame["level"].tolist()
        column = frame["bucket_start"]
        if pd.api.types.is_datetime64_any_dtype(column):
            buckets = pd.DatetimeIndex(column).as_unit("ns").asi8.tolist()  # = _instant of each, at once
        else:
            buckets = [_instant(b) for b in column]
        yield from zip(levels, frame[area].tolist(), buckets, (int(v) for v in frame[count_column].tolist()))


def audit_published(
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    published_cells: pd.DataFrame,
    published_margins: pd.DataFrame,
    spec: DisclosureSpec,
    earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]] = (),
    progress: Progress = silent,
    workers: int | None = None,
) -> tuple[AuditResult, Table]:
    """Audit the release as an outsider sees it: a figure is known iff its key is in a release file (this
    one or an `earlier` release of the same period, as (cells, margins) frames whose count column is
    `spec.count_column`), with the value printed there; every other figure is unknown, at least 0, or at
    least 1 for a listed structural zero (see `absent_listed_zero_floors`). True counts only say which
    unknown figures are primaries (`rules.below_k`). The attacker LP is that of Fischetti and
    Salazar-Gonzalez (2001, Management Science), solved per component with HiGHS (`audit.audit`).

    Independent of the suppressor: it never reads the pattern `protect_release` chose, only the files.
    Returns the `AuditResult` (one interval per withheld primary, errors when releases contradict each
    other or a solve fails) and the system it was computed on."""
    table, conflicts, _ = published_system(true_cells, true_margins, published_cells, published_margins, spec, earlier)
    result = audit(table, spec.k, dict(spec.solver_options), criterion=spec.criterion, progress=progress, workers=workers)
    _record_conflicts(result, conflicts)
    return result, table


def _record_conflicts(result: AuditResult, conflicts: list[dict[str, str]]) -> None:
    """Two releases that publish one figure with two values fail the audit; each is an error (the internal
    summary) and a named place (the check's offending rows, the alert)."""
    result.conflicts.extend(conflicts)
    result.errors.extend(
        f"releases contradict each other: {c['level']} {c['area_id']} at {c['bucket_start']} is published with two values"
        for c in conflicts
    )


def certify_published(
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    published_cells: pd.DataFrame,
    published_margins: pd.DataFrame,
    spec: DisclosureSpec,
    certificate: Certificate,
    inputs: Mapping[str, str],
    earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]] = (),
    progress: Progress = silent,
    workers: int | None = None,
    built: Callable[[Table], None] | None = None,
) -> tuple[AuditResult, Table, Verification]:
    """`audit_published`, with the protection step's `certificate` (`suppression.certificate`): the
    published system is built the same way, the certificate is verified against it (witness points and
    input hashes `inputs`, no LP), and only the components it cannot certify are solved. The result holds
    one interval per withheld primary, as `audit_published` would give; the `Verification` says what was
    certified and what was re-solved (and why). `built`: called with the system as soon as it is built,
    before the verification (what else reads it can start beside it; neither changes it)."""
    started = time.perf_counter()
    table, conflicts, from_earlier = published_system(
        true_cells, true_margins, published_cells, published_margins, spec, earlier
    )
    if built is not None:
        built(table)
    verification = verify(table, certificate, inputs, spec.criterion or Criterion(spec.k), from_earlier)
    progress(
        ProgressEvent(
            "audit",
            f"audit: certificate verified in {time.perf_counter() - started:.1f} s",
            seconds=time.perf_counter() - started,
        )
    )
    again = verification.to_resolve()
    if again:  # the re-solve is a part of this audit: its closing message is the one below
        result = audit(
            table,
            spec.k,
            dict(spec.solver_options),
            primaries=again,
            criterion=spec.criterion,
            progress=without_closing(progress, "audit"),
            workers=workers,
        )
        result.errors = [e for e in result.errors if e not in verification.errors]
    else:
        result = AuditResult(k=spec.k, criterion=spec.criterion)
    result.errors[:0] = verification.errors
    result.intervals = sorted([*verification.intervals, *result.intervals], key=lambda i: i.node)
    result.components = len(verification.certified) + len(verification.unverified)
    _record_conflicts(result, conflicts)
    result.seconds = time.perf_counter() - started
    if result.intervals or result.errors:
        share = len(verification.unverified) / max(1, len(verification.certified) + len(verification.unverified))
        progress(
            ProgressEvent(
                "audit",
                f"audit: done in {result.seconds:.1f} s from the certificate ({share:.0%} re-solved), "
                f"{'every withheld primary protected' if result.passed else 'some primaries NOT protected'}",
                share=1.0,
                seconds=result.seconds,
                done=True,
            )
        )
    return result, table, verification


__all__ = [
    "DisclosureSpec",
    "Structure",
    "absent_listed_zero_floors",
    "audit_published",
    "certify_published",
    "protect_release",
    "published_system",
    "structure_digest",
    "system_for",
    "tables_from_status",
]
