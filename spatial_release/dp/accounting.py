"""A population's privacy loss over its releases, composed by OpenDP, and the membership advantage that a
loss allows (the bound a measured advantage must stay within)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import opendp.prelude as dp

from spatial_release.dp.mechanism import Accounting


def _spent(loss: tuple[float, float], accounting: Accounting) -> dp.Measurement:
    """A measurement standing for one published release: its privacy map returns the loss the ledger records
    for it. OpenDP's user measurements are gated behind 'honest-but-curious' (the map is taken on trust: here
    it is the calibrated loss the release's own OpenDP measurement reported)."""
    dp.enable_features("contrib", "honest-but-curious")
    inner = dp.max_divergence() if accounting == "approx" else dp.zero_concentrated_divergence()
    return dp.m.make_user_measurement(
        dp.atom_domain(T=bool),
        dp.symmetric_distance(),
        dp.approximate(inner),
        function=lambda x: x,
        privacy_map=lambda _d: loss,
    )


def compose(losses: Sequence[tuple[float, float]], accounting: Accounting) -> tuple[float, float]:
    """(epsilon, delta) or (rho, delta) of the releases together, by OpenDP's sequential composition
    (epsilons and deltas add under approximate DP; rhos and deltas under zCDP)."""
    if not losses:
        return 0.0, 0.0
    first, delta = dp.c.make_composition([_spent(loss, accounting) for loss in losses]).map(1)
    return float(first), float(delta)


def approx_epsilon(loss: tuple[float, float], accounting: Accounting) -> tuple[float, float]:
    """(epsilon, delta) of a loss: itself under approximate DP; under zCDP, OpenDP's conversion of
    (rho, delta) to approximate DP at twice the delta (the conversion spends as much delta again)."""
    if accounting == "approx":
        return loss
    converted = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(_spent(loss, accounting)), 2 * loss[1])
    epsilon, delta = converted.map(1)
    return float(epsilon), float(delta)


def advantage_bound(epsilon: float, delta: float) -> float:
    """The largest membership advantage (TPR - FPR) any test has against an (epsilon, delta)-DP mechanism
    (Yeom et al. 2018; Humphries et al. 2020)."""
    return min(1.0, (math.exp(epsilon) - 1 + 2 * delta) / (math.exp(epsilon) + 1))
