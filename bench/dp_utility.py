"""k-anonymity against differential privacy on the same data: per configuration, the share of the policy's
area-buckets shown, the median relative error of the published counts, the map's coverage and the risk gate's
figure.

    python bench/dp_utility.py                                   # Citi Bike 2018-Q1 and the synthetic city
    python bench/dp_utility.py --datasets synthetic --epsilons 1 4
    python bench/dp_utility.py --frontier                        # configurations compared at equal epsilon

Each dataset runs its shipped k-anonymous policy (policies/jc-bikes.yaml at k = 20; policies/demo.yaml at k = 5,
synthetic traces from its generator) and the same policy under `protection.method: dp` at each epsilon per
period (delta 1e-6; contribution bounds per dataset below; the main geometry only, no linked zoning, no
time ladder and no structural zeros), every run in its own output folder and ledger.

- shown: published (area, bucket) figures of the main geometry's cells at the policy's bucket, over the
  non-empty ones counted (k-anonymity with a time ladder: `shown_any` also counts a cell-bucket shown by a
  coarser rung).
- error: median over published cells and margins of |published - true| / true (true: the distinct units
  counted before protection; k-anonymity publishes true counts).
- coverage: share of the cells holding a unit in the period that show at least one figure (any bucket, any rung).
- frontier (`--frontier`): per dataset and epsilon, one DP release with the time ladder [4w, period] whose
  `protection.compare` lists other configurations (the policy's bucket or a rung, bounds B and C); each is
  calibrated by OpenDP at the same epsilon and run once on the data by the protection stage, and the table
  reads their share of non-empty cell figures shown and median relative error from the internal manifest
  (release.json carries only their parameters).
- risk: the figure release.json records as the gate's (`risk.model` in brackets): the advantage gate's worst
  zone for jc-bikes, the attack gate's for the demo; under DP the membership advantage the loss allows,
  (e^eps - 1 + 2 delta) / (e^eps + 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATASETS = {
    # policy file, period, DP bucket, contribution bounds (max_buckets B, max_areas C) tried: a few buckets per
    # unit (little noise, counts biased down by the units' other buckets) and every bucket of the quarter
    "citibike": ("jc-bikes.yaml", "2018-Q1", "1w", [(4, 3), (13, 6)]),
    "synthetic": ("demo.yaml", "2018-Q1", "1w", [(4, 1), (13, 1)]),
}
PATH_FIELDS = (("source", "paths"), ("geometry", "path"), ("risk", "landscape"), ("suppression", "zeros"))


def absolute_paths(data: dict) -> dict:
    """The policy's file paths made absolute (the derived policy is written in a temporary folder)."""
    base = ROOT / "policies"
    for section, key in PATH_FIELDS:
        value = (data.get(section) or {}).get(key)
        if isinstance(value, list):
            data[section][key] = [str((base / v).resolve()) for v in value]
        elif isinstance(value, str):
            data[section][key] = str((base / value).resolve())
    for linked in (data.get("geometry") or {}).get("linked", []):
        linked["path"] = str((base / linked["path"]).resolve())
    return data


# configurations compared at equal epsilon: (rung or None for the DP bucket, B, C) beside each dataset's first bounds
FRONTIER = {
    "citibike": [(None, 13, 6), ("4w", 1, 3), ("4w", 3, 3), ("period", 1, 3), ("period", 1, 6)],
    "synthetic": [(None, 13, 1), ("4w", 1, 1), ("4w", 3, 1), ("period", 1, 1), ("period", 1, 2)],
}
LADDER = ["4w", "period"]


def dp_policy(data: dict, epsilon: float, bucket: str, max_buckets: int, max_areas: int) -> dict:
    data = json.loads(json.dumps(data))
    data["name"] = f"{data['name']}-dp"
    data["geometry"].pop("linked", None)
    data["time"] = {"bucket": bucket, "timezone": data["time"]["timezone"]}
    data["suppression"] = {k: v for k, v in data.get("suppression", {}).items() if k not in ("zeros", "audit_with")}
    data["protection"] = {
        "method": "dp",
        "epsilon": epsilon,
        "delta": 1e-6,
        "max_buckets": max_buckets,
        "max_areas": max_areas,
        "seed": 20180101,
        "budget": {"epsilon": epsilon, "delta": 1e-6},
    }
    return data


def relative_errors(published: pd.DataFrame, truth: pd.DataFrame, key: list[str], column: str) -> pd.Series:
    merged = published[[*key, column]].merge(truth[[*key, "n"]], on=key, how="left")
    merged = merged[merged["n"] > 0]
    return (merged[column] - merged["n"]).abs() / merged["n"]


def measure(folder: Path, work: Path, policy_path: Path, period: str) -> dict:
    from spatial_release.levels import LEAF, RUNG_SEP
    from spatial_release.period import Period
    from spatial_release.policy import load_policy
    from spatial_release.stages import ReleaseContext
    from spatial_release.suppression.utility import leaf_shown

    policy = load_policy(policy_path)
    column = policy.count_column
    record = json.loads((folder / "release.json").read_text())
    cells, margins = pd.read_parquet(folder / "cells.parquet"), pd.read_parquet(folder / "margins.parquet")
    true_cells = pd.read_parquet(work / "counts" / "cell_counts.parquet")
    true_margins = pd.read_parquet(work / "counts" / "margin_counts.parquet")
    true_cells = true_cells[true_cells["n"] > 0]
    at_bucket = true_cells.merge(cells[["cell_id", "bucket_start"]], on=["cell_id", "bucket_start"], how="inner")
    links = ReleaseContext(policy, Period.parse(period), work.parents[1]).structure.time_links if policy.time.ladder else ()
    shown_any = leaf_shown(true_cells, cells, margins, links)
    errors = pd.concat(
        [
            relative_errors(cells, true_cells, ["cell_id", "bucket_start"], column),
            relative_errors(margins, true_margins, ["level", "area_id", "bucket_start"], column),
        ]
    )
    rung_cells = margins[margins["level"].str.startswith(LEAF + RUNG_SEP)]["area_id"]
    shown_areas = set(cells.loc[cells[column] > 0, "cell_id"]) | set(rung_cells)
    risk = record["risk"] or {}
    return {
        "shown": round(len(at_bucket) / len(true_cells), 3),
        "shown_any": round(float(shown_any.mean()), 3),
        "error_median": round(float(errors.median()), 3) if len(errors) else None,
        "coverage": round(len(shown_areas & set(true_cells["cell_id"])) / true_cells["cell_id"].nunique(), 3),
        "risk": f"{risk.get('release_figure'):.3g} ({risk.get('model')})"
        if risk.get("release_figure") is not None
        else None,
        "figures": len(cells) + len(margins),
    }


def frontier_policy(dataset: str, epsilon: float) -> dict:
    """The dataset's DP policy at its first bounds with the ladder and the configurations to compare."""
    name, _, bucket, bounds = DATASETS[dataset]
    data = dp_policy(absolute_paths(yaml.safe_load((ROOT / "policies" / name).read_text())), epsilon, bucket, *bounds[0])
    data["time"]["ladder"] = LADDER
    compare = [{"max_buckets": b, "max_areas": c, **({"rung": r} if r else {})} for r, b, c in FRONTIER[dataset]]
    data["protection"]["compare"] = compare
    return data


def frontier(dataset: str, epsilon: float) -> list[dict]:
    """The frontier rows of one DP release with the configurations compared (internal manifest)."""
    from spatial_release.cli import run_release
    from spatial_release.stages import ProtectionManifest

    _, period, _, _ = DATASETS[dataset]
    data = frontier_policy(dataset, epsilon)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        policy_path = folder / "policy.yaml"
        policy_path.write_text(yaml.safe_dump(data, sort_keys=False))
        outcome = run_release(str(policy_path), period, out=str(folder / "out"), ledger=str(folder / "ledger"))
        if not outcome.published:
            raise RuntimeError(f"{dataset} {epsilon}: not published: {[f.message for f in outcome.failures]}")
        work = folder / "out" / "work" / data["name"] / period / "candidate"
        rows = ProtectionManifest.read(work).summary.frontier or []
    return [
        {
            "dataset": dataset,
            "epsilon": epsilon,
            "configuration": row.configuration,
            "l0": row.l0,
            "scale": round(row.scale, 3),
            "threshold": row.threshold,
            "shown": round(row.shown, 3),
            "error_median": round(row.error_median, 3) if row.error_median is not None else None,
            "published": row.published,
        }
        for row in rows
    ]


def run(dataset: str, epsilon: float | None, max_buckets: int = 0, max_areas: int = 0) -> dict:
    from spatial_release.cli import run_release

    name, period, bucket, _ = DATASETS[dataset]
    base = absolute_paths(yaml.safe_load((ROOT / "policies" / name).read_text()))
    data = base if epsilon is None else dp_policy(base, epsilon, bucket, max_buckets, max_areas)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        policy_path = folder / "policy.yaml"
        policy_path.write_text(yaml.safe_dump(data, sort_keys=False))
        for other in (data.get("suppression") or {}).get("audit_with", []):  # named beside the policy
            beside = absolute_paths(yaml.safe_load((ROOT / "policies" / f"{other}.yaml").read_text()))
            (folder / f"{other}.yaml").write_text(yaml.safe_dump(beside, sort_keys=False))
        started = time.perf_counter()
        outcome = run_release(str(policy_path), period, out=str(folder / "out"), ledger=str(folder / "ledger"))
        seconds = time.perf_counter() - started
        if not outcome.published or outcome.release_dir is None:
            raise RuntimeError(f"{dataset} {epsilon}: not published: {[f.message for f in outcome.failures]}")
        row = measure(outcome.release_dir, folder / "out" / "work" / data["name"] / period, policy_path, period)
    method = f"k-anonymity k={data['k']}" if epsilon is None else f"DP eps={epsilon:g} (B={max_buckets}, C={max_areas})"
    time_spec = data["time"]
    ladder = f" ladder {time_spec['ladder']}" if time_spec.get("ladder") else ""
    return {
        "dataset": dataset,
        "method": method,
        "bucket": time_spec["bucket"] + ladder,
        **row,
        "release_s": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--frontier", action="store_true", help="configurations compared at equal epsilon")
    args = parser.parse_args()
    from spatial_release.report import markdown_table

    if args.frontier:
        table = []
        for dataset in args.datasets:
            for epsilon in args.epsilons:
                table += frontier(dataset, epsilon)
                print(json.dumps(table[-1]), flush=True)
        print(markdown_table(list(table[0]), [[str(v) for v in row.values()] for row in table]))
        return
    runs = [
        (dataset, epsilon, *bounds)
        for dataset in args.datasets
        for epsilon, bounds in [(None, (0, 0))] + [(e, b) for b in DATASETS[dataset][3] for e in args.epsilons]
    ]
    rows = []
    for dataset, epsilon, max_buckets, max_areas in runs:
        rows.append(run(dataset, epsilon, max_buckets, max_areas))
        print(json.dumps(rows[-1]), flush=True)  # each row as it comes: the whole takes several minutes
    print(markdown_table(list(rows[0]), [[str(v) for v in row.values()] for row in rows]))


if __name__ == "__main__":
    main()
