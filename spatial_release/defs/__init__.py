"""Dagster wiring only: assets, checks, jobs, schedules and resources over the domain packages."""
