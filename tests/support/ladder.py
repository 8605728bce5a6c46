"""The ladder fixture: devices over two weeks in four 1 km cells, and a day-bucket policy over them with a week
and period ladder, for the ladder tests and the release method's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from spatial_release.policy import Policy, load_policy
from support.fixture import CRS, policy_dict, write_policy


def ladder_pings(first_day: str = "2018-01-08", n_days: int = 14) -> pd.DataFrame:
    """Devices over two weeks in four 1 km cells of one 2 km parent: some every day, some once."""
    from pyproj import Transformer

    to_lonlat = Transformer.from_crs(CRS, "EPSG:4326", always_xy=True)
    rng = np.random.default_rng(11)
    corners = [(580_000, 4_508_000), (581_000, 4_508_000), (580_000, 4_509_000), (581_000, 4_509_000)]
    rows = []
    days = pd.date_range(first_day, periods=n_days, freq="D")  # Monday 8 January: two whole weeks
    for device in range(40):
        home = corners[device % 4] if device < 36 else corners[3]
        active = days if device % 3 == 0 else days[rng.choice(n_days, size=int(rng.integers(1, 5)), replace=False)]
        for day in active:
            corner = home if rng.random() < 0.8 else corners[int(rng.integers(0, 4))]
            for hour in (9, 12, 17):
                x, y = corner[0] + rng.uniform(100, 900), corner[1] + rng.uniform(100, 900)
                lon, lat = to_lonlat.transform(x, y)
                rows.append(
                    {
                        "device": f"d{device}",
                        "when": f"{day.date()} {hour:02d}:15:00",
                        "lon": round(lon, 7),
                        "lat": round(lat, 7),
                        "gender": "f",
                    }
                )
    return pd.DataFrame(rows)


def write_ladder_policy(folder: Path) -> Policy:
    """The ladder pings in `folder`/traces.csv and a policy over them (k = 5, day buckets, a week and period
    ladder, coarsening applied as in the shipped policies: a zone over the gate is shown coarser)."""
    traces = folder / "traces.csv"
    ladder_pings().to_csv(traces, index=False)
    data = policy_dict(str(traces), k=5)
    data["time"] = {"bucket": "1d", "timezone": "America/New_York", "ladder": ["1w", "period"]}
    data["risk"]["coarsen"] = "apply"
    return load_policy(write_policy(folder, data))
