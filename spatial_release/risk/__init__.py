"""Re-identification risk per zone and the risk budget gate (no Dagster here)."""

from spatial_release.risk.budget import BLOCK, PUBLISH, WARN, GateDecision, cumulative_risk, decide
from spatial_release.risk.estimator import RiskParams, RiskReport, ZoneRisk, estimate_risk
from spatial_release.risk.figures import Adversary, pooled_figure, public_ratio, release_figure

__all__ = [
    "Adversary",
    "BLOCK",
    "PUBLISH",
    "WARN",
    "GateDecision",
    "RiskParams",
    "RiskReport",
    "ZoneRisk",
    "cumulative_risk",
    "decide",
    "estimate_risk",
    "pooled_figure",
    "public_ratio",
    "release_figure",
]
