"""Distinct-unit counts per (cell, bucket) and per margin, with DuckDB."""

from spatial_release.counting.duckdb_counts import CountResult, Zoning, count_units, period_buckets

__all__ = ["CountResult", "Zoning", "count_units", "period_buckets"]
