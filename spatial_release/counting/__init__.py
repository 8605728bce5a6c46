"""Distinct-unit counts per (area, bucket) and per margin, on DuckDB (default) or Spark."""

from spatial_release.counting.counts import CountResult, count_pings, data_extent, period_buckets

__all__ = ["CountResult", "count_pings", "data_extent", "period_buckets"]
