"""The utility report of a release: how much of the true counts it shows, and at which level, in aggregates only.

Computed from the true counts and the keys of the published files (never from the suppressor's own
statuses), so anybody holding the counts can re-derive it:
- per level and rung (`block`, `block@1w`, ...): the share of figures and of unit counts published, withheld
  as primaries (below k), withheld as secondaries (at least k, needed, not published) and, at coarser rungs,
  not needed (at least k, but no finer figure under it is below k, so the ladder never offered it);
- per density stratum: the finest figures of each zoning (its leaf areas at the policy's bucket) in deciles
  of their true size, with the same shares and the share of unit counts shown at the leaf level at any rung;
- `finest_shown`: for each zoning, the share of the unit counts of its finest figures whose finest published
  level is each (level, rung), trying the time rungs of the leaf level first, then each parent level's
  (`block`, `block@1w`, `block@period`, `tract`, ...), or none.
`shown_at_leaf` is the headline: the share of a zoning's finest unit counts shown at its own leaf level,
at whichever time rung passes. No figure, key or interval of a single area leaves this module.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from spatial_release.levels import LEAF, at_rung, is_total, rung_of, space_level
from spatial_release.suppression.ladder import TimeLink
from spatial_release.suppression.rules import below_k
from spatial_release.suppression.table import Chain

DEFINITION = (
    "finest figures: each zoning's leaf areas at the policy's time bucket (true distinct-unit counts). "
    "A finest figure is shown at a level when that level's figure of the same area (or its parent area) for "
    "the bucket holding it is published; finest_shown gives, per zoning, the share of the finest figures' unit "
    "counts whose finest published level is each level, time rungs of a level tried before the next spatial "
    "level. shown_at_leaf: the share shown at the zoning's own leaf level, at any time rung. Withheld: primary "
    "when below k, secondary when at least k and published nowhere although a finer figure under it (or, at "
    "the policy's bucket, the figure itself) needed it; not_needed: a coarser-rung figure of at least k over "
    "finer figures that all pass k."
)
STRATA = 10


KEY = ["level", "area_id", "bucket_start"]


def _keys(frame: pd.DataFrame) -> pd.MultiIndex:
    """(level, area_id, bucket_start) of every row; buckets as UTC timestamps, so keys of any source match."""
    return pd.MultiIndex.from_arrays(
        [frame["level"].to_numpy(), frame["area_id"].to_numpy(), pd.to_datetime(frame["bucket_start"], utc=True)], names=KEY
    )


def _classify(true: pd.DataFrame, published: pd.MultiIndex, needed: pd.MultiIndex, k: int) -> pd.Series:
    keys = _keys(true)
    is_pub = np.asarray(keys.isin(published), dtype=bool)
    is_needed = np.asarray(keys.isin(needed), dtype=bool)
    small = below_k(true["n"].to_numpy(), k)
    return pd.Series(
        np.select([is_pub, small, is_needed], ["published", "primary", "secondary"], "not_needed"), index=true.index
    )


def _mapped(values: pd.Series, fn) -> pd.Series:
    """`fn` applied once per distinct value (areas and buckets repeat across hundreds of thousands of rows).
    factorize keeps datetimes as integers: `to_numpy()` of a tz-aware column makes one Timestamp per row."""
    codes, unique = pd.factorize(values, use_na_sentinel=False)
    return pd.Series(pd.Index([fn(v) for v in unique]).take(codes), index=values.index)


def _shares(frame: pd.DataFrame) -> dict:
    figures, units = len(frame), int(frame["n"].sum())
    out: dict[str, int | dict[str, float]] = {"figures": figures, "unit_counts": units}
    for status in ("published", "primary", "secondary", "not_needed"):
        part = frame[frame["status"] == status]
        out[status] = {
            "figures": len(part) / figures if figures else 0.0,
            "unit_counts": int(part["n"].sum()) / units if units else 0.0,
        }
    return out


def _needed_keys(true: pd.DataFrame, links: Sequence[TimeLink], k: int) -> pd.MultiIndex:
    """Keys of coarser-rung figures over at least one finer figure below k (rung by rung), plus every figure
    at the policy's bucket (always offered)."""
    rung = _mapped(true["level"], rung_of)
    needed = [true.loc[rung.isna(), KEY]]
    for link in links:
        parent = link.parent_map()
        fine = true[rung == link.fine] if link.fine else true[rung.isna()]
        small = fine[below_k(fine["n"].to_numpy(), k)]
        needed.append(
            pd.DataFrame(
                {
                    "level": _mapped(small["level"], lambda level, coarse=link.coarse: at_rung(space_level(level), coarse)),
                    "area_id": small["area_id"],
                    "bucket_start": _mapped(small["bucket_start"], lambda b, parent=parent: parent[pd.Timestamp(b)]),
                }
            )
        )
    return _keys(pd.concat(needed, ignore_index=True))


def leaf_shown(
    true_cells: pd.DataFrame, published_cells: pd.DataFrame, published_margins: pd.DataFrame, links: Sequence[TimeLink]
) -> np.ndarray:
    """For each true (cell_id, bucket_start) figure: whether the release shows it at its own cell, at the
    policy's bucket or at any coarser rung (`cell@<rung>` of the bucket holding it). Re-derived from the
    files' keys only (the budget check's reading)."""
    buckets = pd.to_datetime(true_cells["bucket_start"], utc=True)
    shown = _pairs_in(true_cells["cell_id"], buckets, published_cells["cell_id"], published_cells["bucket_start"])
    current = buckets  # tz-aware: its to_numpy() made a Timestamp per row, read only with a ladder
    for link in links:
        parent = link.parent_map()
        current = _mapped(current, lambda b, parent=parent: parent[pd.Timestamp(b)])
        level = at_rung(LEAF, link.coarse)
        rows = published_margins[published_margins["level"] == level]
        shown |= _pairs_in(true_cells["cell_id"], current, rows["area_id"], rows["bucket_start"])
    return shown


def _pairs_in(areas: pd.Series, buckets: pd.Series, their_areas: pd.Series, their_buckets: pd.Series) -> np.ndarray:
    """For each (area, bucket) of the first two columns: whether the pair is among the other two's. Buckets
    are compared as UTC instants (ns), each pair coded as one integer: a MultiIndex over a tz-aware level
    makes one Timestamp per row."""
    area_codes, _ = pd.factorize(pd.concat([areas, their_areas], ignore_index=True), use_na_sentinel=False)
    instants = np.concatenate([_instants_ns(buckets), _instants_ns(their_buckets)])
    bucket_codes, bucket_values = pd.factorize(instants, use_na_sentinel=False)
    pair = area_codes.astype(np.int64) * max(1, len(bucket_values)) + bucket_codes
    return np.isin(pair[: len(areas)], pair[len(areas) :])


def _instants_ns(column: pd.Series) -> np.ndarray:
    return pd.DatetimeIndex(pd.to_datetime(column, utc=True)).as_unit("ns").asi8


def _finest_levels(chain_levels: Sequence[str], rungs: Sequence[str | None]) -> list[str]:
    return [at_rung(level, rung) for level in chain_levels if not is_total(level) for rung in rungs]


def utility_report(
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    published_cells: pd.DataFrame,
    published_margins: pd.DataFrame,
    chains: Sequence[Chain],
    links: Sequence[TimeLink],
    k: int,
) -> dict:
    """The report (see the module docstring). `true_cells` (cell_id, bucket_start, n) and `true_margins`
    (level, area_id, bucket_start, n): every non-empty figure; `published_*`: the release files' keys
    (cell_id or level/area_id, bucket_start); `chains`: each zoning's levels, leaf first (policy bucket);
    `links`: the time ladder (`Structure.time_links`)."""
    true = pd.concat(
        [true_cells.rename(columns={"cell_id": "area_id"}).assign(level=LEAF), true_margins], ignore_index=True
    )[["level", "area_id", "bucket_start", "n"]]
    true["bucket_start"] = pd.to_datetime(true["bucket_start"], utc=True)
    published = _keys(
        pd.concat(
            [published_cells.rename(columns={"cell_id": "area_id"}).assign(level=LEAF)[KEY], published_margins[KEY]],
            ignore_index=True,
        )
    )
    true["status"] = _classify(true, published, _needed_keys(true, links, k), k)
    report: dict = {
        "definition": DEFINITION,
        "k": k,
        "rungs": [None, *[link.coarse for link in links]],
        "levels": {level: _shares(group) for level, group in true.groupby("level", sort=True)},
    }
    rungs = [None, *[link.coarse for link in links]]
    maps = {link.coarse: link.parent_map() for link in links}
    zonings = {}
    for chain in chains:
        if rung_of(chain.levels[0]) is not None:
            continue
        finest = true[true["level"] == chain.levels[0]].copy()
        zonings[chain.levels[0]] = _zoning_report(finest, chain, rungs, maps, published)
    report["zonings"] = zonings
    return report


def _bucket_at(bucket: pd.Timestamp, rung: str | None, rungs: Sequence[str | None], maps: dict) -> pd.Timestamp:
    for step in rungs[1 : rungs.index(rung) + 1]:
        bucket = maps[step][bucket]
    return bucket


def _zoning_report(
    finest: pd.DataFrame, chain: Chain, rungs: Sequence[str | None], maps: dict, published: pd.MultiIndex
) -> dict:
    """finest_shown, shown_at_leaf and the density strata of one zoning's finest figures."""
    levels = chain.levels
    order = _finest_levels(levels, rungs)
    total_units = int(finest["n"].sum())
    shown = pd.Series("none", index=finest.index, dtype=object)
    buckets = pd.to_datetime(finest["bucket_start"], utc=True)
    for level_name in order:  # the finest published level first: each figure keeps the first level that shows it
        rung, space = rung_of(level_name), space_level(level_name)
        keys = pd.MultiIndex.from_arrays(
            [
                np.full(len(finest), level_name, dtype=object),
                _mapped(finest["area_id"], lambda area, space=space: _area_at(area, chain, space)).to_numpy(),
                pd.to_datetime(
                    _mapped(buckets, lambda b, rung=rung: _bucket_at(pd.Timestamp(b), rung, rungs, maps)), utc=True
                ),
            ]
        )
        hit = np.asarray(keys.isin(published), dtype=bool) & (shown == "none").to_numpy()
        shown[hit] = level_name
    finest = finest.assign(shown=shown)
    by_level = finest.groupby("shown")["n"].sum()
    leaf_levels = {at_rung(levels[0], rung) for rung in rungs}
    strata = _strata(finest, leaf_levels)
    return {
        "figures": len(finest),
        "unit_counts": total_units,
        "finest_shown": {lv: (int(by_level.get(lv, 0)) / total_units if total_units else 0.0) for lv in [*order, "none"]},
        "shown_at_leaf": (
            int(finest.loc[finest["shown"].isin(leaf_levels), "n"].sum()) / total_units if total_units else 0.0
        ),
        "strata": strata,
    }


def _area_at(area: str, chain: Chain, level: str) -> str:
    """The area of `level` that holds `area` (an area of the chain's leaf level): the public hierarchy."""
    for depth, name in enumerate(chain.levels):
        if name == level:
            return area
        area = chain.parent_of[depth](area)
    raise ValueError(f"{level!r} is not a level of the chain {chain.levels}")


def _strata(finest: pd.DataFrame, leaf_levels: set) -> list[dict]:
    """Deciles of the finest figures by true size (ranks, so ties never empty a stratum's neighbour)."""
    if finest.empty:
        return []
    ranks = finest["n"].rank(method="first").to_numpy()
    stratum = np.minimum((ranks - 1) * STRATA // len(finest), STRATA - 1).astype(int) + 1
    out = []
    for s in range(1, STRATA + 1):
        part = finest[stratum == s]
        if part.empty:
            continue
        units = int(part["n"].sum())
        out.append(
            {
                "stratum": s,
                **_shares(part),
                "shown_at_leaf": (int(part.loc[part["shown"].isin(leaf_levels), "n"].sum()) / units if units else 0.0),
            }
        )
    return out
