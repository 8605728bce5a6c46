"""Risk estimator benchmark: per-zone Monte-Carlo re-identification risk on generated persons.

Keys are the published (500 m cell, day) groups (n >= k) each person was counted in (presence), risk zones
are the 8 km parents, p = 4 known points, S = 10 draws per person and anchor zone.

    python bench/risk_bench.py --persons 100000 --days 14
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from datetime import date
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spatial_release.geometry import Grid  # noqa: E402
from spatial_release.policy import GridGeometry  # noqa: E402
from spatial_release.risk import RiskParams, estimate_risk  # noqa: E402
from spatial_release.suppression.rules import publishable  # noqa: E402
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--points", type=int, default=4)
    parser.add_argument("--draws", type=int, default=10)
    args = parser.parse_args()
    started = time.perf_counter()
    pings = generate_pings(SyntheticConfig(persons=args.persons, days=args.days, start=date(2018, 1, 1)))
    grid = Grid(GridGeometry(kind="grid", crs="EPSG:32618", size_m=500, parents_m=[8000]))
    frame = pd.DataFrame(
        {
            "unit": pings["device_id"],
            "cell_id": grid.locate(pings["lon"].to_numpy(), pings["lat"].to_numpy()),
            "day": pd.to_datetime(pings["local_time"]).dt.strftime("%Y-%m-%d"),
        }
    )
    per = frame.groupby(["unit", "day", "cell_id"]).size().rename("n").reset_index()
    per = per.sort_values(["unit", "day", "n", "cell_id"], ascending=[True, True, False, True])
    member = per.drop_duplicates(["unit", "day"])
    counts = member.groupby(["cell_id", "day"]).size()
    published = counts[publishable(counts, args.k)].index
    member = member.set_index(["cell_id", "day"]).loc[lambda m: m.index.isin(published)].reset_index()
    keys = pd.DataFrame({"unit": member["unit"], "key": member["cell_id"] + "@" + member["day"]})
    hierarchy = grid.hierarchy(member["cell_id"].drop_duplicates())
    zone_of_cell = dict(zip(hierarchy["cell_id"], hierarchy["grid_8000m"]))
    key_zone = pd.Series([zone_of_cell[k.split("@")[0]] for k in keys["key"].unique()], index=keys["key"].unique())
    prepared = time.perf_counter() - started
    report = estimate_risk(keys, key_zone, RiskParams(points=args.points, draws=args.draws))
    worst = report.worst_zone()
    assert worst is not None, "no zone has a figure: too few persons or days for the k"
    print(
        f"persons {args.persons}, days {args.days}: {report.units} units with released keys, {report.keys} keys, "
        f"{len(keys)} unit-key pairs, {len(report.zones)} zones (data prepared in {prepared:.1f} s)"
    )
    print(
        f"estimator: {report.seconds:.1f} s for p={args.points}, S={args.draws} "
        f"({report.units / report.seconds:,.0f} units/s); worst zone {worst.zone} mean {worst.mean:.4f}, "
        f"pooled {report.pooled:.4f}; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main()
