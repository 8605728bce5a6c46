"""Disclosure control on the counted table: primary (k threshold) suppression and structural zeros."""

from spatial_release.suppression.primary import ProtectedTable, protect_primary

__all__ = ["ProtectedTable", "protect_primary"]
