"""Disclosure control on the counted table: primary (k threshold) and complementary suppression, the
attacker's LP audit, and structural zeros."""

from spatial_release.suppression.primary import ProtectedTable
from spatial_release.suppression.rules import below_k, publishable

__all__ = ["ProtectedTable", "below_k", "publishable"]
