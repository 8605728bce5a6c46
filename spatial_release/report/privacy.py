"""What the report shows of a release published under differential privacy: the mechanism and its
guarantee, and an error bar per published count (the central 95 % interval of the mechanism's noise around
the published figure). Read from release.json's `privacy` section and the published tables only: the noise
itself is never recorded anywhere."""

from __future__ import annotations

import pandas as pd

from spatial_release.release import ReleaseRecord
from spatial_release.report.tables import readable

LEVEL_OF_CELLS = "cell"


def privacy_pairs(record: ReleaseRecord) -> list[tuple[str, str]]:
    """(label, value) rows of the mechanism, empty for a release without a DP record."""
    p = record.privacy
    if not p:
        return []
    loss = ("epsilon", p.get("epsilon")) if p.get("accounting") == "approx" else ("rho", p.get("rho"))
    return [
        ("mechanism", f"OpenDP {p.get('mechanism')} ({p.get('noise')} noise), {p.get('library')}"),
        (f"privacy loss of this release ({loss[0]}, delta)", f"{readable(loss[1])}, {p.get('delta'):.3g}"),
        ("contribution bounds", f"{p.get('max_buckets')} bucket(s) per unit, {p.get('max_areas')} cell(s) per bucket"),
        ("noise scale", readable(p.get("scale"))),
        ("95 % of the noise within", f"+/- {readable(p.get('interval95'))} of the count"),
        ("selection threshold (noisy count)", readable(p.get("threshold"))),
        ("post-processing", str(p.get("post_processing"))),
        ("guarantee", str(p.get("guarantee"))),
    ]


def error_bars(cells: pd.DataFrame, margins: pd.DataFrame, record: ReleaseRecord, n: int = 10) -> pd.DataFrame:
    """The first `n` published figures of each table with the 95 % interval of the noise around each
    (clipped at 0: counts are non-negative). An interval, not a correction: the figure is the estimate."""
    half = float((record.privacy or {}).get("interval95") or 0.0)
    column = record.count_column
    figures = pd.concat(
        [
            cells.head(n).assign(level=LEVEL_OF_CELLS, area_id=cells["cell_id"].head(n))[
                ["level", "area_id", "bucket_start", column]
            ],
            margins.head(n)[["level", "area_id", "bucket_start", column]],
        ],
        ignore_index=True,
    )
    return figures.assign(
        low=(figures[column] - half).clip(lower=0).round(1),
        high=(figures[column] + half).round(1),
    )
