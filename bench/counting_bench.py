"""Counting benchmark: the pipeline's counting step against a pandas baseline and the read floor, same run.

    python bench/counting_bench.py                      # 10 M and 50 M pings, text and integer ids, 3 runs each
    python bench/counting_bench.py --sizes 500M --ids int --repeat 1 --memory-limit 2GB --only ingest count

Input: pings written by the project's generator (`write_pings_in_chunks`, bursty devices, home/work anchors)
as Parquet (device_id, local_time, lon, lat), 45 days of Q1 2018, then the pipeline's ingest step, whose
output (unit, ts, lon, lat) every contender below reads:
- read:   DuckDB reads the four columns and sums them: the I/O floor.
- count:  the pipeline's counting step (`count_pings` on DuckDB): projection in SQL with exact pyproj
          assignment near edges, hourly buckets in America/New_York, presence per 250 m EPSG:32618 cell with
          1 km and 4 km parents and hourly totals, and the membership file.
- pandas: the seeds' approach: pyproj in numpy, then groupby(cell, hour).unit.nunique() (cells only).
- spark:  (with --spark) the same counting step on a local[*] Spark session.
With --zones N the counting step assigns pings to N polygon zones (Voronoi cells over the city, EPSG:4326)
through the zone lookup grid instead of the 250 m grid (the pandas baseline stays the grid one).
- ingest: the pipeline's ingest step (validation, quarantine) that produced the input, for reference.
Each contender runs in its own process; wall time is the median of --repeat runs, peak RSS the largest of
the runs (the larger of wait4's ru_maxrss and the sampled RSS of the process and its children), DuckDB spill the largest size its temp folder reached.
With --downstream it also runs suppression + audit (bench/suppression_bench.py --release-mode) and the risk
estimator (bench/risk_bench.py) on generated tables of the sizes given, and prints their reports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PERIOD = "2018-Q1"
SIZES = {"1M": 1_000_000, "10M": 10_000_000, "50M": 50_000_000, "100M": 100_000_000, "500M": 500_000_000}


def zones_file(n: int, data_dir: Path) -> Path:
    """n Voronoi zones (ids z0000..., parents by the first 3 characters) over 24 x 24 km around the generator's
    city centre, in EPSG:4326 like most published zone files."""
    import geopandas as gpd
    import numpy as np
    import shapely

    from spatial_release.traces.synthetic import CENTRE_XY

    path = data_dir / f"zones-{n}.geojson"
    if path.exists():
        return path
    rng = np.random.default_rng(5)
    cx, cy = CENTRE_XY
    frame_box = shapely.box(cx - 12_000, cy - 12_000, cx + 12_000, cy + 12_000)
    seeds = shapely.multipoints(np.column_stack([cx + rng.uniform(-12_000, 12_000, n),
                                                 cy + rng.uniform(-12_000, 12_000, n)]))
    cells = [c.intersection(frame_box) for c in shapely.get_parts(shapely.voronoi_polygons(seeds, extend_to=frame_box))]
    zones = gpd.GeoDataFrame({"zone": [f"z{i:04d}" for i in range(len(cells))]}, geometry=cells, crs="EPSG:32618")
    path.parent.mkdir(parents=True, exist_ok=True)
    zones.to_crs("EPSG:4326").to_file(path, driver="GeoJSON")
    return path


def bench_policy(zones: Path | None = None):
    import yaml

    from spatial_release.policy import parse_policy

    data = yaml.safe_load((ROOT / "policies" / "demo.yaml").read_text())
    data["name"] = "bench"
    data["source"].update({"unit": "device_id", "time": "local_time", "identifiers": ["device_id"]})
    data["source"].pop("synthetic", None)
    data["geometry"] = {"kind": "grid", "crs": "EPSG:32618", "size_m": 250, "parents_m": [1000, 4000]}
    data["time"] = {"bucket": "1h", "timezone": "America/New_York"}
    data["suppression"].pop("zeros", None)
    data["risk"]["zones"] = "grid_4000m"
    if zones is not None:
        data["geometry"] = {"kind": "zones", "path": str(zones), "id": "zone",
                            "parents": [{"level": "district", "prefix": 3}]}
        data["risk"]["zones"] = "district"
    return parse_policy(data, ROOT / "policies" / "bench.yaml")


# ---------------------------------------------------------------- workers (each runs in its own process)

def work_generate(args) -> dict:
    from spatial_release.traces.synthetic import SyntheticConfig, write_pings_in_chunks

    cfg = SyntheticConfig(start=date(2018, 1, 1), days=45, seed=20180101)
    rows = write_pings_in_chunks(cfg, Path(args.raw), args.pings, integer_ids=args.ids == ["int"])
    return {"rows": rows}


def work_ingest(args) -> dict:
    from spatial_release.period import Period
    from spatial_release.traces.ingest import ingest_traces

    result = ingest_traces(bench_policy(), Period.parse(PERIOD), [Path(args.raw)], Path(args.pings_dir))
    return {"rows": result.pings_read, "valid": result.pings_valid, "rejected": result.pings_rejected}


def work_read(args) -> dict:
    import duckdb

    con = duckdb.connect()
    row = con.execute(f"SELECT count(*), sum(hash(unit)), sum(epoch_us(ts)), sum(lon), sum(lat) "
                      f"FROM read_parquet('{args.pings}')").fetchone()
    return {"rows": row[0]}


def work_count(args) -> dict:
    from spatial_release import stages
    from spatial_release.counting.engines import DuckDBSettings, SparkSettings, open_engine
    from spatial_release.period import Period

    policy = bench_policy(Path(args.zones_file) if args.zones_file else None)
    out = Path(args.out)
    settings = DuckDBSettings(memory_limit=args.memory_limit)
    with open_engine(args.engine, scratch=out / "spill", duckdb_settings=settings,
                     spark_settings=SparkSettings(shuffle_partitions=16,
                                                  conf={"spark.driver.memory": "6g"})) as engine:
        result = stages.count_validated_pings(policy, Period.parse(PERIOD), [Path(args.pings)], out, engine,
                                              progress=lambda m: print(m, file=sys.stderr, flush=True))
    return {"rows": result.pings_located, "groups": result.groups, "units": result.units,
            "unsure": result.unsure_coordinates, "stages": result.seconds}


def work_pandas(args) -> dict:
    import numpy as np
    import pandas as pd
    from pyproj import Transformer

    frame = pd.read_parquet(args.pings, columns=["unit", "ts", "lon", "lat"])
    x, y = Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True).transform(
        frame["lon"].to_numpy(), frame["lat"].to_numpy())
    frame["ix"] = np.floor(x / 250).astype("int64")
    frame["iy"] = np.floor(y / 250).astype("int64")
    frame["hour"] = frame["ts"].dt.tz_convert("America/New_York").dt.floor("h", ambiguous=True, nonexistent="shift_forward")
    counts = frame.groupby(["ix", "iy", "hour"])["unit"].nunique()
    return {"rows": len(frame), "groups": len(counts)}


WORKERS = {"generate": work_generate, "ingest": work_ingest, "read": work_read, "count": work_count,
           "pandas": work_pandas}


# ---------------------------------------------------------------- the driver

def _folder_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def run_worker(name: str, extra: list[str], spill_dir: Path | None = None) -> dict:
    """Run one worker in a fresh process; its wall time, peak RSS (MB) and largest spill (MB)."""
    cmd = [sys.executable, __file__, "--worker", name, *extra]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak_spill, peak_tree = [0], [0]
    done = threading.Event()

    def watch() -> None:
        # RSS of the worker and its children (Spark's JVM is a child process), sampled twice a second
        import psutil

        root = psutil.Process(proc.pid)
        while not done.wait(0.5):
            try:
                tree = [root, *root.children(recursive=True)]
                peak_tree[0] = max(peak_tree[0], sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            if spill_dir is not None and spill_dir.exists():
                peak_spill[0] = max(peak_spill[0], _folder_size(spill_dir))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    output = proc.stdout.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {name} failed (exit {proc.returncode}): {' '.join(cmd)}")
    result = json.loads(output.strip().splitlines()[-1])
    result.update(wall=wall, rss_mb=max(usage.ru_maxrss / 1024, peak_tree[0] / 2**20), spill_mb=peak_spill[0] / 2**20)
    return result


def _median_runs(name: str, extra: list[str], repeat: int, spill_dir: Path | None = None) -> dict:
    runs = []
    for _ in range(repeat):
        if spill_dir is not None:
            shutil.rmtree(spill_dir.parent, ignore_errors=True)
        runs.append(run_worker(name, extra, spill_dir))
        print(f"    {name}: {runs[-1]['wall']:.2f} s, peak RSS {runs[-1]['rss_mb']:.0f} MB", file=sys.stderr, flush=True)
    best = dict(runs[-1])
    best.update(wall=statistics.median(r["wall"] for r in runs), walls=[round(r["wall"], 2) for r in runs],
                rss_mb=max(r["rss_mb"] for r in runs), spill_mb=max(r["spill_mb"] for r in runs))
    return best


def bench_one(size: str, ids: str, args) -> list[dict]:
    data = Path(args.data) / f"{size}-{ids}"
    data.mkdir(parents=True, exist_ok=True)
    raw, pings_dir = data / "raw.parquet", data / "ingest"
    pings = pings_dir / "pings.parquet"
    n = SIZES[size]
    if not raw.exists():
        print(f"  generating {n:,} pings ({ids} ids) into {raw}", file=sys.stderr, flush=True)
        run_worker("generate", ["--raw", str(raw), "--pings", str(n), "--ids", ids])
    rows = []
    contenders = [c for c in ("ingest", "read", "count", "spark", "pandas") if c in args.only]
    if "ingest" in contenders or not pings.exists():
        rows.append(("ingest", _median_runs("ingest", ["--raw", str(raw), "--pings-dir", str(pings_dir)],
                                            args.repeat if "ingest" in contenders else 1)))
    for name in contenders:
        if name == "ingest":
            continue
        extra = ["--pings", str(pings)]
        spill = None
        if name in ("count", "spark"):
            out = data / f"out-{name}"
            extra += ["--out", str(out), "--engine", "duckdb" if name == "count" else "spark"]
            if args.zones:
                extra += ["--zones-file", str(zones_file(args.zones, Path(args.data)))]
            if args.memory_limit:
                extra += ["--memory-limit", args.memory_limit]
            spill = out / "spill"
        rows.append((name, _median_runs("count" if name == "spark" else name, extra, args.repeat, spill)))
    table = []
    by_name = dict(rows)
    for name, r in rows:
        table.append({"size": size, "ids": ids, "step": name, "pings": r["rows"], **r,
                      "x_pandas": by_name["pandas"]["wall"] / r["wall"] if "pandas" in by_name else None,
                      "x_read": r["wall"] / by_name["read"]["wall"] if "read" in by_name else None})
    if args.keep_data is False and size == "500M":
        shutil.rmtree(data, ignore_errors=True)
    return table


def print_table(rows: list[dict]) -> None:
    print("| pings | ids | step | median wall (runs) | pings/s | peak RSS | spill | speed vs pandas "
          "| time vs read floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        pandas_ratio = f"{r['x_pandas']:.2f}x" if r["x_pandas"] else "-"
        read_ratio = f"{r['x_read']:.2f}x" if r["x_read"] else "-"
        print(f"| {r['pings']:,} | {r['ids']} | {r['step']} | {r['wall']:.2f} s ({', '.join(map(str, r['walls']))}) "
              f"| {r['pings'] / r['wall'] / 1e6:.2f} M | {r['rss_mb']:,.0f} MB | {r['spill_mb']:,.0f} MB "
              f"| {pandas_ratio} | {read_ratio} |")
    for r in rows:
        if r["step"] in ("count", "spark") and "stages" in r:
            print(f"  {r['size']} {r['ids']} {r['step']}: stages {r['stages']}, {r['groups']:,} cell-hour groups, "
                  f"{r['units']:,} units, {r['unsure']:,} unsure coordinates assigned by pyproj")


def run_downstream(args) -> None:
    for script, extra in (("suppression_bench.py", ["--release-mode", "--persons", str(args.suppression_persons),
                                                    "--days", str(args.suppression_days)]),
                          ("risk_bench.py", ["--persons", str(args.risk_persons), "--days", str(args.risk_days)])):
        cmd = [sys.executable, str(ROOT / "bench" / script), *extra]
        print(f"\n$ python bench/{script} {' '.join(extra)}", flush=True)
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        lines = [line for line in proc.stdout.read().splitlines() if not line.startswith("Running HiGHS")]
        print("\n".join(lines))
        print(f"(wall {time.perf_counter() - started:.1f} s, peak RSS {usage.ru_maxrss / 1024:,.0f} MB, "
              f"exit {os.waitstatus_to_exitcode(status)})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--raw"), parser.add_argument("--pings"), parser.add_argument("--pings-dir")
    parser.add_argument("--out"), parser.add_argument("--engine", default="duckdb")
    parser.add_argument("--sizes", nargs="+", default=["10M", "50M"], choices=sorted(SIZES))
    parser.add_argument("--ids", nargs="+", default=["text", "int"], choices=["text", "int"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=["ingest", "read", "count", "pandas"],
                        choices=["ingest", "read", "count", "spark", "pandas"])
    parser.add_argument("--spark", action="store_true", help="also time the counting step on local[*] Spark")
    parser.add_argument("--memory-limit", help="DuckDB memory_limit for the counting step, e.g. 2GB")
    parser.add_argument("--zones", type=int, help="count into this many polygon zones (Voronoi, EPSG:4326) "
                                                  "instead of the 250 m grid")
    parser.add_argument("--zones-file", help=argparse.SUPPRESS)
    parser.add_argument("--data", default=str(ROOT / "bench" / ".data"), help="generated inputs are kept here")
    parser.add_argument("--keep-data", action="store_true", help="keep the 500M-ping files after the run")
    parser.add_argument("--downstream", action="store_true",
                        help="also time suppression + audit and the risk estimator on generated tables")
    parser.add_argument("--suppression-persons", type=int, default=20_000)
    parser.add_argument("--suppression-days", type=int, default=7)
    parser.add_argument("--risk-persons", type=int, default=100_000)
    parser.add_argument("--risk-days", type=int, default=14)
    args = parser.parse_args()
    if args.worker:
        if isinstance(args.pings, str) and args.worker == "generate":
            args.pings = int(args.pings)
        print(json.dumps(WORKERS[args.worker](args)), flush=True)
        return
    if args.spark and "spark" not in args.only:
        args.only.append("spark")
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; command: "
          f"python bench/counting_bench.py {' '.join(sys.argv[1:])}", flush=True)
    rows = []
    for size in args.sizes:
        for ids in args.ids:
            print(f"{size} pings, {ids} ids", file=sys.stderr, flush=True)
            rows += bench_one(size, ids, args)
    print_table(rows)
    if args.downstream:
        run_downstream(args)


if __name__ == "__main__":
    main()
