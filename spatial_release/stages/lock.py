"""Who may write a work area: a published (dataset, period) is never written again, and two runs of one
period never mix their files."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from spatial_release.errors import Blocked
from spatial_release.fileio import folder_lock, remove_stale_temporaries
from spatial_release.ledger import Ledger, find_release
from spatial_release.release import recover_interrupted, release_dir
from spatial_release.stages.context import Published, ReleaseContext


class AlreadyPublished(Blocked, FileExistsError):
    """The (dataset, period) is published: its release folder and its work area are never overwritten."""


class WorkAreaBusy(Blocked, RuntimeError):
    """Another run of the same (dataset, period) owns the work area."""


def refuse_if_published(ctx: ReleaseContext, ledger: Ledger, releases_root: Path) -> None:
    """Raise AlreadyPublished when the ledger records the (dataset, period) or its release folder exists.
    Under the ledger lock, an interrupted publication is finished first (so its re-run is refused, not
    left half done)."""
    policy, period = ctx.policy, ctx.period
    target = release_dir(releases_root, policy, period)
    with ledger.locked():
        entries = ledger.read()
        recover_interrupted(releases_root, entries)
        entry = find_release(entries, policy.name, period.label)
    if entry is not None or target.exists():
        recorded = f"ledger entry {entry.seq}" if entry else "a folder the ledger does not record"
        raise AlreadyPublished(
            f"{policy.name} {period.label} is already published: {target} ({recorded}). "
            "A published release, and the work area its audit reads, are never overwritten"
        )


@contextmanager
def work_area_step(
    ctx: ReleaseContext,
    published: Published | None,
    run_id: str | None,
    starts_run: bool,
    run_is_live: Callable[[str], bool | None] = lambda run_id: None,
) -> Iterator[None]:
    """Hold the work area of one (dataset, period) for one step of a run that writes it.

    Design: Dagster may run each step in its own process, so no lock can span a run. Each step that writes
    the work area instead holds an exclusive flock on `<work>/<dataset>/.<period>.lock` for its whole
    duration, and the lock file names the run that owns the area: the run's first step (ingest) claims
    it, and a later step of another run is refused (WorkAreaBusy), so two runs of one period can never
    mix their files. A later run takes over a claim whose run is not known to be live; a new run is
    refused only when the owner is known to be live (`run_is_live`, from the Dagster instance; an
    ephemeral instance cannot know, so a crashed run never blocks the period for good). With `published`,
    each step first refuses a (dataset, period) the ledger records (AlreadyPublished), so a re-run never
    replaces the counts, key sets or candidate of a published release. Under the lock, temporaries a killed
    step left in the step folders are removed (the root holds the checks' files, written without this lock).
    """
    policy, period, area = ctx.policy, ctx.period, ctx.area
    with folder_lock(area.lock) as handle:
        if published is not None:
            refuse_if_published(ctx, published.ledger, published.releases_root)
        handle.seek(0)
        owner = handle.read().strip()
        if run_id is not None and owner != run_id:
            live = run_is_live(owner) if owner else False
            if (live is True) or (not starts_run and owner and live is not False):
                raise WorkAreaBusy(
                    f"the work area {area.root} belongs to run {owner} of {policy.name} "
                    f"{period.label}{' (still running)' if live else ''}; this run ({run_id}) "
                    "stops so the two never mix their files: re-run the whole job once it ends"
                )
            handle.seek(0)
            handle.truncate()
            handle.write(run_id + "\n")
            handle.flush()
        for folder in (area.traces, area.ingest, area.counts, area.candidate, area.risk):
            remove_stale_temporaries(folder, recursive=True)
        yield
