"""What a release run ended with, as the command line's job runner returns it (no Dagster types)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from spatial_release.errors import ExitCode

if TYPE_CHECKING:
    from spatial_release.release import ReleaseRecord
    from spatial_release.stages.results import ProtectionSummary


@dataclass(frozen=True)
class Failure:
    """One reason a run did not publish: a blocking check that failed, or a step that failed.

    `name` is the check's name or the step's key, `asset` the checked asset (checks only), `offending` the
    rows the check names (cells, zones, files), `exit_code` the kind of the failure (`errors.kind_of`), and
    `traceback` the failed step's stack (printed only with --debug)."""

    kind: Literal["check", "step"]
    name: str
    message: str
    offending: tuple[dict, ...] = ()
    asset: str | None = None
    exit_code: ExitCode = ExitCode.BLOCKED
    traceback: str = field(default="", repr=False)

    def lines(self) -> list[str]:
        if self.kind == "check":
            return [
                f"BLOCKED by check '{self.name}' on '{self.asset}': {self.message}",
                *(f"    offending: {json.dumps(row, default=str)}" for row in self.offending[:10]),
            ]
        return [f"FAILED step '{self.name}': {self.message}"]


@dataclass(frozen=True)
class RunOutcome:
    """A release run: published or not, the release folder, its record (release.json, typed), the
    operator's internal figures (`internal`, from the work area, never published), and every failure that
    stopped it.

    Iterating gives (published, messages, record), for a caller that needs only those."""

    published: bool
    release_dir: Path | None = None
    record: ReleaseRecord | None = None
    failures: tuple[Failure, ...] = ()
    internal: ProtectionSummary | None = field(default=None, repr=False)  # the operator's figures, never published
    alerts: tuple[str, ...] = ()  # the alerts a blocked run delivered (one line each)
    # The trace files in the ingest's order: messages name them by position ("input file 2 of 3", since the
    # Dagster log and alerts travel further than the operator); the command line prints the legend.
    input_files: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        """0 published; else the gravest failure: internal (3) over a user error (2) over blocked (1). A run
        that failed without saying why is internal."""
        if self.published:
            return ExitCode.PUBLISHED
        return max((f.exit_code for f in self.failures), default=ExitCode.INTERNAL)

    @property
    def messages(self) -> list[str]:
        if self.published:
            return [f"published {self.release_dir}"]
        return [line for failure in self.failures for line in failure.lines()] + [f"alert: {line}" for line in self.alerts]

    def __iter__(self) -> Iterator:
        return iter((self.published, self.messages, self.record))
