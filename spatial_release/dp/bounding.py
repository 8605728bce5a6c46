"""Contribution bounding: each unit keeps at most B buckets of the period and at most C areas per bucket,
chosen by a seeded hash of its own rows, so that which rows a unit keeps depends on that unit alone (the
bounding is a stable transformation: adding or removing a unit changes only that unit's kept rows)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from spatial_release.levels import LEAF, TOTAL, at_rung

MEMBERSHIP_COLUMNS = ("unit", "bucket_start", "cell_id")


def _hash_key(seed: int, salt: str) -> str:
    """The 16-character key pandas' row hash takes, derived from the seed (one per sampling stage)."""
    return hashlib.sha256(f"{seed}:{salt}".encode()).hexdigest()[:16]


def _seeded_order(frame: pd.DataFrame, columns: list[str], seed: int, salt: str) -> pd.Series:
    return pd.util.hash_pandas_object(frame[columns], index=False, hash_key=_hash_key(seed, salt))


def bound_contributions(membership: pd.DataFrame, max_buckets: int, max_areas: int, seed: int) -> pd.DataFrame:
    """The rows (unit, bucket_start, cell_id) of `membership` that survive bounding: per unit the `max_buckets`
    buckets of smallest seeded hash, and per kept (unit, bucket) the `max_areas` cells of smallest seeded hash.
    The hash of a row depends on its own values and the seed only, never on the row order or other units."""
    missing = [c for c in MEMBERSHIP_COLUMNS if c not in membership.columns]
    if missing:
        raise ValueError(f"membership: columns {missing} missing (expected {list(MEMBERSHIP_COLUMNS)})")
    rows = membership[list(MEMBERSHIP_COLUMNS)].drop_duplicates()
    pairs = rows[["unit", "bucket_start"]].drop_duplicates()
    pairs = pairs.assign(_h=_seeded_order(pairs, ["unit", "bucket_start"], seed, "buckets").to_numpy())
    pairs = pairs.sort_values(["unit", "_h"], kind="stable")
    kept_pairs = pairs[pairs.groupby("unit", sort=False).cumcount() < max_buckets][["unit", "bucket_start"]]
    rows = rows.merge(kept_pairs, on=["unit", "bucket_start"], how="inner")
    rows = rows.assign(_h=_seeded_order(rows, list(MEMBERSHIP_COLUMNS), seed, "areas").to_numpy())
    rows = rows.sort_values(["unit", "bucket_start", "_h"], kind="stable")
    kept = rows[rows.groupby(["unit", "bucket_start"], sort=False).cumcount() < max_areas]
    return kept.drop(columns="_h").reset_index(drop=True)


def bounded_counts(
    bounded: pd.DataFrame, parents: Sequence[tuple[str, Callable[[str], str]]], total: bool = True
) -> pd.DataFrame:
    """Distinct units per (level, area_id, bucket_start) of the bounded membership: the cells (level `cell`),
    each parent level in `parents` (level name, map from the level below's area id to its parent's), and the
    bucket total. A unit counts once per area and bucket, whatever the measure (presence or visitors)."""
    frames = [_distinct(bounded, LEAF)]
    area = bounded["cell_id"].astype(str)
    for level, parent_of in parents:
        ids = pd.unique(area)
        area = area.map(dict(zip(ids, (parent_of(a) for a in ids))))
        frames.append(_distinct(bounded.assign(cell_id=area.to_numpy()), level))
    if total:
        frames.append(_distinct(bounded.assign(cell_id=TOTAL), TOTAL))
    return pd.concat(frames, ignore_index=True)


def rung_membership(bounded: pd.DataFrame, coarse_of: Mapping[pd.Timestamp, pd.Timestamp]) -> pd.DataFrame:
    """A unit's areas over the policy's buckets inside each bucket of a coarser time rung (`coarse_of`: the
    rung's bucket of each of the policy's buckets), from its bounded rows: at most B coarse buckets and B x C
    (coarse bucket, area) pairs per unit, so a rung's figures have the sensitivity of the policy's bucket."""
    coarse = bounded["bucket_start"].map(coarse_of)
    if coarse.isna().any():
        raise ValueError(f"{int(coarse.isna().sum())} bounded rows have a bucket outside the time ladder's map")
    return bounded.assign(bucket_start=coarse.to_numpy()).drop_duplicates(ignore_index=True)


def ladder_counts(
    bounded: pd.DataFrame,
    parents: Sequence[tuple[str, Callable[[str], str]]],
    rungs: Mapping[str, Mapping[pd.Timestamp, pd.Timestamp]],
) -> pd.DataFrame:
    """`bounded_counts` at the policy's bucket and at each coarser rung of the time ladder (levels `<level>@<rung>`),
    every rung counted from the same bounded membership."""
    frames = [bounded_counts(bounded, parents)]
    for rung, coarse_of in rungs.items():
        counts = bounded_counts(rung_membership(bounded, coarse_of), parents)
        frames.append(counts.assign(level=[at_rung(level, rung) for level in counts["level"]]))
    return pd.concat(frames, ignore_index=True)


def _distinct(rows: pd.DataFrame, level: str) -> pd.DataFrame:
    counts = rows.groupby(["cell_id", "bucket_start"], sort=True)["unit"].nunique().reset_index(name="n")
    return counts.rename(columns={"cell_id": "area_id"}).assign(level=level)[["level", "area_id", "bucket_start", "n"]]
