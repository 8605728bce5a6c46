"""Zone lookup benchmark: the lookup grid of every zoning of a zones policy, built by classifying every lookup
cell (`_build_zone_lookup_flat`, the method before) and through blocks of lookup cells (`build_zone_lookup`),
in the same run.

    python bench/lookup_bench.py                          # the Citi Bike Jersey City policy, 3 runs of each
    python bench/lookup_bench.py --policy policies/jc-bikes.yaml --runs 5

Each run reads the zone layers afresh (not timed), so each method pays for preparing the zones' geometries as
the counting step does; the two methods take turns, the one going first alternating between runs, so a change
of the machine's load hits both. After every run the two lookups must be the same (grid and table row for row),
else the ratio would compare unlike work. Prints each run's times, then per zoning and in all the median of
each method and the ratio (flat over blocks), with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spatial_release.geometry.locate import make_linked_locators, make_locator  # noqa: E402
from spatial_release.geometry.lookup import ZoneLookup, _build_zone_lookup_flat, build_zone_lookup  # noqa: E402
from spatial_release.geometry.zones import ZoneLayer  # noqa: E402
from spatial_release.policy import Policy, load_policy  # noqa: E402

METHODS: dict[str, Callable[[ZoneLayer], ZoneLookup]] = {"flat": _build_zone_lookup_flat, "blocks": build_zone_lookup}


def zone_layers(policy: Policy) -> dict[str, ZoneLayer]:
    main = make_locator(policy)
    if not isinstance(main, ZoneLayer):
        raise SystemExit(f"{policy.name}: the geometry is a grid; the lookup is built for zones only")
    return {"main": main, **make_linked_locators(policy)}


def same_lookup(a: ZoneLookup, b: ZoneLookup) -> bool:
    if (a.x0, a.y0, a.cell, a.nx, a.ny) != (b.x0, b.y0, b.cell, b.nx, b.ny):
        return False
    left = a.table.sort_values("lk", kind="stable").reset_index(drop=True)
    right = b.table.sort_values("lk", kind="stable").reset_index(drop=True)
    try:
        pd.testing.assert_frame_equal(left, right, check_exact=True)
    except AssertionError:
        return False
    return True


def timed_run(policy: Policy, order: list[str]) -> dict[str, dict[str, float]]:
    """Seconds per method and zoning, the methods in `order`, each on layers read afresh."""
    times: dict[str, dict[str, float]] = {}
    built: dict[str, dict[str, ZoneLookup]] = {}
    for method in order:
        layers = zone_layers(policy)
        times[method], built[method] = {}, {}
        for name, layer in layers.items():
            started = time.perf_counter()
            built[method][name] = METHODS[method](layer)
            times[method][name] = time.perf_counter() - started
    for name in built["flat"]:
        if not same_lookup(built["flat"][name], built["blocks"][name]):
            raise SystemExit(f"zoning {name}: the two methods built different lookups")
    return times


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=ROOT / "policies/jc-bikes.yaml")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    policy = load_policy(args.policy)
    print(f"policy {args.policy}, {args.runs} runs of each method; load average before: {load()}")
    runs = []
    for i in range(args.runs):
        order = ["flat", "blocks"] if i % 2 == 0 else ["blocks", "flat"]
        times = timed_run(policy, order)
        runs.append(times)
        cells = ", ".join(f"{m} " + " ".join(f"{z} {s:.2f} s" for z, s in times[m].items()) for m in order)
        print(f"run {i + 1}: {cells}; same lookups")
    zonings = list(runs[0]["flat"])
    for zoning in [*zonings, "all"]:
        medians = {
            m: statistics.median(sum(r[m].values()) if zoning == "all" else r[m][zoning] for r in runs) for m in METHODS
        }
        print(
            f"{zoning}: median flat {medians['flat']:.2f} s, blocks {medians['blocks']:.2f} s, "
            f"ratio {medians['flat'] / medians['blocks']:.1f}"
        )
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
