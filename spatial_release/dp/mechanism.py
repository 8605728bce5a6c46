"""DP partition selection and noise on every published count, by OpenDP's thresholded mechanisms.

One measurement covers every figure of the release (cells and every margin level): OpenDP's
`make_laplace_threshold` (approximate DP, epsilon and delta) or `make_gaussian_threshold` (zCDP, rho and
delta) over a map from key to bounded count. Each adds integer noise to the count of every key present in the
bounded data and releases only the keys whose noisy count clears the threshold: the selection of which keys
appear and the noise on their counts in one propose-test-release step (Rogers 2023). Keys absent from the data
are never candidates, so no key reveals itself by appearing. The privacy map, the calibration of the scale and
of the threshold and the check of the result against the budget are all OpenDP's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import opendp.prelude as dp
import pandas as pd

from spatial_release.levels import TOTAL

Accounting = Literal["approx", "zcdp"]
KEY_SEP = "\x1f"  # never in a level name, an area id or an ISO timestamp
THRESHOLD_CEILING = 2**30  # far above any count: the calibration's search bound for the threshold
SCALE_CEILING = 1e9


@dataclass(frozen=True)
class DpParams:
    """What the policy fixes for one release: the accounting (`approx`: epsilon and delta, Laplace noise;
    `zcdp`: rho and delta, Gaussian noise), the loss of this release, and the contribution bounds."""

    accounting: Accounting
    delta: float
    max_buckets: int
    max_areas: int
    epsilon: float | None = None
    rho: float | None = None

    def __post_init__(self) -> None:
        budget = self.epsilon if self.accounting == "approx" else self.rho
        if budget is None or budget <= 0:
            name = "epsilon" if self.accounting == "approx" else "rho"
            raise ValueError(f"{self.accounting} accounting needs a positive {name}, not {budget!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), not {self.delta!r}")
        if self.max_buckets < 1 or self.max_areas < 1:
            raise ValueError("max_buckets and max_areas must be at least 1")

    @property
    def loss(self) -> tuple[float, float]:
        """(epsilon, delta) or (rho, delta): what the release spends of the population's budget."""
        return (self.epsilon if self.accounting == "approx" else self.rho) or 0.0, self.delta


@dataclass(frozen=True)
class Sensitivity:
    """How far one unit can move the map of counts after bounding: it touches at most `l0` keys, each by at
    most `linf`; so l1 = l0 * linf and l2 = sqrt(l0) * linf."""

    l0: int
    linf: int = 1

    @classmethod
    def of(cls, levels: Sequence[str], max_buckets: int, max_areas: int, rungs: int = 0) -> Sensitivity:
        """A kept (unit, bucket) is in at most C cells, so in at most C areas of each coarser level and in one
        bucket total; the unit keeps at most B buckets. Each of those figures counts it once. Each coarser time
        rung published beside the policy's bucket is counted from the same kept rows, so it adds as many
        figures again (at most B coarse buckets and B x C coarse (bucket, area) pairs): the l0 grows with
        the rungs, and the loss of one measurement over every rung is that of the rungs composed."""
        per_bucket = sum(1 if level == TOTAL else max_areas for level in levels)
        return cls(l0=(1 + rungs) * max_buckets * per_bucket)

    @property
    def l1(self) -> int:
        return self.l0 * self.linf

    @property
    def l2(self) -> float:
        return math.sqrt(self.l0) * self.linf

    def d_in(self) -> tuple[int, int, int]:
        """OpenDP's L01Inf / L02Inf input distance (l0, l1 or l2 bound, linf): OpenDP takes the tighter of the
        given norm and the one l0 and linf imply, so the l1 bound is passed as the norm for both."""
        return (self.l0, self.l1, self.linf)

    def describe(self) -> dict:
        return {"l0": self.l0, "l1": self.l1, "l2": round(self.l2, 6), "linf": self.linf}


@dataclass(frozen=True)
class Calibration:
    params: DpParams
    sensitivity: Sensitivity
    scale: float
    threshold: int

    def measurement(self) -> dp.Measurement:
        return _measurement(self.params.accounting, self.scale, self.threshold)

    def spent(self) -> tuple[float, float]:
        """The (epsilon or rho, delta) OpenDP's privacy map gives for this sensitivity."""
        first, delta = self.measurement().map(self.sensitivity.d_in())
        return float(first), float(delta)

    def interval95(self) -> float:
        """Half-width of the central 95 % interval of the noise on one count (before post-processing)."""
        if self.params.accounting == "approx":
            return self.scale * math.log(1 / 0.05)  # Laplace: P(|X| > t) = exp(-t / scale)
        return 1.959964 * self.scale

    def describe(self) -> dict:
        """What release.json records: never a noise draw."""
        p = self.params
        spent, delta = self.spent()
        return {
            "library": "opendp 0.16.0",
            "mechanism": "make_laplace_threshold" if p.accounting == "approx" else "make_gaussian_threshold",
            "noise": "discrete Laplace" if p.accounting == "approx" else "discrete Gaussian",
            "accounting": p.accounting,
            "epsilon" if p.accounting == "approx" else "rho": spent,
            "delta": delta,
            "scale": self.scale,
            "threshold": self.threshold,
            "interval95": self.interval95(),
            "max_buckets": p.max_buckets,
            "max_areas": p.max_areas,
            "sensitivity": self.sensitivity.describe(),
        }


def _measurement(accounting: Accounting, scale: float, threshold: int) -> dp.Measurement:
    # the threshold mechanisms are in OpenDP's contrib set (their proofs are not yet vetted upstream)
    dp.enable_features("contrib")
    domain = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T="i64"))
    if accounting == "approx":
        metric = dp.l01inf_distance(dp.absolute_distance(T="i64"))
        return dp.m.make_laplace_threshold(domain, metric, scale=scale, threshold=threshold)
    metric = dp.l02inf_distance(dp.absolute_distance(T="i64"))
    return dp.m.make_gaussian_threshold(domain, metric, scale=scale, threshold=threshold)


def calibrate(params: DpParams, sensitivity: Sensitivity) -> Calibration:
    """The smallest noise scale whose privacy map meets epsilon (or rho), then the smallest threshold whose map
    meets delta; both searched by OpenDP's `binary_search` on the measurement's own map, then checked."""
    budget, delta = params.loss
    d_in = sensitivity.d_in()
    scale = dp.binary_search(
        lambda s: _measurement(params.accounting, s, THRESHOLD_CEILING).map(d_in)[0] <= budget,
        bounds=(1e-9, SCALE_CEILING),
        T=float,
    )
    threshold = dp.binary_search(
        lambda t: _measurement(params.accounting, scale, int(t)).map(d_in)[1] <= delta,
        bounds=(1, THRESHOLD_CEILING),
        T=int,
    )
    calibration = Calibration(params, sensitivity, float(scale), int(threshold))
    if not calibration.measurement().check(d_in, (budget, delta)):
        raise RuntimeError(f"the calibrated mechanism does not meet {params.loss} at {sensitivity}")
    return calibration


@dataclass(frozen=True)
class DpRelease:
    counts: pd.DataFrame  # level, area_id, bucket_start, n: the selected keys and their noisy counts
    calibration: Calibration


def key_strings(counts: pd.DataFrame) -> list[str]:
    """One string per figure (level, area, bucket in ns): the keys of OpenDP's map of counts."""
    buckets = pd.DatetimeIndex(pd.to_datetime(counts["bucket_start"], utc=True)).as_unit("ns").asi8
    return [KEY_SEP.join((lv, str(a), str(b))) for lv, a, b in zip(counts["level"], counts["area_id"], buckets)]


def _frame(noisy: dict[str, int]) -> pd.DataFrame:
    parts = [key.split(KEY_SEP) for key in noisy]
    frame = pd.DataFrame(parts, columns=["level", "area_id", "bucket"]) if parts else _empty_parts()
    bucket = pd.to_datetime(frame["bucket"].astype("int64"), utc=True)
    values = np.fromiter(noisy.values(), dtype="int64", count=len(noisy))
    return pd.DataFrame({"level": frame["level"], "area_id": frame["area_id"], "bucket_start": bucket, "n": values})


def _empty_parts() -> pd.DataFrame:
    return pd.DataFrame({"level": pd.Series(dtype=str), "area_id": pd.Series(dtype=str), "bucket": pd.Series(dtype=str)})


def release_counts(counts: pd.DataFrame, calibration: Calibration) -> DpRelease:
    """Run the calibrated measurement on the bounded counts (level, area_id, bucket_start, n)."""
    measurement = calibration.measurement()
    noisy = measurement(dict(zip(key_strings(counts), counts["n"].astype("int64").tolist())))
    frame = _frame(noisy).sort_values(["level", "area_id", "bucket_start"], ignore_index=True)
    return DpRelease(frame, calibration)
