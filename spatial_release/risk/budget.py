"""The risk budget gate: the release figure is the worst zone; the programme figure is cumulative.

cumulative = 1 - prod(1 - p_i) over the ledger's releases of the dataset and this one. Over the per-release
ceiling or pushing the cumulative figure over the programme ceiling blocks (a BLOCK decision whose reason
starts with "RiskBudgetExceeded:", the label the risk_budget check shows); past
warn_at x either ceiling publishes with a warning; a missing or empty estimate blocks. Ceilings change only
by editing the policy file in review, never by a run-time flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from spatial_release.risk.figures import public_headroom, public_ratio

PUBLISH, WARN, BLOCK = "publish", "warn", "block"


def cumulative_risk(figures: list[float]) -> float:
    """1 - prod(1 - p_i): the probability that at least one release singles the target out."""
    remaining = 1.0
    for p in figures:
        remaining *= 1.0 - p
    return 1.0 - remaining


@dataclass(frozen=True)
class GateDecision:
    status: str
    release_figure: float | None
    worst_zone: str | None
    cumulative: float | None
    previous: tuple[float, ...]
    reason: str
    headroom: float | None = None  # programme ceiling minus the cumulative figure


def as_recorded(decision: GateDecision) -> GateDecision:
    """The decision with its cumulative figure and headroom as records carry them (3 significant digits:
    the figure rounded up, the room rounded down), decided on the exact figure."""
    return replace(decision, cumulative=public_ratio(decision.cumulative), headroom=public_headroom(decision.headroom))


def decide(
    release_figure: float | None,
    worst_zone: str | None,
    previous: list[float],
    per_release_ceiling: float,
    cumulative_ceiling: float,
    warn_at: float,
) -> GateDecision:
    """The gate's decision on the exact figures, with its cumulative figure and headroom as recorded."""
    return as_recorded(_decide(release_figure, worst_zone, previous, per_release_ceiling, cumulative_ceiling, warn_at))


def _decide(
    release_figure: float | None,
    worst_zone: str | None,
    previous: list[float],
    per_release_ceiling: float,
    cumulative_ceiling: float,
    warn_at: float,
) -> GateDecision:
    if release_figure is None or worst_zone is None or math.isnan(release_figure):
        return GateDecision(
            BLOCK,
            release_figure,
            worst_zone,
            None,
            tuple(previous),
            "no risk estimate for this release: a missing estimate blocks",
        )
    cumulative = cumulative_risk([*previous, release_figure])
    left = cumulative_ceiling - cumulative
    if release_figure > per_release_ceiling:
        return GateDecision(
            BLOCK,
            release_figure,
            worst_zone,
            cumulative,
            tuple(previous),
            f"RiskBudgetExceeded: zone {worst_zone} at {release_figure:.4f} is over the "
            f"per-release ceiling {per_release_ceiling}",
            left,
        )
    if cumulative > cumulative_ceiling:
        return GateDecision(
            BLOCK,
            release_figure,
            worst_zone,
            cumulative,
            tuple(previous),
            f"RiskBudgetExceeded: cumulative {cumulative:.4f} over {len(previous) + 1} releases "
            f"is over the programme ceiling {cumulative_ceiling}",
            left,
        )
    warnings = []
    if release_figure > warn_at * per_release_ceiling:
        warnings.append(
            f"zone {worst_zone} at {release_figure:.4f} is past {warn_at:.0%} of the per-release "
            f"ceiling {per_release_ceiling}"
        )
    if cumulative > warn_at * cumulative_ceiling:
        warnings.append(f"cumulative {cumulative:.4f} is past {warn_at:.0%} of the programme ceiling {cumulative_ceiling}")
    if warnings:
        return GateDecision(WARN, release_figure, worst_zone, cumulative, tuple(previous), "; ".join(warnings), left)
    return GateDecision(
        PUBLISH,
        release_figure,
        worst_zone,
        cumulative,
        tuple(previous),
        f"zone {worst_zone} at {release_figure:.4f}, cumulative {cumulative:.4f}",
        left,
    )
