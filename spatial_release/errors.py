"""What went wrong, in three kinds, and the exit code each one is on the command line.

- `UserError` (exit 2): the person running the release can fix it: a bad policy file or a file it names, a
  trace file that is missing or not what the policy maps, a period that is malformed, of the wrong cadence
  or outside the release partitions. Nothing has started when one is raised.
- `Blocked` (exit 1): a guarantee, a gate or the ledger refused publication: a failed blocking check, a
  release over its risk budget, a period already published, a work area another run owns, a ledger that
  does not verify (a corrupt or forged ledger is not a usage error: it blocks every release until repaired).
- anything else is internal (exit 3): a bug or an environment failure (a full disk is named as such,
  `is_disk_full`). The command line prints its cause in one line, and the traceback only with `--debug`.

Domain errors subclass one of the two classes (and also a built-in base, e.g. ValueError, so that callers
catching that still work). Errors raised inside a Dagster step reach the command line
only as the class name of their root cause; `kind_of` maps such a name back to its kind.
"""

from __future__ import annotations

import errno
import os
from enum import IntEnum

# "No space left on device": how an OSError of a full disk (ENOSPC) reads, and DuckDB's and Arrow's too
NO_SPACE = os.strerror(errno.ENOSPC)


class ExitCode(IntEnum):
    PUBLISHED = 0
    BLOCKED = 1
    USER_ERROR = 2
    INTERNAL = 3


class UserError(Exception):
    """A mistake the user fixes (policy, input files, period); the message names the file and the field."""

    exit_code = ExitCode.USER_ERROR


class Blocked(Exception):
    """Publication refused by a guarantee, a gate or the ledger; the message names what refused it."""

    exit_code = ExitCode.BLOCKED


class PeriodError(UserError, ValueError):
    """A period label that is malformed, of the wrong cadence for the policy, or not a release partition."""


def _subclasses(cls: type[Exception]) -> set[type[Exception]]:
    found: set[type[Exception]] = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def kind_of(error: BaseException | str) -> ExitCode:
    """The exit code of an exception, or of an exception class name (what a Dagster step failure keeps of
    its root cause). Names resolve against the subclasses imported in this process, which a run executed
    in process has imported; an unknown name is internal."""
    if isinstance(error, BaseException):
        for kind in (Blocked, UserError):
            if isinstance(error, kind):
                return kind.exit_code
        return ExitCode.INTERNAL
    for kind in (Blocked, UserError):
        if error in {cls.__name__ for cls in _subclasses(kind) | {kind}}:
            return kind.exit_code
    return ExitCode.INTERNAL


def is_disk_full(message: str) -> bool:
    """Whether an error's message is a full disk's (ENOSPC): all a Dagster step failure keeps of an OSError
    is its class name and message. A full disk is an environment failure (exit 3) that the next run recovers
    from; it is named as such, never reported as a blocked or withdrawn release."""
    return NO_SPACE.lower() in message.lower()
