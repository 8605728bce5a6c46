"""Reading a configuration file (a policy, a landscape, the lists and tables they name): bounded reads of
regular files only, and YAML through the strict loader. Below every package that reads such files, so that
the policy (which checks the files it names when it loads) and the risk stage (which reads the landscape
again) both read through here and neither imports the other's reader."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from spatial_release.configfile.strict_yaml import StrictLoader, YamlRefused
from spatial_release.errors import UserError

# A policy or landscape is a page of reviewed YAML; far past any real one, and small enough to hold in memory.
MAX_CONFIG_BYTES = 4 * 2**20
# A structural-zeros list is one cell id a line, read whole: a few million cells of a national grid fit.
MAX_ZEROS_BYTES = 64 * 2**20
# A landscape's population table is one zone a line, read whole by the risk stage: as large as a zeros list.
MAX_POPULATION_BYTES = MAX_ZEROS_BYTES


class ConfigFileError(UserError, ValueError):
    """A configuration file cannot be read as one (not a regular file, too large, not valid YAML)."""


def size_text(limit: int) -> str:
    return f"{limit / 2**20:g} MiB"


def read_config(path: Path, what: str, limit: int = MAX_CONFIG_BYTES, error: type[Exception] = ConfigFileError) -> bytes:
    """The bytes of the configuration file at `path` (`what`: "policy", "landscape"), refused with `error`
    naming the file when it is not a regular file or holds more than `limit` bytes: `/dev/zero` named as a
    policy was read until the process was killed, and a FIFO blocks its reader forever."""
    try:
        # O_NONBLOCK: opening a FIFO that has no writer returns at once instead of waiting for one
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} file ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # asked of the open file: no swap after the check
        os.close(fd)
        raise error(f"{path}: the {what} file is not a regular file (a device, a folder, a FIFO or a socket); name a file")
    with os.fdopen(fd, "rb") as file:
        try:
            raw = file.read(limit + 1)  # one byte past the limit tells a file at the limit from a larger one
        except OSError as exc:
            raise error(f"{path}: cannot read the {what} file ({exc.strerror})") from None
    if len(raw) > limit:
        raise error(f"{path}: the {what} file is larger than the {size_text(limit)} a {what} file may hold")
    return raw


def load_yaml(raw: bytes, path: Path, what: str, quote: bool = True, error: type[Exception] = ConfigFileError) -> object:
    """Parse YAML with the strict loader (`strict_yaml`); `error` names the file and the line, and with
    `quote` the field and the value (False for a file a policy names: the path may be any file)."""
    try:
        return yaml.load(raw, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except YamlRefused as exc:
        detail = str(exc) if quote else f"line {exc.line}: {exc.reason}"
        raise error(f"{path}: not a valid {what}: {detail}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "unreadable"
        raise error(f"{path}: not valid YAML{where}: {problem}") from None
