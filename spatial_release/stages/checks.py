"""The guarantees and input checks over a work area: each reads the candidate files (verified against the
manifest) and the true counts, and re-derives its verdict with `spatial_release.guarantees`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from spatial_release import guarantees, tasks
from spatial_release.errors import Blocked
from spatial_release.fileio import atomic_path, scratch_folder, sha256_file
from spatial_release.history import expired, population_releases, population_releases_before
from spatial_release.ledger import ReleaseEntry
from spatial_release.memory import collector_paused
from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.progress import Progress, silent
from spatial_release.release import AuditVerdict, ReleaseInputs, ReleaseRecord, read_tables
from spatial_release.risk import BLOCK, keysets
from spatial_release.stages import dp as dp_stage
from spatial_release.stages import reuse
from spatial_release.stages.carried import WORK_FILES_CHECK, own_earlier_releases, work_files_outcome
from spatial_release.stages.context import Published, ReleaseContext, WorkArea
from spatial_release.stages.count import measure_coverage, read_true_counts, sql_path
from spatial_release.stages.protect import certificate_dir, certificate_inputs
from spatial_release.stages.results import CountsSummary, IngestSummary, ProtectionManifest, RiskAssessment
from spatial_release.suppression.certificate import Certificate, Verification
from spatial_release.suppression.existence import ExistenceResult, figures_at_lower_bound_one
from spatial_release.suppression.release_system import (
    DisclosureSpec,
    audit_published,
    certify_published,
    structure_digest,
)
from spatial_release.suppression.table import Table
from spatial_release.suppression.utility import leaf_shown
from spatial_release.suppression.verdicts import AuditResult, AuditSummary, CertificateSummary
from spatial_release.traces.files import resolve_trace_paths

CheckOutcome = guarantees.CheckOutcome


class CandidateChanged(Blocked, RuntimeError):
    """The candidate files differ from the ones that were checked; nothing is published."""


class ReleaseTampered(Blocked, RuntimeError):
    """A release file does not match the hash its release.json records."""


class GuaranteeFailed(Blocked, RuntimeError):
    """A guarantee or the risk gate failed when publication re-evaluated it; `outcome` names the offending rows."""

    def __init__(self, outcome: CheckOutcome):
        super().__init__(f"{outcome.name} failed: {outcome.summary}")
        self.outcome = outcome


def verify_release_files(folder: Path) -> ReleaseRecord:
    """The record of a published release folder, after checking each file against the hash it records."""
    record = ReleaseRecord.read(folder)
    for name, digest in record.files.items():
        if sha256_file(folder / name) != digest:
            raise ReleaseTampered(f"{folder / name}: sha256 differs from release.json; the file was altered")
    return record


def _verify_manifest(area: WorkArea) -> None:
    """CandidateChanged unless the candidate files are the ones the protection step wrote."""
    for name, digest in ProtectionManifest.read(area.candidate).sha256.items():
        if sha256_file(area.candidate / name) != digest:
            raise CandidateChanged(f"{area.candidate / name} changed after it was written; re-run the release")


def _release_frames(area: WorkArea) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The candidate tables, after checking them against the manifest written with them."""
    _verify_manifest(area)
    tables = read_tables(area.candidate, geometry=False)
    return tables.cells, tables.margins


def check_rejected_share(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    summary = IngestSummary.read(ctx.area.ingest)
    problem = summary.rejected_share_problem
    return CheckOutcome(
        "rejected_share",
        problem is None,
        problem or f"{summary.pings_rejected} of {summary.pings_read} pings quarantined",
        figures={
            "rejected_share": round(summary.rejected_share, 6),
            "limit": summary.max_rejected_share,
            "rejected_by_reason": summary.rejected_by_reason,
        },
    )


def check_outside_share(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    """Blocks a release whose valid pings fall outside the geometry beyond the policy's ceiling: a month of
    swapped coordinates would otherwise go missing from the release without a word."""
    measured = measure_coverage(ctx)
    problem = measured.problem()
    text = problem or (
        f"{measured.pings_outside:,} of {measured.pings_valid:,} valid pings "
        f"({measured.share:.2%}) outside the geometry, within the limit of {measured.limit:.2%}"
    )
    return CheckOutcome(
        "outside_share",
        problem is None,
        text,
        figures={
            "outside_share": round(measured.share, 6),
            "limit": measured.limit,
            "pings_outside": measured.pings_outside,
        },
    )


def check_k_floor(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    cells, margins = _release_frames(ctx.area)
    true_cells, true_margins = read_true_counts(ctx.area)
    return guarantees.check_k_floor(
        cells, margins, true_cells, true_margins, ctx.policy.k, ctx.zeros, ctx.policy.count_column
    )


def check_structural_zeros(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    true_cells, _ = read_true_counts(ctx.area)
    return guarantees.check_structural_zeros(true_cells, ctx.zeros)


def check_withheld_absent(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    cells, margins = _release_frames(ctx.area)
    true_cells, true_margins = read_true_counts(ctx.area)
    return guarantees.check_withheld_absent(
        cells, margins, true_cells, true_margins, ctx.policy.k, ctx.zeros, ctx.policy.count_column
    )


def distinct_units(pings: Path) -> list[str]:
    """Every unit id as text, read by DuckDB so that hundreds of millions of pings never sit in pandas; within
    the risk step's DuckDB memory limit (DuckDB's default is 80 % of the machine), spilling to a private
    scratch folder. Not in the work area: the checks run beside the steps that hold its lock and sweep it."""
    with scratch_folder(None, "distinct-units") as spill:
        con = keysets.connect(spill)
        try:
            query = f"SELECT DISTINCT CAST(unit AS VARCHAR) FROM read_parquet('{sql_path(pings)}')"
            rows = con.execute(query).fetchall()
        finally:
            con.close()
    return [r[0] for r in rows]


def unit_ids(ctx: ReleaseContext) -> frozenset[str]:
    """The unit ids of the release's validated pings (none before ingest), read once per context and pings
    file: publication scans the tables and then the staged report with them. Keyed by the file's size and
    modification time, so a re-ingest in the same context is read afresh."""
    pings = ctx.area.ingest / "pings.parquet"
    if not pings.exists():
        return frozenset()
    stat = pings.stat()
    key = f"unit_ids:{stat.st_size}:{stat.st_mtime_ns}"
    return ctx.cached(key, lambda: frozenset(distinct_units(pings)))


def never_quoted(ctx: ReleaseContext, traces: Sequence[str | Path] = ()) -> tuple[set[str], list[str]]:
    """What an alert about this release must never quote: the unit ids its ingest saw (none before ingest)
    and its trace files (from the ingest, else as the policy and `traces` name them)."""
    ids = set(unit_ids(ctx))
    summary = ctx.area.ingest / IngestSummary.FILE
    if summary.exists():
        return ids, list(IngestSummary.read(ctx.area.ingest).files)
    try:
        return ids, [str(p) for p in resolve_trace_paths(ctx.policy, traces, ctx.period)]
    except (OSError, ValueError):  # unresolvable patterns: the alert says so in the policy's own words
        return ids, []


def release_inputs(ctx: ReleaseContext) -> ReleaseInputs:
    """The inputs block of the release record: the ingest's and the counting's exact figures under
    k-anonymity; under differential privacy none of them (`ReleaseInputs.withheld_under_dp` says why)."""
    if ctx.policy.protection.method == "dp":
        return ReleaseInputs.withheld_under_dp()
    return ReleaseInputs.of(IngestSummary.read(ctx.area.ingest), CountsSummary.read(ctx.area.counts))


def check_no_identifiers(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    """No input column that identifies (or is a quasi-identifier) in the release files or as a key of the
    release record, and no unit id value in the files."""
    policy, area = ctx.policy, ctx.area
    cells, margins = _release_frames(area)
    ingest = IngestSummary.read(area.ingest)
    record_keys = ReleaseRecord.key_names(
        policy, list(ingest.rejected_by_reason), list(ProtectionManifest.read(area.candidate).sha256)
    )
    inputs = release_inputs(ctx)
    return guarantees.check_no_identifiers(
        {"cells.parquet": cells, "margins.parquet": margins},
        record_keys,
        policy.source.protected_columns(),
        ingest.input_columns,
        unit_ids(ctx),
        policy.count_column,
        texts={"release.json (input)": guarantees.record_texts(inputs.to_json())},
    )


def related_releases(
    policy: Policy, period: Period, published: Published, inputs: Sequence[str] = ()
) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """Published (cells, margins) of the releases whose periods overlap this one: of the datasets in
    `suppression.audit_with`, and of every programme of the policy's population, whatever `audit_with` says
    (two programmes over the same units must agree figure by figure: a key published twice with two values is
    an audit failure). `inputs`: the release's input file digests (the population is keyed on the data too)."""

    entries = [e for dataset in policy.suppression.audit_with for e in published.ledger.releases(dataset)]
    entries += population_releases(policy, published.ledger, inputs)
    frames, seen = [], set()
    for entry in entries:
        key = entry.key
        if key in seen or key == (policy.name, period.label):
            continue
        seen.add(key)
        other = Period.parse(entry.period)
        if other.start < period.end and period.start < other.end:
            folder = published.releases_root / entry.dataset / entry.period
            verify_release_files(folder)
            tables = read_tables(folder, geometry=False)
            count_column = next(c for c in tables.margins.columns if c.startswith("n_"))
            if count_column != policy.count_column:
                raise ValueError(f"{folder}: counts {count_column}, this policy counts {policy.count_column}")
            frames.append((tables.cells, tables.margins))
    return frames


@collector_paused()
def check_suppression_audit(
    ctx: ReleaseContext,
    options: dict | None = None,
    earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]] = (),
    release: Path | None = None,
    published: Published | None = None,
    progress: Progress = silent,
    keep_intervals: bool = True,
) -> CheckOutcome:
    """The attacker LP over the candidate files (or a published release folder): withheld figures are
    those absent from the files, and from the overlapping releases of the datasets in
    `suppression.audit_with` when `published` says where they are. Writes the per-primary intervals to
    the work area (internal only).

    On the candidate, the protection step's audit certificate is verified instead of solving again
    (`suppression.certificate`: input hashes, witness points checked exactly against the published
    system); only the components it cannot certify are solved, and a missing or unreadable certificate
    means solving everything. A published `release` folder (`spatial-release audit`) or explicit solver
    `options` always solve from scratch, independently of any certificate. `keep_intervals` False: the
    intervals are not written (a release past its key retention, whose per-unit artefacts were deleted)."""
    policy, area = ctx.policy, ctx.area
    if policy.suppression.audit_with and published is None:
        raise ValueError(f"{policy.path}: suppression.audit_with needs the published releases and ledger")
    if published is not None:
        earlier = [*earlier, *related_releases(policy, ctx.period, published, ctx.input_digests())]
    true_cells, true_margins = read_true_counts(area)
    digest = None
    if release is None and options is None:
        digest = audit_digest(ctx, earlier, true_cells, true_margins)
        reused = reused_audit_verdict(ctx, digest)
        if reused is not None:
            _verify_manifest(area)  # as on the verifying path: an edited candidate is refused, not judged
            return reused
    cells, margins = _audited_files(area, release)
    spec = ctx.disclosure if options is None else replace(ctx.disclosure, solver_options=options)
    beside: list[tasks.OwnProcess[ExistenceResult]] = []

    def start_existence(table: Table) -> None:
        # The existence pass beside the certificate's verification, in a process of its own: both are mostly
        # Python (the pass's LP models are built one by one), so in a thread they took turns on the interpreter
        # lock and the check ran as long as both together (10 M pings: 9.7 s for the pass beside 4.4 s of
        # verification). Started from this thread: a script's (its only thread) forks, with the system as it
        # is; a Dagster run's sends it in its compact pickled state. The same function on the same system.
        beside.append(
            tasks.start_in_own_process(
                figures_at_lower_bound_one, table, spec.k, dict(spec.solver_options), name="existence"
            )
        )

    try:
        run = _solve_or_certify(
            ctx,
            spec,
            (true_cells, true_margins),
            (cells, margins),
            earlier,
            certify=release is None and options is None,
            progress=progress,
            built=start_existence,
        )
        if keep_intervals:
            _write_intervals(area, run)
        existence = (
            beside[0].result() if beside else figures_at_lower_bound_one(run.table, spec.k, dict(spec.solver_options))
        )
    finally:
        for running in beside:  # ended at once when the verification failed: its verdict is no longer wanted
            running.close()
    outcome, summary = _audit_outcome(area, run, existence)
    summary.write(area.root)
    if digest is not None and outcome.passed:
        save_audit_verdict(ctx, digest, outcome)
    return outcome


@dataclass(frozen=True)
class _AuditRun:
    """One audit of a release's files: its result, the system it solved and how it was reached."""

    result: AuditResult
    table: Table
    method: str  # "certificate", "solved" or "solved (no usable certificate)"
    verification: Verification | None


def _audited_files(area: WorkArea, release: Path | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The candidate's files, or a published release folder's once its files match its record."""
    if release is None:
        return _release_frames(area)
    verify_release_files(release)
    tables = read_tables(release, geometry=False)
    return tables.cells, tables.margins


def _solve_or_certify(
    ctx: ReleaseContext,
    spec: DisclosureSpec,
    truth: tuple[pd.DataFrame, pd.DataFrame],
    files: tuple[pd.DataFrame, pd.DataFrame],
    earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]],
    certify: bool,
    progress: Progress,
    built: Callable[[Table], None] | None = None,
) -> _AuditRun:
    """Verify the protection step's certificate and solve what it cannot certify (`certify`), else solve
    everything; a missing or unreadable certificate means solving everything. `built`: given the system once
    it is built, on the certificate's path only (solving everything keeps both cores busy itself)."""
    certificate, method = None, "solved"
    if certify:
        try:
            certificate = Certificate.read(certificate_dir(ctx.area))
        except ValueError:
            method = "solved (no usable certificate)"
    if certificate is None:
        result, table = audit_published(*truth, *files, spec, earlier, progress)
        return _AuditRun(result, table, method, None)
    result, table, verification = certify_published(
        *truth, *files, spec, certificate, certificate_inputs(ctx, earlier), earlier, progress, built=built
    )
    return _AuditRun(result, table, "certificate", verification)


def _write_intervals(area: WorkArea, run: _AuditRun) -> None:
    """The per-primary intervals (true value, attacker's bounds): internal, in the owner-only work area."""
    found = run.result.intervals
    intervals = run.table.keys_frame([i.node for i in found]).assign(
        value=[i.value for i in found],
        attacker_lo=[i.lo for i in found],
        attacker_up=[i.up for i in found],
        passed=[i.passed for i in found],
        integer_solve=[i.exact_integer for i in found],
    )
    with atomic_path(area.root / "audit_intervals.internal.parquet") as tmp:
        intervals.to_parquet(tmp, index=False)


def _place_of(row: dict) -> str:
    """An offending row as words: its place and what fails (an alert drops a row quoted as a dict)."""
    if "error" in row:
        return str(row["error"])
    where = row.get("cell_id") or f"{row.get('level')} {row.get('area_id')}"
    return f"{where} at {row.get('bucket_start') or row.get('bucket')} ({row.get('failing')})"


def _audit_outcome(area: WorkArea, run: _AuditRun, existence: ExistenceResult) -> tuple[CheckOutcome, AuditSummary]:
    """The check's outcome (public: verdict, shares, offending cells named) and the internal summary. It fails
    on a primary the attacker recovers or shows below k, and on a withheld figure (primary or complement) that
    the published figures prove to hold someone with a lower bound of exactly 1: removing one unit could take
    that proof away, which is a membership test (`suppression.existence`)."""
    result, verification = run.result, run.verification
    # Offending rows name the cell and what fails; the true value and the attacker's interval are
    # per-unit facts that stay in the internal intervals file (never in a log or Dagster metadata).
    offending = [{**run.table.key(i.node), "failing": i.failing} for i in result.failures()[:20]]
    offending += [{**c, "failing": "published with two values"} for c in result.conflicts[:20]]
    offending += [{"error": e} for e in result.errors[:20] if not e.startswith("releases contradict")]
    offending += [{**run.table.key(n), "failing": PROVEN_PRESENT} for n in existence.at_one[:20]]
    offending += [{"error": e} for e in existence.errors[:20]]
    passed = result.passed and not existence.at_one and not existence.errors
    summary = replace(
        result.summary(),
        passed=passed,
        at_lower_bound_one=len(existence.at_one),
        existence_errors=existence.errors[:20],
        existence_lps=existence.lps + existence.mips,
    )
    figures: dict[str, str | float] = {"verified_by": run.method}
    how = "solved with the attacker LP"
    if verification is not None:
        # counts of components are facts about withheld figures: internal; shares are public
        certified, again = len(verification.certified), len(verification.unverified)
        reasons = sorted(set(verification.unverified.values()))
        summary = replace(
            summary,
            certificate=CertificateSummary(
                certified_components=certified,
                re_solved_components=again,
                rejected=verification.rejected,
                invalid_points=verification.invalid_points,
                re_solved_because=reasons[:5],
            ),
        )
        share = certified / (certified + again) if certified + again else 1.0
        figures.update(certified_share=round(share, 4), re_solved_share=round(1 - share, 4))
        how = (
            f"verified from the protection step's certificate ({share:.0%} certified, {1 - share:.0%} "
            f"re-solved{': ' + reasons[0] if reasons else ''})"
        )
    text = (
        f"every withheld primary is protected and no withheld figure is proven to hold someone by a lower bound "
        f"of exactly 1; {how}"
        if passed
        else f"{summary.failures} primaries recoverable or shown below k, {len(existence.at_one)} withheld "
        f"figures {PROVEN_PRESENT}, {len(result.errors) + len(existence.errors)} audit errors ({how}); first: "
        f"{_place_of(offending[0]) if offending else None}; intervals in "
        f"{area.root / 'audit_intervals.internal.parquet'}"
    )
    verdict = AuditVerdict(summary.passed, summary.criterion, summary.solver)
    return CheckOutcome("suppression_audit", passed, text, offending, {**verdict.to_json(), **figures}), summary


# what the audit says of a withheld figure at lower bound exactly 1 (offending rows, alerts)
PROVEN_PRESENT = "proven to hold someone (lower bound exactly 1): its removal test tells members apart"


AUDIT_VERDICT = "suppression_audit"  # the memo's name of the check's passing verdict, for byte-identical inputs
AUDIT_OUTPUTS = ("audit_intervals.internal.parquet", AuditSummary.FILE)  # what the check writes beside it


def audit_digest(
    ctx: ReleaseContext,
    earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]],
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
) -> str | None:
    """sha256 of everything the candidate's audit verdict depends on (`reuse.digest_of` adds the code): the
    certificate's inputs (true counts, candidate files, policy, disclosure spec, earlier releases), the
    structure as evaluated on these counts (`structure_digest`: the zone files shape it, and no other hash
    covers them) and the certificate's files. None when the code changed on disk since it was imported."""
    folder = certificate_dir(ctx.area)
    certificate = {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}
    return reuse.digest_of(
        {
            "suppression_audit": certificate_inputs(ctx, earlier),
            "structure": structure_digest(ctx.structure, true_cells, true_margins, ctx.zeros),
            "certificate": certificate,
        }
    )


def save_audit_verdict(ctx: ReleaseContext, digest: str, outcome: CheckOutcome) -> None:
    outputs = {name: sha256_file(ctx.area.root / name) for name in AUDIT_OUTPUTS}
    ctx.memo().save(AUDIT_VERDICT, digest, {"summary": outcome.summary, "figures": outcome.figures, "outputs": outputs})


def reused_audit_verdict(ctx: ReleaseContext, digest: str | None) -> CheckOutcome | None:
    """The check's passing verdict when it was reached on byte-identical inputs by the same code and its
    internal outputs are still the ones it wrote; None otherwise (the audit is verified again). The publish
    step re-evaluates every guarantee: this spares it verifying the certificate a second time when nothing
    changed since the check."""
    saved = ctx.memo().load(AUDIT_VERDICT, digest)
    if saved is None:
        return None
    try:
        if any(sha256_file(ctx.area.root / name) != saved["outputs"][name] for name in AUDIT_OUTPUTS):
            return None
        figures = {**saved["figures"], "reused_verdict": True}
        if figures.get("passed") is not True:
            return None
        AuditVerdict.from_json(figures)  # a readable verdict, or the audit is verified again
        return CheckOutcome(
            "suppression_audit",
            True,
            f"{saved['summary']} (the check's verdict, reused: inputs, structure, certificate and code byte-identical)",
            [],
            figures,
        )
    except (OSError, KeyError, TypeError, ValueError):
        return None


def check_suppression_budget(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    """Re-derives the withheld share from the true counts and the published keys: with a time ladder, a cell's
    unit counts are withheld when the release shows them at no rung of that cell (`utility.leaf_shown`)."""
    budget = ctx.policy.suppression.budget
    cells, margins = _release_frames(ctx.area)
    true_cells, _ = read_true_counts(ctx.area)
    # Buckets cut by the period's edges (a week across the end of the quarter) are never publishable, so they
    # are no part of what protection withholds; the summary says how many there are (public structure).
    cut = ctx.structure.cut
    true_cells = true_cells[~pd.to_datetime(true_cells["bucket_start"], utc=True).isin(pd.DatetimeIndex(cut))]
    links = ctx.structure.time_links if ctx.policy.time.ladder else ()
    withheld = ~leaf_shown(true_cells, cells, margins, links)
    outcome = guarantees.check_suppression_budget(
        int(true_cells.loc[withheld, "n"].sum()), int(true_cells["n"].sum()), budget
    )
    cut_note = (
        f"; {len(cut)} {ctx.policy.time.bucket} bucket(s) cut by the period's edges are not published and not counted here"
        if cut
        else ""
    )
    if not outcome.passed:
        return replace(outcome, summary=outcome.summary + cut_note)  # nothing is published: the figures may explain
    # With the published cells, the withheld share would give the withheld total: keep it internal.
    return CheckOutcome(
        outcome.name,
        True,
        f"the unit counts in withheld cells are within the budget of {budget:.0%} (figures in the work area){cut_note}",
        figures={"budget": budget},
    )


def earlier_work_files_outcome(ctx: ReleaseContext, entries: list[ReleaseEntry], now: datetime) -> CheckOutcome:
    """`earlier_work_files` over `entries` (the dataset's earlier releases) at time `now`, for the retention."""
    return work_files_outcome(ctx, entries, lambda e: ctx.policy.risk is None or not expired(ctx.policy, e, now))


def check_earlier_work_files(
    ctx: ReleaseContext, published: Published | None = None, now: datetime | None = None
) -> CheckOutcome:
    """The check `earlier_work_files` (`stages.carried`): every carried file of the dataset's published releases
    (read from the ledger, cross-checked with releases/) matches the sha256 its ledger entry records. Without
    `published` there is no ledger to read, so no earlier release: it passes, saying so."""
    if published is None:
        return CheckOutcome(WORK_FILES_CHECK, True, "no ledger given: no earlier release to compare")
    ledger = published.ledger.with_releases(published.releases_root)
    entries = own_earlier_releases(ctx, population_releases(ctx.policy, ledger, ctx.input_digests()))
    return earlier_work_files_outcome(ctx, entries, now or datetime.now(UTC))


GUARANTEES = (
    check_k_floor,
    check_structural_zeros,
    check_withheld_absent,
    check_no_identifiers,
    check_suppression_audit,
    check_suppression_budget,
    check_earlier_work_files,
)


def check_dp_mechanism(ctx: ReleaseContext, published: Published | None = None) -> guarantees.CheckOutcome:
    """The mechanism the manifest records is the one the policy calls for (re-calibrated here from the policy),
    and OpenDP's privacy map of it at the bounded sensitivity is within the policy's loss."""
    return dp_mechanism_outcome(ctx, ProtectionManifest.read(ctx.area.candidate).summary.privacy or {})


def dp_mechanism_outcome(ctx: ReleaseContext, recorded: dict) -> guarantees.CheckOutcome:
    """`recorded` (a manifest's or a published record's `privacy`) against the mechanism the policy calls for."""
    calibration = dp_stage.policy_calibration(ctx)
    expected = calibration.describe()
    names = ("mechanism", "accounting", "scale", "threshold", "max_buckets", "max_areas", "sensitivity")
    differ = [
        {"parameter": n, "recorded": recorded.get(n), "policy": expected[n]} for n in names if recorded.get(n) != expected[n]
    ]
    spent, delta = calibration.spent()
    budget, budget_delta = dp_stage.dp_params(ctx.policy).loss
    within = spent <= budget * (1 + 1e-9) and delta <= budget_delta
    passed = not differ and within
    summary = (
        f"{expected['mechanism']} at scale {expected['scale']:.4g}, threshold {expected['threshold']}: "
        f"OpenDP's map gives ({spent:.4g}, {delta:.3g}) within the policy's ({budget:.4g}, {budget_delta:.3g})"
        if passed
        else f"the recorded mechanism differs from the policy's or exceeds its loss; first: {(differ or [expected])[0]}"
    )
    return guarantees.CheckOutcome(
        "dp_mechanism", passed, summary, differ, {"spent": [spent, delta], "policy": [budget, budget_delta]}
    )


def check_dp_withheld_absent(ctx: ReleaseContext, published: Published | None = None) -> guarantees.CheckOutcome:
    """Unselected keys are absent: no key outside the data, no figure below the mechanism's threshold (a
    selected key's noisy count clears it, and post-processing only raises), no null, flag or zero."""
    cells, margins = _release_frames(ctx.area)
    true_cells, true_margins = read_true_counts(ctx.area)
    threshold = int((ProtectionManifest.read(ctx.area.candidate).summary.privacy or {}).get("threshold") or 0)
    expected = dp_stage.policy_calibration(ctx).threshold
    return guarantees.check_dp_withheld_absent(
        cells, margins, true_cells, true_margins, max(threshold, expected), ctx.policy.count_column
    )


def check_privacy_budget(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    """Under DP: the population's earlier releases (read from the ledger, keyed on the data too) composed with
    this one stay within the policy's privacy budget; a release that would exceed it is refused."""
    earlier = (
        []
        if published is None
        else population_releases_before(ctx.policy, ctx.period, published.ledger, ctx.input_digests())
    )
    try:
        decision = dp_stage.budget_decision(ctx.policy, earlier)
    except ValueError as exc:
        return CheckOutcome("privacy_budget", False, str(exc))
    name = decision["measure"]
    summary = (
        f"PrivacyBudgetExceeded: {name} {decision['spent_with'][0]:.4g} (delta {decision['spent_with'][1]:.3g}) with "
        f"this release, over the population's budget of {decision['budget'][0]:.4g} (delta {decision['budget'][1]:.3g})"
        if decision["over"]
        else f"{name} {decision['spent_with'][0]:.4g} of {decision['budget'][0]:.4g} spent with this release; "
        f"{decision['left'][0]:.4g} left"
    )
    offending = [{"release": r} for r in decision["releases_before"]] if decision["over"] else []
    return CheckOutcome("privacy_budget", not decision["over"], summary, offending, decision)


def audit_dp_release(ctx: ReleaseContext, folder: Path) -> list[CheckOutcome]:
    """What `spatial-release audit` verifies of a published DP release folder (its files already checked
    against its record): the recorded mechanism against the policy (`dp_mechanism`), unselected keys absent
    from its tables against the true counts (`withheld_absent`), no identifier in its tables, record or
    report (`no_identifiers`), and its inputs block withheld (`input_withheld`). The k-anonymity LP audit
    does not apply: no figure is withheld for being below k, and the mechanism's guarantee replaces it."""
    record = ReleaseRecord.read(folder)
    recorded = record.privacy or {}
    tables = read_tables(folder, geometry=False)
    true_cells, true_margins = read_true_counts(ctx.area)
    threshold = max(int(recorded.get("threshold") or 0), dp_stage.policy_calibration(ctx).threshold)
    withheld = guarantees.check_dp_withheld_absent(
        tables.cells, tables.margins, true_cells, true_margins, threshold, ctx.policy.count_column
    )
    ingest = IngestSummary.read(ctx.area.ingest)
    raw = json.loads((folder / ReleaseRecord.FILE).read_text())
    texts: dict[str, str | list[str]] = {"release.json": guarantees.record_texts(raw)}
    if (folder / "report.html").exists():
        texts["report.html"] = (folder / "report.html").read_text(errors="replace")
    identifiers = guarantees.check_no_identifiers(
        {"cells.parquet": tables.cells, "margins.parquet": tables.margins},
        ReleaseRecord.key_names(ctx.policy, list(ingest.rejected_by_reason), list(record.files)),
        ctx.policy.source.protected_columns(),
        ingest.input_columns,
        unit_ids(ctx),
        ctx.policy.count_column,
        texts=texts,
    )
    return [dp_mechanism_outcome(ctx, recorded), withheld, identifiers, input_withheld(raw.get("input"))]


def input_withheld(inputs: object) -> CheckOutcome:
    """A DP release's inputs block: every figure null, with the reason (`ReleaseInputs.withheld_under_dp`)."""
    expected = ReleaseInputs.withheld_under_dp().to_json()
    given = inputs if isinstance(inputs, dict) else {}
    stated = sorted(k for k, v in given.items() if k != "withheld" and v is not None)
    missing = sorted(set(expected) - set(given) - {"withheld"})
    differ = stated + missing + (["withheld"] if not given.get("withheld") else [])
    return CheckOutcome(
        "input_withheld",
        not differ,
        "the inputs block states no exact figure of the data (null, with the reason)"
        if not differ
        else f"the inputs block states exact figures of the data or lacks its keys: {differ}",
        [{"field": name, "problem": "stated or missing under differential privacy"} for name in differ],
    )


# Under differential privacy the k floor, the suppression audit and budget and the structural zeros (refused by
# the policy) give way to the mechanism's guarantee; these still block.
DP_GUARANTEES = (
    check_dp_withheld_absent,
    check_no_identifiers,
    check_dp_mechanism,
    check_privacy_budget,
)

# The input checks block before counting and protection in the asset graph; publication re-evaluates them.
INPUT_CHECKS = (check_rejected_share, check_outside_share)


def guarantees_of(policy: Policy) -> tuple:
    """The publication guarantees of the policy's protection method."""
    return DP_GUARANTEES if policy.protection.method == "dp" else GUARANTEES


def run_guarantees(ctx: ReleaseContext, published: Published | None = None) -> list[CheckOutcome]:
    """Every input check and publication guarantee; `published` (ignored by the checks that look only at
    the candidate) lets the audit see related datasets' releases."""
    return [check(ctx, published=published) for check in (*INPUT_CHECKS, *guarantees_of(ctx.policy))]


def check_risk_budget(ctx: ReleaseContext, published: Published | None = None) -> CheckOutcome:
    """The gate's decision of the risk stage: a block fails; the worst zone's figures are the offending row."""
    risk = RiskAssessment.read(ctx.area.risk)
    figures = {
        "status": risk.status,
        "worst_zone": risk.worst_zone,
        "release_figure": risk.release_figure,
        "pooled": risk.pooled,
        "cumulative": risk.cumulative,
        "headroom": risk.headroom,
        "measure": risk.measure,
        "adversary": risk.adversary,
        "model": risk.model,
        "upper_bound": risk.upper_bound,
        "upper_bound_zone": risk.upper_bound_zone,
    }
    reason = risk.reason if not risk.warning else f"{risk.reason}. Warning: {risk.warning}"
    # The offending row names the zone and its gated figure only: a zone's unit count, or an exact share of
    # its units (227/228), is not a published figure (a ladder withholds `cell@period` of that zone).
    offending = [{"zone": risk.worst_zone, risk.measure: risk.release_figure}] if risk.worst_zone else []
    return CheckOutcome("risk_budget", risk.status != BLOCK, reason, offending, figures)
