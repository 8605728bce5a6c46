"""Progress messages of long steps (ingest, counting, audit).

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

logger = logging.getLogger("spatial_release")


def log_progress(message: str) -> None:
    logger.info(message)


def silent(_: str) -> None:
    pass
