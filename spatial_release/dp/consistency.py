"""Post-processing of the noisy figures into non-negative integers consistent between cells and margins.
It reads only the mechanism's output, so it costs no privacy (post-processing of a DP release is DP).

The method is a monotone bottom-up repair: level by level from the finest, a published area's figure is raised
to what its published descendants at every finer level imply (their sum under `presence`, where each unit is
in one area per bucket; their largest under `visitors`, where a unit may be in several), never lowered. The
noisy figures are integers already (discrete noise), so only the repair and the clip at zero remain."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from spatial_release.levels import LEAF, TOTAL


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
