"""Process-wide memory advice for the pipeline's large arrays.

NumPy asks the kernel for transparent huge pages (madvise MADV_HUGEPAGE) on every large array. Where the
kernel's THP defrag setting is `madvise` (the default on many distributions, and on the machines this was
measured on), each first touch of such an array may stall in direct compaction. Measured on a 2-core VM:
the packed-key presence pass (`counting.packed`) over 10 M pings took 10.3-11.7 s with the advice and
1.6-2.3 s without it, and the whole 10 M counting step 13.7 s against 3.3 s (bench/release_bench.py). The
advice changes no result, only how pages are handed out, so the package turns it off when imported (like
the umask, `fileio.restrict_umask`). NUMPY_MADVISE_HUGEPAGE=1 in the environment keeps it on.
"""

from __future__ import annotations

import os


def avoid_hugepage_stalls() -> bool:
    """Turns NumPy's huge page advice off unless NUMPY_MADVISE_HUGEPAGE says otherwise; whether it is now off.
    Uses NumPy's own switch for this (`_set_madvise_hugepage`, the function its import calls with the same
    variable); a NumPy without it is left as it is."""
    if os.environ.get("NUMPY_MADVISE_HUGEPAGE") not in (None, "", "0"):
        return False
    from numpy._core import multiarray

    setter = getattr(multiarray, "_set_madvise_hugepage", None)
    if setter is None:
        return False
    setter(False)
    return True
