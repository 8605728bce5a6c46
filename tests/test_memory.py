"""The package turns NumPy's huge page advice off at import (spatial_release.memory), unless the user's
NUMPY_MADVISE_HUGEPAGE asks for it; each case in a fresh interpreter, as the setting is per process."""

import os
import subprocess
import sys

import pytest

PROBE = ("import numpy._core.multiarray as m; import spatial_release; "
         "print(m._set_madvise_hugepage(True))")  # returns the setting it replaces


@pytest.mark.parametrize("value, advice_on", [(None, False), ("0", False), ("1", True)])
def test_hugepage_advice_after_import(value, advice_on):
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if value is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(advice_on)
