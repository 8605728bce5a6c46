"""The k rule, in one place: a count n is published only if n >= k (the boundary is inclusive).

Every decision on a count against the threshold goes through these two functions: primary suppression
(`table.build_table`, the benchmark's `table.cross_classified_table`), the audit's reading of what a
withheld figure is (`release_system.audit_published`), and the publication guarantees that re-derive
the verdict from the true counts (`guarantees.check_k_floor`, `check_withheld_absent`). Both work on a
Python int, a numpy array or a pandas Series alike (elementwise), so the same code serves a scalar
decision and a vectorised check.

What counts as a *primary* also needs a unit: an empty figure (n = 0) is below k but is not withheld as
a primary (it is absent, or a structural zero published as 0); callers that meet zeros say so.
"""

from __future__ import annotations

from typing import TypeVar

N = TypeVar("N")


def below_k(n: N, k: int) -> N:
    """True where a count is below the threshold and may not be published: n < k."""
    return n < k  # type: ignore[operator,return-value]


def publishable(n: N, k: int) -> N:
    """True where a count may be published as far as the threshold goes: n >= k (inclusive)."""
    return n >= k  # type: ignore[operator,return-value]


__all__ = ["below_k", "publishable"]
