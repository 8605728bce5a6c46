"""The DP release tests' inputs and helpers: a small fleet with home cells (`dp_pings`), a DP policy over it
(`dp_policy`), the settings of a release run, and a release through the stages without Dagster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from spatial_release import stages
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy
from support.fixture import SIZE, lonlat_in, policy_dict, write_policy

CELLS = [(580_000 + SIZE * i, 4_508_000 + SIZE * j) for i in range(2) for j in range(2)]  # one 2 km parent
DP = {
    "method": "dp",
    "epsilon": 2.0,
    "delta": 1e-6,
    "max_buckets": 2,
    "max_areas": 1,
    "seed": 11,
    "budget": {"epsilon": 5.0, "delta": 1e-5},
}


def dp_pings(devices: int = 1600, seed: int = 3) -> pd.DataFrame:
    """Devices with a home cell, seen on 4 random days of January-February 2018 (one ping a day)."""
    rng = np.random.default_rng(seed)
    days = pd.date_range("2018-01-01", "2018-02-28", freq="D")
    rows = []
    for d in range(devices):
        home = CELLS[int(rng.integers(len(CELLS)))]
        for day in rng.choice(days, 4, replace=False):
            lon, lat = lonlat_in(home, 1, rng)
            rows.append(
                {
                    "device": f"dev{d}",
                    "when": f"{pd.Timestamp(day):%Y-%m-%d} 12:00:00",
                    "lon": round(float(lon[0]), 7),
                    "lat": round(float(lat[0]), 7),
                    "gender": "f",
                }
            )
    return pd.DataFrame(rows)


def settings(root: Path) -> dict:
    return {name: str(root / name.removesuffix("_dir")) for name in ("releases_dir", "work_dir", "ledger_dir", "alerts_dir")}


def dp_policy(folder: Path, traces: Path, name: str, period: str = "quarter", **protection) -> Path:
    data = policy_dict(str(traces), name=name, population="dp-fleet", period=period)
    data["time"] = {"bucket": "1w", "timezone": "America/New_York"}
    data["protection"] = {k: v for k, v in {**DP, **protection}.items() if v is not None}
    return write_policy(folder, data, name=f"{name}.yaml")


def failed_checks(run) -> dict[str, str]:
    failed = {}
    for event in run.candidate.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            if not data.passed:
                failed[data.check_name] = data.metadata.get("summary").value if data.metadata.get("summary") else ""
    return failed


def publish_by_stages(policy_path: Path, period: str, root: Path) -> Path:
    """The release steps without Dagster (the publish step re-evaluates every guarantee under the ledger lock)."""
    ctx = stages.ReleaseContext(load_policy(policy_path), Period.parse(period), root / "work")
    ledger = Ledger(root / "ledger", root / "releases")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    stages.run_risk(ctx, ledger)
    return stages.run_publish(ctx, root / "releases", ledger)[0]
