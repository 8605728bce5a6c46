"""Progress messages of long steps (ingest, counting, audit).

Domain code takes a `progress` callable so a notebook, the command line and Dagster each show it their own
way: by default messages go to the `spatial_release` logger (the CLI prints that logger on stderr); Dagster
assets pass `context.log.info`, so the messages appear in the run's event log.
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
