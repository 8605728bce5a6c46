"""The files of a published release's work area that later releases and reviews read, held to the sha256
its ledger entry records.

A later release of the dataset reads the key sets of the releases before it in its risk window; a review
re-assesses each published release from its own key sets, memberships, key areas and candidate files; the
audit intervals are the figures the release was gated on. None of them is published, so the cross-check of
releases/ with the ledger never saw them: a key set file with its unit names permuted passed every check
and changed the next release's risk figures. The publish step records their digests in the ledger entry
(`work_file_digests`), and the check `earlier_work_files` compares them before any step reads them.

An entry written before the digests were recorded has nothing to compare with: its files are read as they
are, and the check's summary says which releases those are (refusing them would block every programme
whose ledger predates the digests, with no way to publish again but rewriting its signed history). A file
deleted past the policy's key retention is not a mismatch (the retention deletes the per-unit files on
purpose); one missing within it is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from pathlib import Path, PurePosixPath

from spatial_release.errors import Blocked
from spatial_release.fileio import sha256_file
from spatial_release.guarantees import CheckOutcome
from spatial_release.ledger import ReleaseEntry, release_entries
from spatial_release.stages.context import ReleaseContext, WorkArea

WORK_FILES_CHECK = "earlier_work_files"

UNIT_KEYS = "risk/unit_keys.internal.parquet"  # WorkArea.unit_keys, relative to the work area

# Relative to a work area; each one that exists at publication is recorded.
CARRIED = (
    UNIT_KEYS,  # key sets, coded or as rows: the window's risk, reviews
    "counts/membership.internal.parquet",  # reviews: the release's key sets and its units' zones
    "counts/linked_membership.internal.parquet",  # reviews: the linked zonings' memberships
    "counts/risk_areas.parquet",  # reviews: the areas each key is published in
    "audit_intervals.internal.parquet",  # the per-primary intervals the release was gated on
    "candidate/cells.parquet",  # reviews: the published keys (the release folder holds copies)
    "candidate/margins.parquet",
)


class WorkFilesMismatch(Blocked, RuntimeError):
    """A file of a published release's work area differs from the sha256 its ledger entry records."""


def work_file_digests(area: WorkArea) -> dict[str, str]:
    """sha256 of each carried file the work area holds, by its path in the work area (the ledger entry's
    `work_files`)."""
    return {name: sha256_file(area.root / name) for name in CARRIED if (area.root / name).is_file()}


def _inside(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and name != ""


def work_file_problems(
    area: WorkArea, entry: ReleaseEntry, retained: bool, names: Collection[str] | None = None
) -> list[str]:
    """What differs between `area` and the digests `entry` records (empty for an entry that records none),
    of the files `names` only when given. `retained`: the release is within its key retention, so a recorded
    file must still be there (False: a missing file is left to its reader, which says what it needed)."""
    problems = []
    for name, digest in sorted((entry.work_files or {}).items()):
        if names is not None and name not in names:
            continue
        where = f"{entry.dataset} {entry.period} (ledger entry {entry.seq})"
        if not _inside(name):
            problems.append(f"ledger entry {entry.seq} records a work file outside its work area: {name!r}")
            continue
        path = area.root / name
        if not path.is_file():
            if retained:
                problems.append(f"{path}, recorded by {where}, is missing within its key retention")
        elif sha256_file(path) != digest:
            problems.append(
                f"{path} does not match the sha256 {where} records: edited, truncated or replaced since publication"
            )
    return problems


def own_earlier_releases(ctx: ReleaseContext, entries: Iterable[ReleaseEntry]) -> list[ReleaseEntry]:
    """The dataset's releases other than this period's, whose work areas this release's steps and reviews read."""
    return [e for e in entries if e.dataset == ctx.policy.name and e.period != ctx.period.label]


def work_files_outcome(
    ctx: ReleaseContext, entries: list[ReleaseEntry], retained: Callable[[ReleaseEntry], bool]
) -> CheckOutcome:
    """The check's outcome over `entries` (the dataset's earlier releases); `retained`: whether a release is
    within its key retention (its recorded files must all be there)."""
    problems: list[str] = []
    unrecorded, compared = [], 0
    for entry in entries:
        if entry.work_files is None:
            unrecorded.append(entry.period)
            continue
        problems += work_file_problems(ctx.area_of(entry.period), entry, retained(entry))
        compared += len(entry.work_files)
    facts = {"earlier_releases": len(entries), "files_compared": compared, "recorded_without_digests": unrecorded}
    if problems:
        summary = f"{len(problems)} work file(s) of earlier releases differ from their ledger entries; first: {problems[0]}"
        return CheckOutcome(WORK_FILES_CHECK, False, summary, [{"problem": p} for p in problems], facts)
    summary = f"{compared} work file(s) of {len(entries) - len(unrecorded)} earlier release(s) match their ledger entries"
    if unrecorded:
        summary += (
            f"; {len(unrecorded)} release(s) recorded before the ledger held work-file digests "
            f"({', '.join(unrecorded)}) are read unverified: their entries have nothing to compare with"
        )
    return CheckOutcome(WORK_FILES_CHECK, True, summary, figures=facts)


def refuse_changed_work_files(
    releases: Iterable[tuple[WorkArea, ReleaseEntry]], names: Collection[str] | None = None
) -> None:
    """Raise WorkFilesMismatch, naming the check, when a carried file (of `names` only, when given) of one of
    `releases` (each work area with its ledger entry) differs from its entry: the risk step and the review
    read those files, and would otherwise trust whatever is there. A missing file is left to its reader."""
    problems = [p for area, entry in releases for p in work_file_problems(area, entry, False, names)]
    if problems:
        raise WorkFilesMismatch(
            f"{WORK_FILES_CHECK} failed: {len(problems)} work file(s) of published releases differ from their "
            f"ledger entries; first: {problems[0]}"
        )


def verify_work_folders(entries: list[dict], work_root: Path) -> int:
    """`spatial-release ledger verify --work`: every carried file under `work_root/<dataset>/<period>/` of the
    ledger's release entries (verified entries, as `read_ledger` returns them) against the sha256 its entry
    records; returns how many were compared. A missing file is not compared: the verifier knows no policy,
    so not whether the key retention deleted it. Raises WorkFilesMismatch naming the first that differs."""
    releases = release_entries(entries)
    areas = [(WorkArea(work_root / entry.dataset / entry.period), entry) for entry in releases]
    refuse_changed_work_files(areas)
    return sum((area.root / name).is_file() for area, entry in areas for name in (entry.work_files or {}) if _inside(name))
