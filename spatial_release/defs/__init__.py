"""Dagster wiring only, by concern: `release/` (the asset graph per cadence, its checks, jobs and schedules),
`review` (the risk review, its sensor and schedule), `alerts` (failed runs become alert records), over the
domain packages; `resources` and `partitions` are shared. Each concern exports its own `defs`."""

from spatial_release.memory import avoid_hugepage_stalls

# Every process that loads the definitions (code server, run and step workers, the command line's runs) is
# the pipeline's own: NumPy's huge page advice off for all of it (see spatial_release.memory).
avoid_hugepage_stalls()
