"""Dagster wiring only, by concern: `release/` (the asset graph per cadence, its checks, jobs and schedules),
`review` (the risk review, its sensor and schedule), `alerts` (failed runs become alert records), over the
domain packages; `resources` and `partitions` are shared. Each concern exports its own `defs`."""
