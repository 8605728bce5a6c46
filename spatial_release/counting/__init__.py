"""Distinct-unit counts per (cell, bucket) and per margin, with DuckDB."""

from spatial_release.counting.duckdb_counts import CountResult, count_units, period_buckets

__all__ = ["CountResult", "count_units", "period_buckets"]
