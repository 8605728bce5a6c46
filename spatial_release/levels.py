"""Level names of a release: the one place where "cell", "total" and `<zoning>_total` are spelt.

Every published figure has a level. Leaf cells of the main geometry are level `LEAF` ("cell", the level
of `cells.parquet`); margins carry the name of their level in `margins.parquet`: a parent level of a
zoning (e.g. `grid_2000m`, `tract`), the bucket total of the main geometry (`TOTAL`, whose single area is
also called `TOTAL`), or the bucket total of a linked zoning (`linked_total(name)`). No dependency here
beyond the standard library, so any module (domain or wiring) can import it.
"""

from __future__ import annotations

LEAF = "cell"  # level of the main geometry's leaf cells (cell x bucket)
TOTAL = "total"  # level (and area id) of the main geometry's bucket total
TOTAL_SUFFIX = "_total"


def linked_total(name: str) -> str:
    """The level of a linked zoning's bucket total, e.g. `tract` -> `tract_total`."""
    return f"{name}{TOTAL_SUFFIX}"


def is_total(level: str) -> bool:
    """True for the main total and for every linked zoning's total."""
    return level == TOTAL or level.endswith(TOTAL_SUFFIX)


__all__ = ["LEAF", "TOTAL", "TOTAL_SUFFIX", "is_total", "linked_total"]
