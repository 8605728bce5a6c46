"""Whether a period is published as the ledger records it: its release entry, and the release folder holding
release.json (naming that entry) and every file the entry lists, each with the sha256 it records.

The Dagster UI offers "Report materialization events" on a programme's published_release (Dagster cannot
disable that menu item): an operator can mark a period materialised without any release or ledger entry.
The check `published_by_the_publish_job` on published_release reads this function, and the publication
guard sensor (defs.alerts) tells a publication from such a report. Outcomes name the dataset, the period,
the ledger entry and the files, never a figure of the release.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from spatial_release.errors import Blocked
from spatial_release.fileio import sha256_file
from spatial_release.guarantees import CheckOutcome
from spatial_release.ledger import Ledger, ReleaseEntry, find_release
from spatial_release.ledger.crosscheck import record_hash
from spatial_release.period import Period
from spatial_release.policy import Policy
from spatial_release.release import ReleaseRecord, release_dir

PUBLICATION_CHECK = "published_by_the_publish_job"


def _record(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / ReleaseRecord.FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _folder_problem(folder: Path, entry: ReleaseEntry) -> str | None:
    """What keeps `folder` from being the release `entry` records, or None: release.json naming the entry
    (and equal to the record the entry signed, when the entry holds its hash), and every file the entry
    lists with the sha256 it records (an older entry without file hashes: the files release.json lists)."""
    where = f"ledger entry {entry.seq}"
    if not folder.is_dir():
        return f"{where} records it but its release folder {folder} does not exist"
    record = _record(folder)
    if record is None:
        return f"{where} records it but {folder / ReleaseRecord.FILE} is missing or unreadable"
    if record.get("ledger_entry") != entry.hash:
        return f"{folder / ReleaseRecord.FILE} does not name {where}"
    if entry.record_sha256 is not None and record_hash(record) != entry.record_sha256:
        return f"{folder / ReleaseRecord.FILE} differs from the record {where} signed"
    listed = record.get("files") if entry.files is None else entry.files
    for name, digest in sorted(dict(listed or {}).items()):
        path = folder / name
        if not path.is_file():
            return f"{path}, named by {where}, is missing"
        if entry.files is not None and sha256_file(path) != digest:
            return f"{path} does not match the sha256 {where} records"
    return None


@dataclass(frozen=True)
class Publication:
    """What the ledger and the release folder say of one (dataset, period): the check's outcome, the ledger
    entry that records the release (its seq; None when none does), and whether the ledger could be read."""

    outcome: CheckOutcome
    entry: int | None
    ledger_read: bool = True


def _publication(policy: Policy, period: Period, ledger: Ledger, folder: Path) -> Publication:
    name = f"{policy.name} {period.label}"
    facts: dict = {"dataset": policy.name, "period": period.label, "release_dir": str(folder)}
    entry = find_release(ledger.read(), policy.name, period.label)
    if entry is None:
        if folder.exists():
            summary = f"{name} is not published: {folder} exists but the ledger records no release of it"
        else:
            summary = f"{name} is not published: the ledger records no release of it and {folder} does not exist"
        return Publication(CheckOutcome(PUBLICATION_CHECK, False, summary, figures=facts), None)
    facts["ledger_entry"] = entry.hash  # as the materialisation names it (the seq is in the summary)
    problem = _folder_problem(folder, entry)
    if problem is not None:
        return Publication(CheckOutcome(PUBLICATION_CHECK, False, f"{name}: {problem}", figures=facts), entry.seq)
    files = ", ".join(sorted(entry.files)) if entry.files is not None else "the files release.json lists"
    summary = f"{name} is published: ledger entry {entry.seq} records it and {folder} holds its release.json and {files}" + (
        ", each with the sha256 the entry records" if entry.files is not None else ""
    )
    return Publication(CheckOutcome(PUBLICATION_CHECK, True, summary, figures=facts), entry.seq)


def publication(policy: Policy, period: Period, releases_root: Path, ledger: Ledger) -> Publication:
    """Whether `policy`'s `period` is published (see the module's docstring). Read without the ledger lock;
    a release the ledger records whose folder does not match is read again under the lock before it fails
    (a publication between its ledger append and its folder's rename finishes under that lock). A ledger
    that cannot be read or does not verify fails the check, saying so: no publication can be confirmed."""
    folder = release_dir(releases_root, policy, period)
    try:
        found = _publication(policy, period, ledger, folder)
        if found.entry is not None and not found.outcome.passed:
            with ledger.locked():
                found = _publication(policy, period, ledger, folder)
    except (Blocked, OSError) as exc:
        summary = (
            f"{policy.name} {period.label}: no publication can be confirmed, the ledger at {ledger.folder} cannot "
            f"be read or does not verify: {exc}"
        )
        facts = {"dataset": policy.name, "period": period.label, "release_dir": str(folder)}
        return Publication(CheckOutcome(PUBLICATION_CHECK, False, summary, figures=facts), None, ledger_read=False)
    return found


def check_publication(policy: Policy, period: Period, releases_root: Path, ledger: Ledger) -> CheckOutcome:
    """The outcome of the check `published_by_the_publish_job` (`publication`)."""
    return publication(policy, period, releases_root, ledger).outcome
