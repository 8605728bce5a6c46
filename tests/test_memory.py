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


@pytest.mark.slow
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


def test_the_collector_is_paused_inside_the_block_and_restored_after_even_on_error():
    import gc

    from spatial_release.memory import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: still paused inside, and the outer block's pause survives
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("inside")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():  # paused by someone else: left paused after the block
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_stages_that_build_the_large_graphs_run_with_the_collector_paused(monkeypatch, tmp_path):
    """Protection (on the caller and in each chunk's worker) and the audit check run with the collector
    paused, and leave it running after them, an error included."""
    import gc
    from types import SimpleNamespace
    from typing import cast

    import numpy as np
    from support.tables import one_row_per_bucket

    from spatial_release.stages import ReleaseContext, checks, protect
    from spatial_release.suppression import blocks
    from spatial_release.suppression.method import ProtectionMethod
    from spatial_release.suppression.table import TablePack
    from spatial_release.suppression.verdicts import Criterion

    paused: list[bool] = []

    class Seen(Exception):
        pass

    def first_read(area):
        paused.append(not gc.isenabled())
        raise Seen

    monkeypatch.setattr(protect, "read_true_counts", first_read)
    monkeypatch.setattr(checks, "read_true_counts", first_read)
    # what the stages read of their context before the first read of the counts
    ctx = cast(
        ReleaseContext,
        SimpleNamespace(
            policy=SimpleNamespace(suppression=SimpleNamespace(audit_with=()), protection=SimpleNamespace(method="kanon")),
            area=SimpleNamespace(root=tmp_path),
        ),
    )
    for stage in (protect.run_protect, checks.check_suppression_audit):
        with pytest.raises(Seen):
            stage(ctx)
        assert gc.isenabled()
    original = blocks.protect_whole

    def protect_whole(*args, **kwargs):
        paused.append(not gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(blocks, "protect_whole", protect_whole)
    table = one_row_per_bucket(1)
    pack = TablePack.of(table).subtable(np.arange(len(table)), np.arange(len(table.relations)))
    chunk = blocks._Chunk(
        pack, np.arange(len(table)), 5, {"cell": 0, "row": 1}, ProtectionMethod(workers=1), Criterion(5), None
    )
    blocks._protect_chunk(chunk)
    assert paused == [True, True, True] and gc.isenabled()
