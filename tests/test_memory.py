"""NumPy's huge page advice (spatial_release.memory): off process-wide where the pipeline's own processes
start (the Dagster definitions, the command line), off only for the duration of `count_pings` when the
domain code is imported elsewhere, and kept on everywhere when NUMPY_MADVISE_HUGEPAGE=1. Each case runs in a
fresh interpreter, as the setting is per process; the probe reads the setting by replacing it."""

import os
import subprocess
import sys

import pytest

READ = "import numpy._core.multiarray as m; print(m._set_madvise_hugepage(True))"


def _run(code: str, value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if value is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("value, advice_on", [(None, False), ("0", False), ("1", True)])
def test_loading_the_dagster_wiring_turns_the_advice_off(value, advice_on):
    # NumPy's own default is on (kernel >= 4.6) unless the variable says 0: the import must change it
    assert _run("import spatial_release.defs; " + READ, value) == str(advice_on)


def test_importing_the_domain_package_leaves_the_advice_alone():
    assert _run("import spatial_release, spatial_release.counting; " + READ, None) == "True"


@pytest.mark.parametrize("value, inside", [(None, "False"), ("1", "True")])
def test_the_advice_is_off_during_the_block_and_restored_after(value, inside):
    code = (
        "import numpy._core.multiarray as m\n"
        "from spatial_release.memory import hugepage_advice_off\n"
        "with hugepage_advice_off():\n"
        "    now = m._set_madvise_hugepage(False); m._set_madvise_hugepage(now)\n"
        "print(now, m._set_madvise_hugepage(True))"
    )
    assert _run(code, value) == f"{inside} True"
