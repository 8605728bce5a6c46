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
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Progress = Callable[[str], None]


class ProgressEvent(str):
    """One progress message with its structure: the step it belongs to (`ingest`, `counting`,
    `protection`, `suppression`, `audit`, `risk`, `utility`, `generate`), the share of the step done (0..1) and the
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


# Half the 10 s an operator should wait at most for a word from a step: a step that holds the GIL delays a beat.
HEARTBEAT_S = 5.0


@contextmanager
def heartbeat(progress: Progress, step: str, every: float | None = None) -> Iterator[Progress]:
    """For a step whose work may run for minutes without a message of its own (the risk step at 10 M pings):
    yields a `Progress` that forwards to `progress` and, whenever `every` seconds pass without a message, emits
    `<phase>: still running, N s` from a watcher thread (after the last message, so no two arrive together).

    The phase is what the step is doing now: the step of the last structured message that opened work (the
    protection step's suppression, then its risk assessment of the candidate), from that message's time, and
    `step` itself, from the step's start, before any and after a closing message (`ProgressEvent.done`) of the
    phase. An operator who reads "suppression: still running, 54 s" after "suppression: every block protected
    in 16.7 s" is told something false. The watcher stops when the block ends, whatever ends it. `every`:
    HEARTBEAT_S unless given."""
    every = HEARTBEAT_S if every is None else every
    started = time.monotonic()
    last = [started]
    phase: list = [step, started]
    done = threading.Event()
    lock = threading.Lock()

    def enter_phase(message: str, now: float) -> None:
        event = event_of(message)
        if event is None:
            return
        if event.done:
            if event.step == phase[0]:
                phase[:] = [step, started]
        elif event.step != phase[0]:
            phase[:] = [event.step, now]

    def forward(message: str) -> None:
        with lock:
            last[0] = time.monotonic()
            enter_phase(message, last[0])
            progress(message)

    def watch() -> None:
        while not done.wait(max(0.0, last[0] + every - time.monotonic())):
            with lock:
                if done.is_set() or time.monotonic() - last[0] < every:
                    continue
                name, since = phase
                elapsed = time.monotonic() - since
                progress(ProgressEvent(name, f"{name}: still running, {elapsed:.0f} s", seconds=round(elapsed, 1)))
                last[0] = time.monotonic()

    watcher = threading.Thread(target=watch, name=f"{step}-heartbeat", daemon=True)
    watcher.start()
    try:
        yield forward
    finally:
        done.set()
        watcher.join()
