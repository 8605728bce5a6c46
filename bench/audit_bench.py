"""Audit benchmark: the independent audit of a protected release with 1 and N
worker processes, and the check's verification of the protection step's certificate against solving again.

The table is `suppression_bench.release_counts` (250 m cells x hour, 1 km and 4 km parents, the hourly
total; presence), protected once with `protect_release`. Then, in this process, medians of --runs:
- `audit_published` (what `spatial-release audit` solves) with each worker count of --workers; the
  verdicts and per-primary bounds are compared across worker counts (they must be identical);
- `certify_published` with the protection step's certificate (what the `suppression_audit` check and the
  publish step now do), and the time to build the published system alone (shared by both routes).

    python bench/audit_bench.py                                   # 20,000 persons, 7 days
    python bench/audit_bench.py --persons 85000 --days 7 --workers 1 2 --runs 3
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from suppression_bench import release_counts  # noqa: E402

from spatial_release.suppression.certificate import Certificate  # noqa: E402
from spatial_release.suppression.release_system import (  # noqa: E402
    DisclosureSpec,
    audit_published,
    certify_published,
    protect_release,
    published_system,
)


def cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its finished children (the audit's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def timed(fn, runs: int):
    """Median wall seconds of `runs` calls, each call's wall seconds, the last result, and the median CPU
    seconds of this process and of the workers per call (on a shared machine, wall time depends on the
    load; the CPU split shows what the workers took off the main process)."""
    seconds, own, children, out = [], [], [], None
    for _ in range(runs):
        own_0, children_0 = cpu()
        started = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - started)
        own_1, children_1 = cpu()
        own.append(own_1 - own_0)
        children.append(children_1 - children_0)
    cpu_text = f"CPU: main {statistics.median(own):.2f} s, workers {statistics.median(children):.2f} s"
    return statistics.median(seconds), seconds, out, cpu_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=20000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    true_cells, true_margins, structure = release_counts(args.persons, args.days, args.seed)
    spec = DisclosureSpec(structure, args.k, "presence")
    started = time.perf_counter()
    protected, log, table = protect_release(true_cells, true_margins, spec)
    assert log.audit is not None
    print(
        f"{args.persons} persons, {args.days} days: {len(true_cells) + len(true_margins)} figures, "
        f"{len(protected.cells)} cells and {len(protected.margins)} margins published; protection "
        f"{time.perf_counter() - started:.1f} s (audit {log.audit.seconds:.1f} s, {log.audit.workers} workers, "
        f"{log.rounds} repair rounds)"
    )
    certificate = Certificate.build(table, log.audit, {"bench": "inputs"})
    cells, margins = protected.cells, protected.margins

    reference = None
    for workers in args.workers:
        median, runs, (result, _), cpu_text = timed(
            partial(audit_published, true_cells, true_margins, cells, margins, spec, workers=workers), args.runs
        )
        bounds = [(i.node, i.lo, i.up, i.passed) for i in result.intervals]
        same = "reference" if reference is None else ("identical" if bounds == reference else "DIFFERENT")
        reference = reference or bounds
        print(
            f"audit (solve), {workers} worker(s): median {median:.2f} s of {[round(s, 2) for s in runs]}; "
            f"{result.components} components, {len(result.intervals)} primaries, passed {result.passed}, "
            f"verdicts and bounds {same}; {cpu_text}"
        )
    median, runs, _, _ = timed(lambda: published_system(true_cells, true_margins, cells, margins, spec), args.runs)
    print(f"published system alone: median {median:.2f} s of {[round(s, 2) for s in runs]}")
    median, runs, (result, _, verification), cpu_text = timed(
        lambda: certify_published(true_cells, true_margins, cells, margins, spec, certificate, {"bench": "inputs"}),
        args.runs,
    )
    print(
        f"check with the certificate (verify, no LP): median {median:.2f} s of {[round(s, 2) for s in runs]}; "
        f"{len(verification.certified)} components certified, {len(verification.unverified)} re-solved "
        f"({sorted(set(verification.unverified.values()))[:3]}), passed {result.passed}; {cpu_text}"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
