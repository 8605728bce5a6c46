"""Differencing as membership, measured on real counterfactuals with the attacker's own lower bounds.

The attacker knows the target was in a withheld figure w and derives w's least value lo from everything
published (the integer optimum of the audit's LP). Test: "in the data iff lo >= 1". Without the target every figure
it is in is one lower, so lo_without >= lo_with - 1: the test can only tell the two releases apart on figures whose
lower bound is exactly 1 (`spatial_release/suppression/existence.py`; the suppression audit check now blocks any
such figure). This script re-solves every withheld primary's lower bound to its optimum, counts those at exactly
1, and re-protects the city without sampled targets in such figures (none holds a published figure at exactly k)
to see whether the bound falls to 0.

The protection's own audit keeps *witness* bounds (a feasible value at the protection bound v - 1), which are not
lower bounds: an earlier version of this script read them and counted every count of 2 with a witness of 1 as a
figure at 1. With the attacker's optimum: 0 of 230 primaries (400 persons) and 0 of 486 (2,000 persons) are at 1.

    python bench/differencing_membership.py                     # a 400-person city, 1 km x 1 week, k = 5
    python bench/differencing_membership.py --persons 2000 --targets 30
    python bench/differencing_membership.py --work OUT/work/jc-bikes/2018-Q1   # the work area's stored bounds

`--work` reads the audit's stored intervals, which are witness bounds (an over-count of figures at 1); the audit
check itself decides on the optimum. Per-unit figures stay in this process; it prints counts and shares only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spatial_release.cli import run_release  # noqa: E402
from spatial_release.period import Period  # noqa: E402
from spatial_release.policy import load_policy  # noqa: E402
from spatial_release.stages.context import ReleaseContext  # noqa: E402
from spatial_release.stages.count import read_true_counts  # noqa: E402
from spatial_release.suppression.audit import audit  # noqa: E402
from spatial_release.suppression.release_system import protect_release  # noqa: E402
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings  # noqa: E402

Key = tuple[str, str, pd.Timestamp]


def city(folder: Path, persons: int, k: int) -> ReleaseContext:
    pings = write_pings(generate_pings(SyntheticConfig(persons=persons, days=28)), folder / "pings.parquet")
    data = yaml.safe_load((ROOT / "policies" / "demo.yaml").read_text())
    data.update(name="differencing", k=k)
    data["source"].pop("synthetic", None)
    data["source"]["identifiers"] = ["device_id"]
    data["geometry"] = {"kind": "grid", "crs": "EPSG:32618", "size_m": 1000, "parents_m": [2000]}
    data["time"] = {"bucket": "1w", "timezone": "America/New_York"}
    data["suppression"] = {"budget": 1.0}
    data["risk"].update(
        zones="grid_2000m",
        model="advantage",
        coarsen="propose",
        landscape=str(ROOT / "policies" / "landscapes" / "demo.yaml"),
        per_release_ceiling=1.0,
        cumulative_ceiling=1.0,
    )
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    outcome = run_release(str(path), "2018-Q1", [str(pings)], out=str(folder / "out"), ledger=str(folder / "ledger"))
    if not outcome.published:
        raise SystemExit(f"the city did not publish: {[f.message for f in outcome.failures]}")
    return ReleaseContext(load_policy(path), Period.parse("2018-Q1"), folder / "out" / "work")


def lower_bounds(log, table, k: int) -> dict[Key, int]:
    """Each withheld primary's integer lower bound, by key: the attacker's optimum, re-solved. The protection's
    own audit keeps a witness bound (a feasible value that already clears the criterion, lo <= v - 1), which
    is no lower bound an attacker derives: a witness of 1 for a count of 2 says nothing about whether 0 is
    feasible."""
    primaries = {i.node for i in log.audit.intervals}
    found = audit(table, k, primaries=primaries, optimal_bounds=True, workers=1).intervals
    frame = table.keys_frame([i.node for i in found])
    starts = pd.to_datetime(frame["bucket_start"], utc=True)
    return {(lv, a, b): math.ceil(i.lo - 1e-9) for lv, a, b, i in zip(frame["level"], frame["area_id"], starts, found)}


def keys_of(ctx: ReleaseContext, mine: pd.DataFrame, levels: set[str]) -> set[Key]:
    """Every (level, area, bucket) a unit is counted in: its cells, their parents, the bucket totals."""
    hierarchy = ctx.locator.hierarchy(mine["cell_id"].drop_duplicates()).set_index("cell_id")
    keys: set[Key] = set()
    for cell, bucket in zip(mine["cell_id"], pd.to_datetime(mine["bucket_start"], utc=True)):
        keys.add(("cell", cell, bucket))
        keys.update((level, hierarchy.loc[cell, level], bucket) for level in hierarchy.columns)
        keys.add(("total", "total", bucket))
    return {k for k in keys if k[0] == "cell" or k[0] in levels}


def without(cells: pd.DataFrame, margins: pd.DataFrame, keys: set[Key]) -> tuple[pd.DataFrame, pd.DataFrame]:
    def lower(frame: pd.DataFrame, level: pd.Series, area: pd.Series) -> pd.DataFrame:
        starts = pd.to_datetime(frame["bucket_start"], utc=True)
        hit = np.array([(lv, a, b) in keys for lv, a, b in zip(level, area, starts)], dtype=int)
        out = frame.assign(n=frame["n"] - hit)
        return out[out["n"] > 0].reset_index(drop=True)

    return (
        lower(cells, pd.Series("cell", index=cells.index), cells["cell_id"]),
        lower(margins, margins["level"], margins["area_id"]),
    )


def synthetic(persons: int, k: int, targets: int, seed: int) -> dict:
    ctx = city(Path(tempfile.mkdtemp(prefix="differencing")), persons, k)
    cells, margins = read_true_counts(ctx.area)
    membership = pd.read_parquet(
        ctx.area.counts / "membership.internal.parquet", columns=["unit", "bucket_start", "cell_id"]
    )
    protected, log, table = protect_release(cells, margins, ctx.disclosure)
    lows = lower_bounds(log, table, k)
    shown = {
        (lv, a, pd.Timestamp(b))
        for lv, a, b in zip(
            protected.margins["level"],
            protected.margins["area_id"],
            pd.to_datetime(protected.margins["bucket_start"], utc=True),
        )
    }
    pub_cells = protected.cells[protected.cells["n"] > 0]
    shown |= {("cell", c, b) for c, b in zip(pub_cells["cell_id"], pd.to_datetime(pub_cells["bucket_start"], utc=True))}
    counts = {
        ("cell", c, b): n for c, b, n in zip(cells["cell_id"], pd.to_datetime(cells["bucket_start"], utc=True), cells["n"])
    }
    counts |= {
        (lv, a, b): n
        for lv, a, b, n in zip(
            margins["level"], margins["area_id"], pd.to_datetime(margins["bucket_start"], utc=True), margins["n"]
        )
    }
    levels = set(margins["level"])
    exposed = []  # units with no published figure at exactly k and a withheld figure whose lower bound is 1
    for unit, mine in membership.groupby("unit"):
        keys = keys_of(ctx, mine, levels)
        if any(counts.get(key) == k and key in shown for key in keys):
            continue
        at_one = [key for key in keys if lows.get(key) == 1]
        if at_one:
            exposed.append((unit, keys, at_one))
    rng = np.random.default_rng(seed)
    dropped = kept = gone = 0
    for i in rng.choice(len(exposed), min(targets, len(exposed)), replace=False):
        _, keys, at_one = exposed[i]
        _, log2, table2 = protect_release(*without(cells, margins, keys), ctx.disclosure)
        after = lower_bounds(log2, table2, k)
        for key in at_one:
            lo = after.get(key)
            gone += lo is None
            dropped += lo == 0
            kept += lo is not None and lo >= 1
    return {
        "persons": persons,
        "k": k,
        "primaries": len(lows),
        "primaries_at_lower_bound_1": sum(v == 1 for v in lows.values()),
        "units": int(membership["unit"].nunique()),
        "non_boundary_units_in_a_lower_bound_1_figure": len(exposed),
        "sampled_targets": min(targets, len(exposed)),
        "their_lower_bound_1_figures_at_0_without_them": dropped,
        "at_1_or_more_without_them": kept,
        "no_longer_primary": gone,
    }


def work_area(root: Path) -> dict:
    """Per zone of the main geometry's cells: the share of units with a point there that are in a withheld
    day-level figure (any zoning) whose audited lower bound is exactly 1."""
    frame = pd.read_parquet(root / "audit_intervals.internal.parquet")
    frame = frame.assign(
        lo=np.ceil(frame["attacker_lo"] - 1e-9), bucket_start=pd.to_datetime(frame["bucket_start"], utc=True)
    )
    at_one = frame[frame["lo"] == 1][["level", "area_id", "bucket_start"]].rename(columns={"area_id": "cell_id"})
    main = pd.read_parquet(root / "counts" / "membership.internal.parquet").assign(level="cell")
    linked_path = root / "counts" / "linked_membership.internal.parquet"
    linked = pd.read_parquet(linked_path).rename(columns={"zoning": "level"}) if linked_path.exists() else main.iloc[:0]
    every = pd.concat([main, linked], ignore_index=True).assign(
        bucket_start=lambda f: pd.to_datetime(f["bucket_start"], utc=True)
    )
    hit = set(every.merge(at_one, on=["level", "cell_id", "bucket_start"])["unit"])
    per_zone = main.groupby("cell_id")["unit"].agg(lambda s: round(float(s.drop_duplicates().isin(hit).mean()), 3))
    return {
        "primaries": len(frame),
        "by_level_at_lower_bound_1": frame[frame["lo"] == 1]["level"].value_counts().to_dict(),
        "units": int(main["unit"].nunique()),
        "units_in_a_lower_bound_1_figure": len(hit),
        "share_per_main_area": per_zone.to_dict(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=400)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--targets", type=int, default=15)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--work", type=Path, help="a published release's work area (owner-only)")
    args = parser.parse_args()
    found = work_area(args.work) if args.work else synthetic(args.persons, args.k, args.targets, args.seed)
    print(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
