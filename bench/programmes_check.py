"""Run the shipped Citi Bike programmes on the real data in one ledger and check what a user gets.

    python bench/programmes_check.py --out /tmp/programmes [--quarter 2018-Q1] [--months 2018-01 2018-02 2018-03]

Publishes the quarterly programme (`policies/jc-bikes.yaml`), then each month through the monthly one
(`policies/jc-bikes-monthly.yaml`), with the command line, in one ledger under --out. Then, from the published
files alone (and the work areas' true counts, for what each release withheld), it prints:
- per release: exit code, published cells and margins, the gate's attack figure and the uniqueness upper bound;
- per ward of the quarter: in how many weeks it is shown at day or week resolution;
- across the releases: keys published with two values (must be 0), and figures one release withheld that a
  later one publishes (must be 0).
Exits 1 when a release is refused or a cross-release check fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
TZ = "America/New_York"


def release(policy: str, period: str, out: Path) -> int:
    command = [
        sys.executable,
        "-m",
        "spatial_release.cli",
        "release",
        "--policy",
        str(ROOT / "policies" / policy),
        "--period",
        period,
        "--out",
        str(out),
        "--ledger",
        str(out / "ledger"),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    (out / f"{policy}-{period}.log").write_text(done.stdout + done.stderr)
    return done.returncode


def figures(folder: Path) -> pd.DataFrame:
    cells, margins = pd.read_parquet(folder / "cells.parquet"), pd.read_parquet(folder / "margins.parquet")
    count = next(c for c in margins.columns if c.startswith("n_"))
    cells = cells.assign(level="cell", area_id=cells["cell_id"])
    return pd.concat(
        [cells[["level", "area_id", "bucket_start", count]], margins[["level", "area_id", "bucket_start", count]]]
    ).rename(columns={count: "n"})


def true_figures(work: Path) -> pd.DataFrame:
    cells = pd.read_parquet(work / "counts" / "cell_counts.parquet")
    margins = pd.read_parquet(work / "counts" / "margin_counts.parquet")
    return pd.concat(
        [
            cells.assign(level="cell", area_id=cells["cell_id"])[["level", "area_id", "bucket_start", "n"]],
            margins[["level", "area_id", "bucket_start", "n"]],
        ]
    )


def ward_weeks(folder: Path) -> dict[str, tuple[int, int]]:
    """Per ward: weeks shown at day or week resolution, and weeks in the release."""
    shown = figures(folder)
    week = shown["bucket_start"].dt.tz_convert(TZ).dt.tz_localize(None).dt.to_period("W-SUN")
    shown = shown.assign(week=week)
    at_cell = shown[shown["level"].isin(["cell", "cell@1w"])]
    weeks = sorted(set(shown.loc[shown["level"].isin(["total", "total@1w"]), "week"]) | set(at_cell["week"]))
    seen = set(zip(at_cell["area_id"], at_cell["week"]))
    return {ward: (sum((ward, w) in seen for w in weeks), len(weeks)) for ward in "ABCDEF"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quarter", default="2018-Q1")
    parser.add_argument("--months", nargs="*", default=["2018-01", "2018-02", "2018-03"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [("jc-bikes.yaml", "jc-bikes", args.quarter)] + [
        ("jc-bikes-monthly.yaml", "jc-bikes-monthly", m) for m in args.months
    ]
    ok = True
    published = []
    for policy, dataset, period in runs:
        code = release(policy, period, args.out)
        folder = args.out / "releases" / dataset / period
        if code != 0:
            ok = False
            print(f"{dataset} {period}: exit {code} (log: {args.out / f'{policy}-{period}.log'})")
            continue
        record = json.loads((folder / "release.json").read_text())
        risk = record["risk"]
        shown = figures(folder)
        print(
            f"{dataset} {period}: published, {int((shown['level'] == 'cell').sum())} cells, "
            f"{int((shown['level'] != 'cell').sum())} margins; gate ({risk.get('model')}) worst zone "
            f"{risk['worst_zone']} {risk['release_figure']:.4f}, cumulative {risk['cumulative']:.4f}; "
            f"upper bound {risk.get('upper_bound') or 0:.4f} (zone {risk.get('upper_bound_zone')})"
        )
        published.append((dataset, period, folder, args.out / "work" / dataset / period))
    if published and published[0][0] == "jc-bikes":
        for ward, (n, weeks) in ward_weeks(published[0][2]).items():
            print(f"  ward {ward}: shown at day or week resolution in {n} of {weeks} weeks")
    key = ["level", "area_id", "bucket_start"]
    disagree = leaked = 0
    for i, (_, _, folder_a, work_a) in enumerate(published):
        a = figures(folder_a)
        withheld_a = true_figures(work_a).merge(a[key], on=key, how="left", indicator=True)
        withheld_a = withheld_a[withheld_a["_merge"] == "left_only"][key]
        for _, _, folder_b, _ in published[i + 1 :]:
            b = figures(folder_b)
            both = a.merge(b, on=key, suffixes=("_a", "_b"))
            disagree += int((both["n_a"] != both["n_b"]).sum())
            leaked += len(withheld_a.merge(b[key], on=key))
    print(f"keys published with two values: {disagree}; figures one release withheld that a later one publishes: {leaked}")
    return 0 if ok and disagree == 0 and leaked == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
