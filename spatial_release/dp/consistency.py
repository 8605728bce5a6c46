"""Post-processing of the noisy figures into non-negative integers consistent between cells and margins.
It reads only the mechanism's output, so it costs no privacy (post-processing of a DP release is DP).

The method is a monotone bottom-up repair: level by level from the finest, a published area's figure is raised
to what its published descendants at every finer level imply (their sum under `presence`, where each unit is
in one area per bucket; their largest under `visitors`, where a unit may be in several), never lowered. The
noisy figures are integers already (discrete noise), so only the repair and the clip at zero remain."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from spatial_release.levels import LEAF, TOTAL, at_rung, rung_of, space_level


def consistent_counts(
    noisy: pd.DataFrame,
    parents: Sequence[tuple[str, Callable[[str], str]]],
    measure: Literal["presence", "visitors"],
) -> pd.DataFrame:
    """`noisy` (level, area_id, bucket_start, n) repaired: every published figure >= 0 and, for every
    published area and bucket, >= the sum (presence) or the largest (visitors) of its published descendants'
    figures at each finer level of the chain `cell -> parents... -> total`."""
    levels = [LEAF, *(level for level, _ in parents), TOTAL]
    steps = [fn for _, fn in parents] + [lambda _area: TOTAL]
    frames = {lv: g.copy() for lv, g in noisy.assign(n=noisy["n"].clip(lower=0)).groupby("level", sort=False)}
    fold = "sum" if measure == "presence" else "max"
    for i, level in enumerate(levels[1:], start=1):
        if level not in frames:
            continue
        target = frames[level]
        for j in range(i):
            lower = frames.get(levels[j])
            if lower is None or lower.empty:
                continue
            ancestor = lower["area_id"].astype(str)
            for step in steps[j:i]:
                ids = pd.unique(ancestor)
                ancestor = ancestor.map(dict(zip(ids, (step(a) for a in ids))))
            implied = (
                lower.assign(area_id=ancestor.to_numpy())
                .groupby(["area_id", "bucket_start"])["n"]
                .agg(fold)
                .rename("floor")
                .reset_index()
            )
            floor = target[["area_id", "bucket_start"]].merge(implied, on=["area_id", "bucket_start"], how="left")
            raised = np.maximum(target["n"].to_numpy(), floor["floor"].fillna(0).to_numpy().astype("int64"))
            target = target.assign(n=raised)
        frames[level] = target
    out = pd.concat(frames.values(), ignore_index=True) if frames else noisy.iloc[0:0]
    return out.astype({"n": "int64"}).sort_values(["level", "area_id", "bucket_start"], ignore_index=True)


def consistent_ladder(
    noisy: pd.DataFrame,
    parents: Sequence[tuple[str, Callable[[str], str]]],
    measure: Literal["presence", "visitors"],
    links: Sequence[tuple[str, Mapping[pd.Timestamp, pd.Timestamp]]],
) -> pd.DataFrame:
    """`consistent_counts` at the policy's bucket and at each coarser time rung of `links` ((rung, the rung's
    bucket of each bucket of the rung below), finest first). A rung's figure counts the units seen in any
    of its finer buckets, so it is first raised to the largest published figure of the same area in them;
    then its areas are repaired as `visitors` (a unit may be in several areas over a rung's buckets)."""
    rung = noisy["level"].map(rung_of)
    below = consistent_counts(noisy[rung.isna()], parents, measure)
    out = [below]
    for name, coarse_of in links:
        figures = noisy[rung == name].assign(level=lambda f: f["level"].map(space_level))
        finer = below.assign(bucket_start=below["bucket_start"].map(coarse_of))
        implied = finer.dropna(subset=["bucket_start"]).groupby(["level", "area_id", "bucket_start"])["n"].max()
        floor = figures[["level", "area_id", "bucket_start"]].merge(
            implied.rename("floor").reset_index(), on=["level", "area_id", "bucket_start"], how="left"
        )
        raised = np.maximum(figures["n"].to_numpy(), floor["floor"].fillna(0).to_numpy().astype("int64"))
        below = consistent_counts(figures.assign(n=raised), parents, "visitors")
        out.append(below.assign(level=[at_rung(level, name) for level in below["level"]]))
    return pd.concat(out, ignore_index=True).sort_values(["level", "area_id", "bucket_start"], ignore_index=True)
