"""Where the project and the shared data are, and the mark for tests that need the shared data."""

from __future__ import annotations

from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHARED = PROJECT_ROOT.parent / "shared"
SHARED_DATA = SHARED / "data"

requires_shared = pytest.mark.skipif(
    not (SHARED_DATA / "citibike-jc").is_dir(),
    reason="../shared/data is absent (a user's machine); CI has it and runs these tests",
)
