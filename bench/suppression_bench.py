"""Complementary suppression benchmark: our sweep + LP audit-and-repair against tau-Argus Modular and Optimal.

Same table, same auditor. The table is a complete cell x hour frequency table with a 3-level spatial
hierarchy (500 m cells -> 2 km -> 8 km -> total) and a 2-level time hierarchy (hours -> day), built from
the project's synthetic generator (presence: each person counted once per hour, in its dominant cell).
Every figure is a count of (person, hour) memberships, so every relation is additive and both tools see
the same linear system.

tau-Argus runs through `pytauargus` (a port of the tau-Argus engine; install it with
`pip install pytauargus==0.6.0`, it is not a dependency of the project) with FREQ(k, p) and MOD / OPT.
tau-Argus publishes empty cells as 0; our releases leave them out (an absent figure is "empty or
withheld"), so the audit of each pattern uses that pattern's own publication of zeros.

Each engine runs in its own process so that its peak memory (ru_maxrss) is its own. Our engines are
named <stage 1>[-compat][-pruned][-cells]: stage 1 `ours` (the constraint sweep) or `gauss` (Gaussian
elimination, `suppression.elimination`), both followed by the LP audit-and-repair; `-pruned` adds the
pruning pass over every non-empty secondary; `-compat` protects to the tau-Argus FREQ(k, p) criterion
instead of ours, to compare secondaries on equal terms (never used for releases); `-cells` uses the
"cells" cost (every non-empty figure costs the same) instead of the unit value.
Every pattern is audited under both criteria: `audit_failures` (ours) and `compat_failures` (tau-Argus's).

What it measured when the release method (`suppression.method.ProtectionMethod`) was chosen: on the k = 5
table (--persons 20000) elimination withheld 84 non-empty secondaries (5,576 units) in 2.2 s where the sweep
needed 135 (13,619 units) in 6.0 s; in release mode (--release-mode --persons 20000 --days 2) both gave the
same 128. Pruning gave back what the repair over-withheld: 3 of 84 at k = 5 (+4 s), 14 of 97 at k = 10
(+18 s), none in release mode (+0.4 s of 12 s). Timings are of one machine at the time; rerun to compare.

    python bench/suppression_bench.py                      # 13,675 figures, 3,947 non-zero (4,000 persons)
    python bench/suppression_bench.py --persons 20000      # the same table denser: 5,885 non-zero figures
    python bench/suppression_bench.py --persons 20000 --seed 11   # another draw of it: 5,762 non-zero
    python bench/suppression_bench.py --persons 20000 --engines gauss gauss-pruned tau-modular  # a subset
    python bench/suppression_bench.py --release-mode --persons 85000 --days 7   # our release structure:
                                                           # ~87,000 published cells + 25,000 margins
    python bench/suppression_bench.py --release-mode --persons 20000 --days 2 --method gauss --prune
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spatial_release.geometry import Grid  # noqa: E402
from spatial_release.levels import LEAF, TOTAL  # noqa: E402
from spatial_release.policy import GridGeometry  # noqa: E402
from spatial_release.suppression.audit import Criterion, audit  # noqa: E402
from spatial_release.suppression.method import ProtectionMethod  # noqa: E402
from spatial_release.suppression.protection import protect  # noqa: E402
from spatial_release.suppression.table import PRIMARY, PUBLISHED, SECONDARY, cross_classified_table  # noqa: E402
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings  # noqa: E402

LEAF_M, MID_M, TOP_M = 500, 2000, 8000


def make_microdata(persons: int, seed: int, region_km: tuple[int, int]) -> pd.DataFrame:
    """(person, space, hour) memberships inside a region anchored at the synthetic city's south-west."""
    cfg = SyntheticConfig(
        persons=persons, seed=seed, start=date(2018, 1, 10), days=1, periphery_radius_m=max(region_km) * 1000 / 2
    )
    pings = generate_pings(cfg)
    grid = Grid(GridGeometry(kind="grid", crs="EPSG:32618", size_m=LEAF_M))
    ix, iy = grid.indices(pings["lon"].to_numpy(), pings["lat"].to_numpy())
    x0 = int(cfg.centre[0] // TOP_M * TOP_M - TOP_M * (region_km[0] // 16))
    y0 = int(cfg.centre[1] // TOP_M * TOP_M - TOP_M * (region_km[1] // 16))
    rx, ry = ix - x0 // LEAF_M, iy - y0 // LEAF_M
    inside = (rx >= 0) & (ry >= 0) & (rx < region_km[0] * 2) & (ry < region_km[1] * 2)
    frame = pd.DataFrame(
        {"person": pings["device_id"], "rx": rx, "ry": ry, "hour": pd.to_datetime(pings["local_time"]).dt.hour}
    )[inside]
    per = frame.groupby(["person", "hour", "rx", "ry"]).size().rename("n").reset_index()
    per = per.sort_values(["person", "hour", "n", "rx", "ry"], ascending=[True, True, False, True, True])
    dominant = per.drop_duplicates(["person", "hour"])
    return pd.DataFrame(
        {
            "person": dominant["person"].to_numpy(),
            "space": [f"c{x:03d}_{y:03d}" for x, y in zip(dominant["rx"], dominant["ry"])],
            "hour": [f"h{h:02d}" for h in dominant["hour"]],
        }
    )


def hierarchy(region_km: tuple[int, int]) -> tuple[dict, dict, dict, dict]:
    nx, ny = region_km[0] * 1000 // LEAF_M, region_km[1] * 1000 // LEAF_M
    f1, f2 = MID_M // LEAF_M, TOP_M // MID_M
    space_parent, space_level = {}, {"Total": TOTAL}
    for x in range(nx):
        for y in range(ny):
            leaf, mid, top = f"c{x:03d}_{y:03d}", f"m{x // f1:02d}_{y // f1:02d}", f"r{x // f1 // f2}_{y // f1 // f2}"
            space_parent[leaf], space_parent[mid], space_parent[top] = mid, top, "Total"
            space_level.update({leaf: LEAF, mid: "2km", top: "8km"})
    time_parent = {f"h{h:02d}": "Total" for h in range(24)}
    time_level = {"Total": "day", **{h: "hour" for h in time_parent}}
    return space_parent, time_parent, space_level, time_level


def level_depth(space_level: dict, time_level: dict) -> dict[str, int]:
    space_rank = {LEAF: 0, "2km": 1, "8km": 2, TOTAL: 3}
    time_rank = {"hour": 0, "day": 1}
    return {f"{s}x{t}": space_rank[s] + time_rank[t] for s in space_rank for t in time_rank}


def build(micro: pd.DataFrame, region_km, k: int, zeros_published: bool):
    space_parent, time_parent, space_level, time_level = hierarchy(region_km)
    counts = micro.groupby(["space", "hour"]).size().to_dict()
    table = cross_classified_table(counts, space_parent, time_parent, space_level, time_level, k, zeros_published)
    return table, level_depth(space_level, time_level)


def write_hrc(folder: Path, region_km) -> dict[str, str]:
    space_parent, time_parent, _, _ = hierarchy(region_km)
    children: dict[str, list[str]] = {}
    for child, parent in space_parent.items():
        children.setdefault(parent, []).append(child)
    lines: list[str] = []

    def walk(code: str, depth: int) -> None:
        for child in sorted(children.get(code, [])):
            lines.append("@" * depth + child)
            walk(child, depth + 1)

    walk("Total", 0)
    (folder / "space.hrc").write_text("\n".join(lines) + "\n")
    (folder / "hour.hrc").write_text("\n".join(sorted(time_parent)) + "\n")
    return {"space": str(folder / "space.hrc"), "hour": str(folder / "hour.hrc")}


def pattern_summary(table, statuses: list[str], k: int, range_pct: int) -> dict:
    """Secondaries and withheld value of a pattern, audited by our auditor under our criterion and under
    the tau-Argus FREQ(k, p) compatibility criterion."""
    table.status = statuses
    result = audit(table, k)
    compat = audit(table, k, criterion=Criterion(k, range_pct))
    secondary = [i for i, s in enumerate(statuses) if s == SECONDARY and table.value[i] > 0]
    primary = [i for i, s in enumerate(statuses) if s == PRIMARY]
    return {
        "published": sum(1 for s in statuses if s == PUBLISHED),
        "primaries": len(primary),
        "secondaries_nonzero": len(secondary),
        "withheld_value_secondary": int(sum(table.value[i] for i in secondary)),
        "audit_failures": len(result.failures()),
        "compat_failures": len(compat.failures()),
        "audit_errors": len(result.errors) + len(compat.errors),
        "audit_seconds": round(result.seconds, 2),
    }


def run_engine(engine: str, micro_path: Path, region_km, k: int, range_pct: int) -> dict:
    micro = pd.read_parquet(micro_path)
    if not engine.startswith("tau-"):
        # <method>[-compat][-pruned][-cells]: method "ours" (the sweep) or "gauss" (elimination)
        parts = engine.split("-")
        table, depth = build(micro, region_km, k, zeros_published=False)
        criterion = Criterion(k, range_pct) if "compat" in parts else None
        started = time.perf_counter()
        method = ProtectionMethod(
            stage1="gauss" if parts[0] == "gauss" else "sweep",
            prune_tries=None if "pruned" in parts else 0,
            cost="cells" if "cells" in parts else "unit_value",
        )
        protect(table, k, depth, method, criterion=criterion)
        seconds = time.perf_counter() - started
        statuses = list(table.status)
        fresh, _ = build(micro, region_km, k, zeros_published=False)
        summary = pattern_summary(fresh, statuses, k, range_pct)
    else:
        from pytauargus import protect as tau_protect  # type: ignore[import-not-found]

        suppress = {"tau-modular": "MOD(1)", "tau-optimal": "OPT(1)"}[engine]
        workdir = Path(tempfile.mkdtemp(prefix=f"tau-{engine}-"))
        hrc = write_hrc(workdir, region_km)
        micro_tau = micro.assign(one=1)[["space", "hour", "one"]]
        os.chdir(workdir)  # the engine writes its log and scratch files into the working directory
        started = time.perf_counter()
        result = tau_protect(
            micro_tau,
            tables=[["space", "hour"]],
            response="one",
            safety_rules=f"FREQ({k},{range_pct})",
            suppress=suppress,
            hrc=hrc,
            totcode="Total",
            workdir=str(workdir),
        )
        seconds = time.perf_counter() - started
        rows = pd.DataFrame(result.tables[0].rows)
        table, _ = build(micro, region_km, k, zeros_published=True)
        _, _, space_level, time_level = hierarchy(region_km)
        status_of = {"U": PRIMARY, "M": SECONDARY}
        statuses = list(table.status)
        for row in rows.itertuples(index=False):
            key = (f"{space_level[row.space]}x{time_level[row.hour]}", row.space, row.hour)
            node = table.index[key]
            statuses[node] = status_of.get(row.status, PUBLISHED)
        summary = pattern_summary(table, statuses, k, range_pct)
    summary.update(
        {
            "engine": engine,
            "seconds": round(seconds, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    )
    return summary


def release_counts(persons: int, days: int, seed: int):
    """True counts with the structure our releases publish: 250 m cells x hour with 1 km and 4 km parents
    and the hourly total (presence). Returns (true_cells, true_margins, structure)."""
    from spatial_release.suppression.release_system import Structure
    from spatial_release.suppression.table import grid_chain

    cfg = SyntheticConfig(persons=persons, seed=seed, start=date(2018, 1, 8), days=days)
    pings = generate_pings(cfg)
    grid = Grid(GridGeometry(kind="grid", crs="EPSG:32618", size_m=250, parents_m=[1000, 4000]))
    cells = grid.locate(pings["lon"].to_numpy(), pings["lat"].to_numpy())
    hour = pd.to_datetime(pings["local_time"]).dt.floor("h").dt.tz_localize("UTC")
    frame = pd.DataFrame({"unit": pings["device_id"], "cell_id": cells, "bucket_start": hour})
    per = frame.groupby(["unit", "bucket_start", "cell_id"]).size().rename("n").reset_index()
    per = per.sort_values(["unit", "bucket_start", "n", "cell_id"], ascending=[True, True, False, True])
    member = per.drop_duplicates(["unit", "bucket_start"])
    true_cells = member.groupby(["cell_id", "bucket_start"]).size().rename("n").reset_index()
    hier = grid.hierarchy(true_cells["cell_id"].drop_duplicates())
    joined = member.merge(hier, on="cell_id")
    margins = [
        joined.groupby([lvl, "bucket_start"])
        .size()
        .rename("n")
        .reset_index()
        .rename(columns={lvl: "area_id"})
        .assign(level=lvl)
        for lvl in ("grid_1000m", "grid_4000m")
    ]
    margins.append(member.groupby("bucket_start").size().rename("n").reset_index().assign(level=TOTAL, area_id=TOTAL))
    true_margins = pd.concat(margins, ignore_index=True)[["level", "area_id", "bucket_start", "n"]]
    structure = Structure((grid_chain(250, [1000, 4000], ["grid_1000m", "grid_4000m"]),))
    return true_cells, true_margins, structure


def release_mode(persons: int, days: int, k: int, seed: int, method: str | None = None, prune: bool = False) -> None:
    """The structure our releases publish: 250 m cells x hour with 1 km and 4 km parents and the hourly
    total, one spatial hierarchy per bucket (empty cells folded into exact rest variables). `method` /
    `prune`: the stage 1 and pruning to try (None and False: the release method, as `protect_release` runs
    it by default)."""
    from spatial_release.suppression.release_system import DisclosureSpec, protect_release

    chosen = ProtectionMethod()
    if method is not None or prune:
        chosen = ProtectionMethod(stage1=method or "sweep", prune_tries=None if prune else 0)
    true_cells, true_margins, structure = release_counts(persons, days, seed)
    started = time.perf_counter()
    protected, log, _ = protect_release(true_cells, true_margins, DisclosureSpec(structure, k, "presence", method=chosen))
    seconds = time.perf_counter() - started
    assert log.audit is not None
    audit_summary = log.audit.summary()
    print(
        f"release mode: {persons} persons, {days} days of hourly buckets, 250 m cells; "
        f"method {method or 'as protect_release'}{', pruned' if prune else ''}"
    )
    print(
        f"  figures {len(true_cells) + len(true_margins)}; published cells {len(protected.cells)}, "
        f"published margins {len(protected.margins)}; primaries {audit_summary.primaries_audited}; "
        f"secondaries {log.sweep_secondaries + log.repair_secondaries - log.pruned} "
        f"(stage 1 {log.sweep_secondaries}, repair {log.repair_secondaries}, rounds {log.rounds}, "
        f"pruned {log.pruned})"
    )
    print(
        f"  protect + audit {seconds:.1f} s (final audit {audit_summary.seconds} s, "
        f"{audit_summary.components} components, {audit_summary.lps_solved} exact LPs, "
        f"{audit_summary.bulk_lps} bulk LPs, failures {audit_summary.failures}); "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--region-km", type=int, nargs=2, default=[16, 8])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--range-pct", type=int, default=10, help="tau-Argus FREQ protection range")
    parser.add_argument(
        "--engines",
        nargs="+",
        default=[
            "ours",
            "ours-compat",
            "ours-pruned",
            "gauss",
            "gauss-pruned",
            "gauss-compat",
            "gauss-compat-pruned",
            "tau-modular",
            "tau-optimal",
        ],
    )
    parser.add_argument(
        "--release-mode", action="store_true", help="time our own release structure instead (1-D per bucket); see --days"
    )
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--method", choices=["sweep", "gauss"], help="release mode: stage 1 to use")
    parser.add_argument("--prune", action="store_true", help="release mode: prune every secondary")
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--micro", help=argparse.SUPPRESS)
    args = parser.parse_args()
    region = tuple(args.region_km)
    if args.release_mode:
        release_mode(args.persons, args.days, args.k, args.seed, args.method, args.prune)
        return
    if args.engine:  # child process
        print(json.dumps(run_engine(args.engine, Path(args.micro), region, args.k, args.range_pct)))
        return
    micro = make_microdata(args.persons, args.seed, region)
    micro_path = Path(tempfile.mkdtemp(prefix="supp-bench-")) / "micro.parquet"
    micro.to_parquet(micro_path)
    table, _ = build(micro, region, args.k, zeros_published=False)
    nonzero = sum(1 for v in table.value if v > 0)
    print(
        f"table: {len(table)} figures ({nonzero} non-zero), {len(table.relations)} relations, "
        f"{len(table.primaries())} primaries (1 <= n < {args.k}); {len(micro)} memberships; region {region} km"
    )
    rows = []
    for engine in args.engines:
        command = [
            sys.executable,
            __file__,
            "--engine",
            engine,
            "--micro",
            str(micro_path),
            "--k",
            str(args.k),
            "--range-pct",
            str(args.range_pct),
            "--region-km",
            *map(str, region),
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            rows.append({"engine": engine, "error": (done.stderr.strip().splitlines() or ["no output"])[-1]})
            continue
        rows.append(json.loads(lines[-1]))
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False))
    if "tau-modular" in set(frame["engine"]) and "seconds" in frame:
        mod = frame[frame["engine"] == "tau-modular"].iloc[0]
        if pd.notna(mod.get("seconds")):
            for _, row in frame[~frame["engine"].str.startswith("tau-")].iterrows():
                if pd.isna(row.get("seconds")):
                    continue
                print(
                    f"{row['engine']} / Modular: time {row['seconds'] / max(mod['seconds'], 1e-9):.2f}x, non-zero "
                    f"secondaries {row['secondaries_nonzero'] / max(mod['secondaries_nonzero'], 1):.2f}x, withheld "
                    f"value {row['withheld_value_secondary'] / max(mod['withheld_value_secondary'], 1):.2f}x"
                )


if __name__ == "__main__":
    main()
