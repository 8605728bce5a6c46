"""Progress messages of long steps (ingest, counting, audit), as structured events.

Domain code takes a `progress` callable, so each caller decides where the messages go. Dagster assets and
checks pass `context.log.info`: the messages appear in the run's event log and, since the command line runs
the same Dagster job, in its output. Domain functions default to `silent`; the stage functions
(`stages.run_ingest`, `run_counts`, `run_protect`) default to `log_progress`, which logs at INFO on the
`spatial_release` logger. Nothing in this package configures that logger, so a direct caller (a notebook,
a test) sees those messages only after configuring logging itself, e.g.
`logging.basicConfig(level=logging.INFO)`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

Progress = Callable[[str], None]


class ProgressEvent(str):
    """One progress message with its structure: the step it belongs to (`ingest`, `counting`,
    `suppression`, `audit`, `risk`, `utility`, `generate`), the share of the step done (0..1) and the
    seconds since it started when the message says so, and whether it is the step's closing message.

    It *is* its text (a str), so every consumer of messages (Dagster's log, the command line, a notebook's
    print) shows it unchanged, and a `Progress` callable takes it; a consumer that routes or filters
    messages reads these fields, never the wording (`without_closing`)."""

    step: str
    share: float | None
    seconds: float | None
    done: bool

    def __new__(
        cls, step: str, text: str, *, share: float | None = None, seconds: float | None = None, done: bool = False
    ) -> ProgressEvent:
        event = super().__new__(cls, text)
        event.step, event.share, event.seconds, event.done = step, share, seconds, done
        return event

    def __getnewargs_ex__(self) -> tuple[tuple[str, str], dict[str, object]]:
        # so an event crosses a process boundary (a worker's progress) whole
        return (self.step, str(self)), {"share": self.share, "seconds": self.seconds, "done": self.done}


def event_of(message: str) -> ProgressEvent | None:
    """The structure of a message, when it was emitted as an event (None: plain text)."""
    return message if isinstance(message, ProgressEvent) else None


def without_closing(progress: Progress, step: str) -> Progress:
    """`progress` without the closing message of `step`: for a caller whose sub-step (an audit's re-solve
    inside a certified audit) is a part of its own step, whose closing message is the caller's."""

    def forward(message: str) -> None:
        event = event_of(message)
        if event is None or not (event.done and event.step == step):
            progress(message)

    return forward


logger = logging.getLogger("spatial_release")


def log_progress(message: str) -> None:
    logger.info(message)


def silent(_: str) -> None:
    pass
