"""The advantage gate on synthetic cities: per configuration, the worst zone's figures at the finest release
(no coarsening: the decision the gate takes on what was counted) and the risk step's time.

    python bench/advantage_table.py                      # 300 and 2,000 persons, 1 km x 1 day and 250 m x 1 h
    python bench/advantage_table.py --persons 300 --configs 1000:1d

Each configuration: generated pings (spatial_release.traces.synthetic, one quarter), the demo programme's
policy with the grid and bucket given, k = 5, risk zones of 8 km, `risk.model: advantage`, `coarsen: propose`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_policy(folder: Path, size_m: int, bucket: str) -> Path:
    data = yaml.safe_load((ROOT / "policies" / "demo.yaml").read_text())
    data["name"] = "advantage-bench"
    data["source"].pop("synthetic", None)
    data["source"]["identifiers"] = ["device_id"]
    data["geometry"] = {"kind": "grid", "crs": "EPSG:32618", "size_m": size_m, "parents_m": [8000]}
    data["time"] = {"bucket": bucket, "timezone": "America/New_York"}
    data["suppression"] = {"budget": 1.0}
    data["risk"].update(
        zones="grid_8000m",
        landscape=str(ROOT / "policies" / "landscapes" / "demo.yaml"),
        model="advantage",
        coarsen="propose",
    )
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(persons: int, size_m: int, bucket: str) -> dict:
    from spatial_release.cli import run_release
    from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pings = write_pings(
            generate_pings(SyntheticConfig(persons=persons, start=date(2018, 1, 1))), folder / "pings.parquet"
        )
        policy = write_policy(folder, size_m, bucket)
        started = time.perf_counter()
        outcome = run_release(str(policy), "2018-Q1", [str(pings)], out=str(folder / "out"), ledger=str(folder / "ledger"))
        seconds = time.perf_counter() - started
        if not (folder / "out" / "work" / "advantage-bench" / "2018-Q1" / "risk" / "risk.json").exists():
            raise RuntimeError(f"no risk assessment: {[f.message for f in outcome.failures]}")
        risk = json.loads((folder / "out" / "work" / "advantage-bench" / "2018-Q1" / "risk" / "risk.json").read_text())
    worst = max(
        (z for z in risk["zones"] if z.get("advantage_ucb") is not None),
        key=lambda z: max(z["advantage_ucb"], z.get("exposed_share") or 0.0),
    )
    return {
        "persons": persons,
        "grid": f"{size_m} m x {bucket}",
        "worst_zone": worst["zone"],
        "success_without": worst["success_without"],
        "success_with": worst["success_with"],
        "advantage": worst["advantage"],
        "advantage_ucb": worst["advantage_ucb"],
        "strongest": worst["strongest"],
        "classifier": worst.get("classifier"),  # the count classifier, reported beside the gate (risk.count_classifier)
        "uniqueness_bound": risk["upper_bound"],
        "decision": risk["status"] + ("" if outcome.published else " (not published)"),
        "risk_step_s": risk["seconds"],
        "release_s": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--persons", type=int, nargs="+", default=[300, 2000])
    parser.add_argument("--configs", nargs="+", default=["1000:1d", "250:1h"], help="size_m:bucket")
    args = parser.parse_args()
    rows = []
    for persons in args.persons:
        for config in args.configs:
            size, bucket = config.split(":")
            rows.append(run(persons, int(size), bucket))
            print(json.dumps(rows[-1]), flush=True)
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")


if __name__ == "__main__":
    main()
