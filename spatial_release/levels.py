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
RUNG_SEP = "@"  # a figure of a coarser time rung: `<level>@<rung>`, e.g. `cell@1w`, `tract@period`


def linked_total(name: str) -> str:
    """The level of a linked zoning's bucket total, e.g. `tract` -> `tract_total`."""
    return f"{name}{TOTAL_SUFFIX}"


def is_total(level: str) -> bool:
    """True for the main total and for every linked zoning's total (at any time rung)."""
    base = space_level(level)
    return base == TOTAL or base.endswith(TOTAL_SUFFIX)


def at_rung(level: str, rung: str | None) -> str:
    """The level of a figure at a coarser time rung of the policy's ladder (`cell` at `1w` -> `cell@1w`);
    the policy's own bucket (rung None) keeps the plain name, so a release without a ladder is unchanged."""
    return level if not rung else f"{level}{RUNG_SEP}{rung}"


def space_level(level: str) -> str:
    """The spatial level of a level name (`cell@1w` -> `cell`)."""
    return level.split(RUNG_SEP, 1)[0]


def rung_of(level: str) -> str | None:
    """The time rung of a level name (`cell@1w` -> `1w`; `cell` -> None, the policy's own bucket)."""
    return level.split(RUNG_SEP, 1)[1] if RUNG_SEP in level else None


__all__ = ["LEAF", "RUNG_SEP", "TOTAL", "TOTAL_SUFFIX", "at_rung", "is_total", "linked_total", "rung_of", "space_level"]
