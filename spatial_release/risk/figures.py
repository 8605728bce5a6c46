"""Which figure the gate reads: the adversary (fixed by who is in the panel) picks the per-zone figure, and
the release figure is the worst zone's (never a mean over zones; the pooled figure is reported only).

The prosecutor knows the target is in the data: its figure is the mean 1/n (El Emam's prosecutor risk).
The journalist does not: its figure scales 1/n by the panel's share of the zone's public population.
"""

from __future__ import annotations

import math
from enum import StrEnum

from spatial_release.risk.estimator import RiskReport, ZoneRisk


class Adversary(StrEnum):
    PROSECUTOR = "prosecutor"
    JOURNALIST = "journalist"

    @property
    def zone_field(self) -> str:
        """The ZoneRisk attribute that holds this adversary's figure."""
        return "journalist" if self is Adversary.JOURNALIST else "mean"

    @property
    def measure(self) -> str:
        """The name of the gated figure, as release records and reports label it."""
        return f"{self.value}_mean"


def release_figure(report: RiskReport, adversary: Adversary) -> tuple[ZoneRisk | None, float | None]:
    """The worst zone for the adversary and its figure (None, None when no zone has a figure)."""
    worst = report.worst_zone(adversary.zone_field)
    return worst, (getattr(worst, adversary.zone_field) if worst else None)


def pooled_figure(report: RiskReport, adversary: Adversary) -> float | None:
    """The unit-weighted mean of the adversary's zone figures: reported beside the release figure, never
    gated on (a mean over zones hides the worst one)."""
    scored = [z for z in report.zones if getattr(z, adversary.zone_field) is not None]
    if not scored:
        return None
    return sum(z.units * getattr(z, adversary.zone_field) for z in scored) / sum(z.units for z in scored)


PUBLIC_DIGITS = 3


def public_ratio(value: float | None, digits: int = PUBLIC_DIGITS) -> float | None:
    """A risk figure as release records, ledger entries and the UI carry it: rounded up to `digits`
    significant digits. An exact ratio of unit counts (227/228, or a zone's share of unique units) names the
    counts behind it, which need not be published figures; rounding up keeps the gate on the safe side."""
    if value is None or value <= 0 or not math.isfinite(value):
        return value
    scale = 10 ** (digits - 1 - math.floor(math.log10(value)))
    return math.ceil(round(value * scale, 6)) / scale


def public_headroom(value: float | None, digits: int = PUBLIC_DIGITS) -> float | None:
    """What is left under a ceiling, as records carry it: rounded down to `digits` significant digits (the
    safe side for room), so a difference such as 0.2 - 0.00255 is not written as 0.19744999999999996."""
    if value is None or value <= 0 or not math.isfinite(value):
        return value
    scale = 10 ** (digits - 1 - math.floor(math.log10(value)))
    return math.floor(round(value * scale, 6)) / scale
