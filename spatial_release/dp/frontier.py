"""Configurations of a DP release compared at equal privacy loss: the time resolution (the policy's bucket or
one rung of its time ladder) and the contribution bounds B and C change, the loss (epsilon or rho, delta) stays
the policy's. Each configuration is calibrated by OpenDP at its own sensitivity and run once on the data; its
share of the non-empty cell figures shown and the median relative error of its figures are internal (they are
facts about the true counts, which the mechanism's guarantee does not cover). What may be published of a
configuration is what follows from the policy alone: its bounds, sensitivity, noise scale and threshold."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal

import pandas as pd

from spatial_release.dp.bounding import bound_contributions, bounded_counts, rung_membership
from spatial_release.dp.consistency import consistent_counts
from spatial_release.dp.mechanism import Calibration, DpParams, Sensitivity, calibrate, release_counts
from spatial_release.levels import LEAF
from spatial_release.release import PublicDpFrontierRow, Record

KEY = ["level", "area_id", "bucket_start"]


@dataclass(frozen=True)
class Configuration:
    """One way to publish the period: cells at `rung` (None: the policy's bucket), each unit bounded to
    `max_buckets` of the rung's buckets and `max_areas` cells per bucket."""

    rung: str | None
    max_buckets: int
    max_areas: int

    def name(self, bucket: str) -> str:
        return f"{self.rung or bucket}, B={self.max_buckets}, C={self.max_areas}"


@dataclass(frozen=True)
class DpFrontierRow(Record):
    """One configuration compared at the policy's loss, as the internal manifest keeps it: its bounds and its
    calibration, and (internal: see the module) its share of the non-empty cell figures shown and the median
    relative error of its figures."""

    configuration: str
    max_buckets: int
    max_areas: int
    l0: int
    loss: list[float]
    scale: float
    threshold: int
    interval95: float
    shown: float
    error_median: float | None
    published: bool

    @classmethod
    def measured(
        cls, name: str, calibration: Calibration, shown: float, error_median: float | None, published: bool
    ) -> DpFrontierRow:
        """The configuration `name`, calibrated as `calibration`, with its figures (`shown_and_error`)."""
        return cls(
            name,
            calibration.params.max_buckets,
            calibration.params.max_areas,
            calibration.sensitivity.l0,
            list(calibration.spent()),
            calibration.scale,
            calibration.threshold,
            calibration.interval95(),
            shown,
            error_median,
            published,
        )

    def public(self) -> PublicDpFrontierRow:
        """What release.json may carry of it: what follows from the policy alone."""
        return PublicDpFrontierRow(**{f.name: getattr(self, f.name) for f in fields(PublicDpFrontierRow)})


def at_resolution(membership: pd.DataFrame, coarse_of: Mapping[pd.Timestamp, pd.Timestamp] | None) -> pd.DataFrame:
    """The memberships per bucket of a rung (a unit's cells over the buckets inside it); unchanged without a map."""
    return membership if coarse_of is None else rung_membership(membership, coarse_of)


def shown_and_error(published: pd.DataFrame, truth: pd.DataFrame) -> dict:
    """The share of the non-empty true cell figures that are published, and the median over the published
    figures of |published - true| / true."""
    true_cells = truth[(truth["level"] == LEAF) & (truth["n"] > 0)]
    shown = true_cells.merge(published[KEY], on=KEY, how="inner")
    merged = published.merge(truth[[*KEY, "n"]], on=KEY, how="inner", suffixes=("", "_true"))
    merged = merged[merged["n_true"] > 0]
    errors = (merged["n"] - merged["n_true"]).abs() / merged["n_true"]
    return {
        "shown": len(shown) / len(true_cells) if len(true_cells) else 0.0,
        "error_median": float(errors.median()) if len(errors) else None,
    }


def evaluate(
    membership: pd.DataFrame,
    configuration: Configuration,
    coarse_of: Mapping[pd.Timestamp, pd.Timestamp] | None,
    parents: Sequence[tuple[str, Callable[[str], str]]],
    levels: Sequence[str],
    params: DpParams,
    measure: Literal["presence", "visitors"],
    seed: int,
    cut: Collection[pd.Timestamp] = (),
    *,
    name: str,
) -> DpFrontierRow:
    """Calibrate `configuration` at the policy's loss (`params`, whose bounds it replaces), run it once on the
    membership and measure it against the true counts at its resolution (internal figures: see the module):
    its row `name`, not published. Buckets in `cut` (cut by the period's edges) are neither offered to the
    mechanism nor measured."""
    at_rung = at_resolution(membership[["unit", "bucket_start", "cell_id"]], coarse_of)
    at_rung = at_rung[~at_rung["bucket_start"].isin(list(cut))]
    params = replace(params, max_buckets=configuration.max_buckets, max_areas=configuration.max_areas)
    sensitivity = Sensitivity.of(levels, configuration.max_buckets, configuration.max_areas)
    calibration = calibrate(params, sensitivity)
    bounded = bound_contributions(at_rung, configuration.max_buckets, configuration.max_areas, seed)
    noisy = release_counts(bounded_counts(bounded, parents), calibration).counts
    published = consistent_counts(noisy, parents, measure if coarse_of is None else "visitors")
    figures = shown_and_error(published, bounded_counts(at_rung, parents))
    return DpFrontierRow.measured(name, calibration, **figures, published=False)
