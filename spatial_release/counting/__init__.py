"""Distinct-unit counts per (area, bucket) and per margin, on DuckDB (default) or Spark."""

from spatial_release.counting.counts import CountResult, count_pings, period_buckets

__all__ = ["CountResult", "count_pings", "period_buckets"]
