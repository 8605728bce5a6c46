"""The release pipeline's stages as plain functions over a release context, callable from a notebook.

Each stage reads the previous stage's files from the work area and writes its own, with a typed summary
(`stages.results`) serialised as JSON, so the stages can run as separate Dagster steps (or processes) and be
re-run one at a time. Every stage takes a `ReleaseContext` (policy, period, work area and what follows from
them, loaded once):

    ctx = ReleaseContext(load_policy("policies/demo.yaml"), Period.parse("2018-Q1"), Path("work"))
    run_ingest(ctx); run_counts(ctx); run_protect(ctx); run_risk(ctx, ledger)
    run_guarantees(ctx); run_publish(ctx, Path("releases"), ledger)
"""

from spatial_release.release import PublicCounts, ReleaseRecord
from spatial_release.stages.carried import (
    WORK_FILES_CHECK,
    WorkFilesMismatch,
    work_file_digests,
)
from spatial_release.stages.checks import (
    GUARANTEES,
    INPUT_CHECKS,
    CandidateChanged,
    GuaranteeFailed,
    ReleaseTampered,
    audit_dp_release,
    check_dp_mechanism,
    check_dp_withheld_absent,
    check_earlier_work_files,
    check_k_floor,
    check_no_identifiers,
    check_outside_share,
    check_privacy_budget,
    check_rejected_share,
    check_risk_budget,
    check_structural_zeros,
    check_suppression_audit,
    check_suppression_budget,
    check_withheld_absent,
    never_quoted,
    related_releases,
    run_guarantees,
    verify_release_files,
)
from spatial_release.stages.context import (
    PER_UNIT_ARTEFACTS,
    Published,
    ReleaseContext,
    WorkArea,
    ZoneLayers,
    release_structure,
    structural_zeros,
)
from spatial_release.stages.count import (
    count_validated_pings,
    measure_coverage,
    read_counts_summary,
    read_true_counts,
    run_counts,
    zoning_plans,
)
from spatial_release.stages.ingest import read_ingest_summary, run_ingest, synthetic_traces
from spatial_release.stages.keys import key_set_path
from spatial_release.stages.lock import AlreadyPublished, WorkAreaBusy, refuse_if_published, work_area_step
from spatial_release.stages.protect import read_manifest, run_protect
from spatial_release.stages.publication_check import PUBLICATION_CHECK, Publication, check_publication, publication
from spatial_release.stages.publish import run_publish
from spatial_release.stages.results import (
    CountsSummary,
    IngestSummary,
    ProtectionManifest,
    ProtectionSummary,
    Review,
    RiskAssessment,
)
from spatial_release.stages.review import (
    REVIEW_CHECK,
    ReviewRun,
    latest_review,
    programme_outcome,
    prune_per_unit_artefacts,
    review_outcome,
    review_programme,
    review_trigger,
    run_review,
)
from spatial_release.stages.risk import assess_risk, read_risk, run_risk, start_estimate_beside

__all__ = [
    "AlreadyPublished",
    "CandidateChanged",
    "CountsSummary",
    "GUARANTEES",
    "GuaranteeFailed",
    "INPUT_CHECKS",
    "IngestSummary",
    "PER_UNIT_ARTEFACTS",
    "PUBLICATION_CHECK",
    "WORK_FILES_CHECK",
    "WorkFilesMismatch",
    "ProtectionManifest",
    "ProtectionSummary",
    "Publication",
    "PublicCounts",
    "Published",
    "REVIEW_CHECK",
    "ReleaseContext",
    "ReleaseRecord",
    "ReleaseTampered",
    "Review",
    "ReviewRun",
    "RiskAssessment",
    "WorkArea",
    "WorkAreaBusy",
    "ZoneLayers",
    "assess_risk",
    "check_earlier_work_files",
    "audit_dp_release",
    "check_dp_mechanism",
    "check_dp_withheld_absent",
    "check_k_floor",
    "check_no_identifiers",
    "check_outside_share",
    "check_privacy_budget",
    "check_publication",
    "check_rejected_share",
    "check_risk_budget",
    "check_structural_zeros",
    "check_suppression_audit",
    "check_suppression_budget",
    "check_withheld_absent",
    "count_validated_pings",
    "key_set_path",
    "latest_review",
    "measure_coverage",
    "never_quoted",
    "programme_outcome",
    "publication",
    "prune_per_unit_artefacts",
    "read_counts_summary",
    "read_ingest_summary",
    "read_manifest",
    "read_risk",
    "read_true_counts",
    "refuse_if_published",
    "related_releases",
    "release_structure",
    "review_outcome",
    "review_programme",
    "review_trigger",
    "run_counts",
    "run_guarantees",
    "run_ingest",
    "run_protect",
    "run_publish",
    "run_review",
    "run_risk",
    "start_estimate_beside",
    "structural_zeros",
    "synthetic_traces",
    "verify_release_files",
    "work_area_step",
    "work_file_digests",
    "zoning_plans",
]
