"""Memory advice for the pipeline's large arrays, and the cyclic garbage collector around its large object graphs.

NumPy asks the kernel for transparent huge pages (madvise MADV_HUGEPAGE) on every large array. Where the
kernel's THP defrag setting is `madvise` (the default on many distributions), the first touch of such an
array may stall in direct compaction, and the counting passes over large arrays slow down several times
(bench/RESULTS.md). The advice changes no result, only how pages are handed out.

So the advice is off where the pipeline runs: process-wide in the processes the project owns (the command
line, and any process that loads the Dagster definitions: `spatial_release.defs`), and for the duration of
`count_pings` when the domain code is called from elsewhere (a notebook), restored afterwards. Setting
NUMPY_MADVISE_HUGEPAGE=1 (NumPy's own variable) keeps the advice on everywhere.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def _setter() -> Callable[[bool], bool] | None:
    """NumPy's switch for the advice (the one its import calls with NUMPY_MADVISE_HUGEPAGE); it returns the
    setting it replaces. None for a NumPy without it."""
    try:
        from numpy._core import multiarray
    except ImportError:  # NumPy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    return getattr(multiarray, "_set_madvise_hugepage", None)


def _user_keeps_advice() -> bool:
    return os.environ.get("NUMPY_MADVISE_HUGEPAGE") not in (None, "", "0")


def avoid_hugepage_stalls() -> bool:
    """Turns the advice off for the whole process, unless NUMPY_MADVISE_HUGEPAGE says otherwise; whether it
    is now off. For the project's own entry points only."""
    setter = _setter()
    if setter is None or _user_keeps_advice():
        return False
    setter(False)
    return True


@contextmanager
def hugepage_advice_off() -> Iterator[None]:
    """The advice off inside the block (unless NUMPY_MADVISE_HUGEPAGE=1), as it was after it."""
    setter = _setter()
    if setter is None or _user_keeps_advice():
        yield
        return
    previous = setter(False)
    try:
        yield
    finally:
        setter(previous)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused inside the block, as it was after it.

    Protection and the audit build their linear system and its certificate as millions of small lists, dicts
    and tuples. While such a graph grows, the collector runs a full collection every time the long-lived
    objects grow by a quarter, each one traversing every object alive (bench/RESULTS.md). Those objects hold
    no reference cycles, so reference counting frees them as before; what cyclic garbage the block makes is
    collected once the collector runs again. The collector is process-wide: a block entered while it is
    already paused leaves it paused."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
