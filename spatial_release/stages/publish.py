"""The publication stage: the checked candidate, its record and its ledger entry, all or nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

from PIL import Image

from spatial_release import guarantees, report
from spatial_release.ledger import Ledger, ReleaseEntryBody, check_releases, find_release
from spatial_release.ledger.crosscheck import record_hash
from spatial_release.policy import Policy
from spatial_release.release import (
    AuditVerdict,
    ReleaseRecord,
    RiskRecord,
    publish,
    recover_interrupted,
    release_dir,
    staging_dir,
)
from spatial_release.risk import BLOCK
from spatial_release.stages.carried import work_file_digests
from spatial_release.stages.checks import GuaranteeFailed, release_inputs, run_guarantees, unit_ids
from spatial_release.stages.context import Published, ReleaseContext
from spatial_release.stages.lock import AlreadyPublished
from spatial_release.stages.results import IngestSummary, ProtectionManifest
from spatial_release.stages.risk import assess_risk


def draft_record(ctx: ReleaseContext, checks: dict[str, str], audit: AuditVerdict | None, risk: RiskRecord) -> ReleaseRecord:
    """The release record of the candidate, before publication gives it its file hashes and ledger entry."""
    area = ctx.area
    manifest = ProtectionManifest.read(area.candidate)
    if manifest.method is None:
        raise RuntimeError(
            f"{area.candidate / ProtectionManifest.FILE} does not say which method protected the "
            "candidate (written before it was recorded): run the protection step again"
        )
    inputs = release_inputs(ctx)
    return ReleaseRecord.build(
        ctx.policy,
        ctx.period,
        manifest.summary.public_counts(),
        inputs,
        manifest.sha256,
        manifest.summary.crs,
        checks,
        audit,
        risk,
        method=manifest.method,
        privacy=manifest.summary.privacy,
    )


def report_renderer(policy: Policy | None):
    """`publish`'s renderer: report.png and report.html (`report.write_report`) from the staged tables and the
    pending record; `policy` gives the report its zone geometries and risk ceilings."""

    def render(staging: Path, record: dict) -> tuple[str, ...]:
        report.write_report(staging, record, policy)
        return report.REPORT_FILES

    return render


def staged_texts(staging: Path, record: dict) -> dict[str, str | list[str]]:
    """The free text of a staged release: the record's strings, report.html and report.png's text chunks."""
    texts: dict[str, str | list[str]] = {"release.json": guarantees.record_texts(record)}
    html, png = staging / "report.html", staging / "report.png"
    if html.exists():
        texts["report.html"] = html.read_text(errors="replace")
    if png.exists():
        with Image.open(png) as image:
            texts["report.png (metadata)"] = [f"{k} {v}" for k, v in getattr(image, "text", {}).items()]
    return texts


def refuse_unit_ids_in_staged(ctx: ReleaseContext, staging: Path, record: dict) -> None:
    """The last look before the ledger append: no unit id in the record or the report as staged (the
    no_identifiers check ran on the tables before the report existed). A refusal removes the staging."""
    problems = guarantees.ids_in_texts(staged_texts(staging, record), unit_ids(ctx))
    if problems:
        shutil.rmtree(staging, ignore_errors=True)
        raise GuaranteeFailed(
            guarantees.CheckOutcome("no_identifiers", False, f"{len(problems)} problem(s); first: {problems[0]}", problems)
        )


def run_publish(ctx: ReleaseContext, releases_root: Path, ledger: Ledger) -> tuple[Path, ReleaseRecord]:
    """Publish the candidate with its ledger entry. The guarantees and the risk gate are evaluated again
    here, so a release can never be written by a run that skipped the blocking checks (Dagster blocks
    only within one run).

    One ledger lock spans the "already published?" test, the cross-check of releases/ with the ledger,
    the guarantees (the audit reads related datasets' releases from the ledger), the risk assessment that
    reads the earlier releases, and the append: two releases at once are serialised, and the second one's
    cumulative risk includes the first. Interrupted publications are rolled forward or back first."""
    policy, period = ctx.policy, ctx.period
    ledger = ledger.with_releases(releases_root)
    target = release_dir(releases_root, policy, period)
    with ledger.locked():
        entries = ledger.read()
        finished = recover_interrupted(releases_root, entries)
        if find_release(entries, policy.name, period.label) is not None:
            if target in finished:  # a crash after the ledger append, before the rename: now finished
                return target, ReleaseRecord.read(target)
            raise AlreadyPublished(
                f"the ledger already records {policy.name} {period.label} ({target}); releases are immutable"
            )
        check_releases(entries, releases_root)
        outcomes = run_guarantees(ctx, Published(ledger, releases_root))
        for outcome in outcomes:
            if not outcome.passed:
                raise GuaranteeFailed(outcome)
        risk = assess_risk(ctx, ledger)
        if risk.status == BLOCK:
            raise GuaranteeFailed(guarantees.CheckOutcome("risk_budget", False, risk.reason))
        audited = [o.figures for o in outcomes if o.name == "suppression_audit"]  # none under DP
        audit = AuditVerdict.from_json(audited[0]) if audited else None
        record = draft_record(ctx, {o.name: "passed" for o in outcomes}, audit, risk.record())

        def register(full_record: dict) -> str:
            refuse_unit_ids_in_staged(ctx, staging_dir(target), full_record)
            body = ReleaseEntryBody(
                dataset=policy.name,
                period=period.label,
                policy=record.policy.to_json(),
                files=ReleaseRecord.from_json(full_record).files,
                risk=risk.record().to_json(),
                population=policy.population_key,
                inputs=tuple(IngestSummary.read(ctx.area.ingest).input_digests or ()),
                record_sha256=record_hash(full_record),
                work_files=work_file_digests(ctx.area),
            )
            entry = ledger.append(body.to_json())
            return entry["hash"]

        publish(ctx.area.candidate, target, record.to_json(), register, report_renderer(policy))
    return target, ReleaseRecord.read(target)
