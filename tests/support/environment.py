"""The scratch environment every test process runs in, set by tests/conftest.py's `pytest_configure` (before
collection imports any test module) and undone by its `pytest_unconfigure`."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from spatial_release.alerts.routing import ENV_VARS as ALERT_SETTINGS  # the deployment's channels
from spatial_release.ledger.keys import PUBLIC_KEY_ENV, SIGNING_KEY_ENV

# The folders whose defaults a run uses when it is not told where to write.
DEFAULT_FOLDERS = ("LEDGER", "RELEASES", "WORK", "ALERTS")


class ScratchEnvironment:
    """Runs that forget to name their folders must never write into the project's ledger/, releases/ or
    alerts/, nor sign with (or create) the user's ledger key, nor send alerts to the user's SMTP server or
    Slack. `enter` points the defaults at a throw-away folder and drops the alert settings; `exit` restores
    the variables as they were and removes the folder. Subprocesses a test starts inherit the scratch values."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self._saved: dict[str, str | None] = {}

    def _set(self, key: str, value: str | None) -> None:
        self._saved.setdefault(key, os.environ.get(key))
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value

    def enter(self) -> Path:
        self.folder = Path(tempfile.mkdtemp(prefix="spatial-release-tests-"))
        for name in DEFAULT_FOLDERS:
            self._set(f"SPATIAL_RELEASE_{name}", str(self.folder / name.lower()))
        # tests sign with a key made in the scratch folder, and trust only the .pub beside it
        self._set(SIGNING_KEY_ENV, str(self.folder / "keys" / "ledger-ed25519.key"))
        self._set(PUBLIC_KEY_ENV, None)
        for name in ALERT_SETTINGS:
            self._set(name, None)
        return self.folder

    def exit(self) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
