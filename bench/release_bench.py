"""Whole-release benchmark: ingest -> counting -> protection -> checks -> risk -> publish on generated pings.

    python bench/release_bench.py --pings 10M              # one run
    python bench/release_bench.py --pings 10M 50M --runs 3 # medians of 3 runs per size
    python bench/release_bench.py --pings 10M --risk-models attack --engine spark --spark-master spark://host:7077
    python bench/release_bench.py --pings 10M --risk-models uniqueness advantage --dp   # + DP and a direct OpenDP job

With --engine spark the counting runs on Spark and protection's chunks, the audit's packs and the risk
estimate's chunks run as Spark tasks on the same master (`spatial_release.tasks`); each run prints the
sha256 of the published cells.parquet and margins.parquet, which must equal the DuckDB run's.

Input: pings written by the project's generator (`write_pings_in_chunks`, as bench/counting_bench.py: bursty
devices, home/work anchors, 45 days of Q1 2018, integer ids unless --ids text), kept under --data.
Policy (written by this script beside the pings): the demo policy's programme at 500 m cells x hour with
2 km and 8 km parents, k = 5, risk zones the 8 km parents, the demo landscape (journalist, p = 4, S = 10),
the demo structural zeros. Two settings differ from the demo, so that the benchmark always runs to the
end: the suppression budget and the risk ceilings are 1.0 (an hourly table withholds far more than 10 %, and a
blocked release would stop before publishing). Every check still runs and its figures are computed.

With --dp the same programme also runs under `protection.method: dp` (epsilon 1 and delta 1e-6 for the
quarter, each device bounded to --dp-buckets hours and one cell an hour, no structural zeros: DP refuses them),
and, in the same sitting, a direct job of the same output written on the libraries alone (`work_direct`:
pyproj, DuckDB and OpenDP's `make_laplace_threshold`, no pipeline, no checks, no ledger).

Each run is one fresh process calling `spatial_release.cli.run_release` (the command line's `release`: the
programme's release job, then its publish job, every blocking check, in process, on a fresh work area and
ledger). Per Dagster step (assets and asset checks) the wall time comes from the run's event log (step
start to step end) and the peak RSS from the process's RSS sampled every 0.1 s during the step (the process
is the same for all steps, so a step's peak includes what earlier steps left allocated). Steps are grouped
into the stages ingest, counting, protection, checks, risk, publish; "other" is the rest of the process
(imports, Dagster's run setup between steps). Whole release: the process's wall time and its ru_maxrss.
Figures are medians over --runs runs (peak RSS: the largest).
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
DP_EPSILON, DP_DELTA = 1.0, 1e-6
DIRECT = "direct OpenDP job"
SIZES = {"200k": 200_000, "1M": 1_000_000, "2M": 2_000_000, "5M": 5_000_000, "10M": 10_000_000, "50M": 50_000_000}
STAGES = ("ingest", "counting", "protection", "checks", "risk", "publish", "other")
# The Dagster step of each asset and asset check, by the last part of its name.
STAGE_OF_STEP = {
    "validated_pings": "ingest",
    "rejected_share": "ingest",
    "cell_counts": "counting",
    "outside_share": "counting",
    "protected_table": "protection",
    "k_floor": "checks",
    "structural_zeros_hold": "checks",
    "withheld_absent": "checks",
    "no_identifiers": "checks",
    "suppression_audit": "checks",
    "suppression_budget": "checks",
    "risk_assessment": "risk",
    "risk_budget": "risk",
    "dp_mechanism": "checks",
    "privacy_budget": "checks",
    "published_release": "publish",
}


def size_of(text: str) -> int:
    if text in SIZES:
        return SIZES[text]
    scale = {"k": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return int(float(text[:-1] if text[-1] in "kM" else text) * scale)


def write_policy(folder: Path, risk_model: str = "attack", dp_buckets: int = 24) -> Path:
    """The benchmark's policy file: the demo programme at 500 m x hour with 2 km and 8 km parents, gated on
    `risk_model` (advantage, the default, and attack: run in protection's coarsening pass; uniqueness: the
    upper bound alone gates; dp: `protection.method: dp`, each device bounded to `dp_buckets` hours)."""
    import yaml

    data = yaml.safe_load((ROOT / "policies" / "demo.yaml").read_text())
    data["name"] = "release_bench"
    data["source"].pop("synthetic", None)
    data["source"]["identifiers"] = ["device_id"]
    data["geometry"] = {"kind": "grid", "crs": "EPSG:32618", "size_m": 500, "parents_m": [2000, 8000]}
    data["time"] = {"bucket": "1h", "timezone": "America/New_York"}
    data["suppression"] = {"budget": 1.0, "zeros": str(ROOT / "policies" / "demo-structural-zeros.csv")}
    data["risk"].update(
        zones="grid_8000m",
        landscape=str(ROOT / "policies" / "landscapes" / "demo.yaml"),
        per_release_ceiling=1.0,
        cumulative_ceiling=1.0,
        model=risk_model,
        coarsen="apply" if risk_model in ("attack", "advantage") else "propose",
    )
    if risk_model == "dp":  # the same programme under differential privacy (its gate is the privacy budget)
        del data["risk"]
        data["suppression"] = {"budget": 1.0}
        data["protection"] = {
            "method": "dp",
            "epsilon": DP_EPSILON,
            "delta": DP_DELTA,
            "max_buckets": dp_buckets,
            "max_areas": 1,
            "seed": 20180101,
            "budget": {"epsilon": DP_EPSILON, "delta": DP_DELTA},
        }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"release-bench-{risk_model}.yaml"
    path.write_text("# Written by bench/release_bench.py\n" + yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------- workers (each runs in its own process)


def work_generate(args) -> dict:
    from spatial_release.traces.synthetic import SyntheticConfig, write_pings_in_chunks

    cfg = SyntheticConfig(start=date(2018, 1, 1), days=45, seed=20180101)
    rows = write_pings_in_chunks(cfg, Path(args.raw), size_of(args.pings[0]), integer_ids=args.ids == "int")
    return {"rows": rows}


class RssSampler:
    """The process's RSS every `every` seconds, with the time of each sample (time.time(), as Dagster's
    event timestamps)."""

    def __init__(self, every: float = 0.1) -> None:
        import psutil

        self.process, self.every = psutil.Process(), every
        self.samples: list[tuple[float, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), self.process.memory_info().rss))
            if self._done.wait(self.every):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self.samples.append((time.time(), self.process.memory_info().rss))  # after the last step's end

    def peak(self, start: float, end: float) -> int:
        """Largest sample in [start, end], with the first sample after `end` (a step shorter than the
        sampling period still gets one)."""
        inside = [rss for t, rss in self.samples if start <= t <= end]
        after = next((rss for t, rss in self.samples if t > end), None)
        return max(inside + ([after] if after is not None else []), default=0)


def _steps(instance, sampler: RssSampler) -> list[dict]:
    """Each Dagster step of the runs in `instance`: run order, wall time and peak RSS from its events."""
    steps = []
    runs = sorted(instance.get_runs(), key=lambda r: instance.get_run_record_by_id(r.run_id).create_timestamp)
    for run in runs:
        starts: dict[str, float] = {}
        ends: dict[str, float] = {}
        failed: set[str] = set()
        for entry in instance.all_logs(run.run_id):
            event = entry.dagster_event
            if event is None or not entry.step_key:
                continue
            kind = event.event_type_value
            if kind == "STEP_START":
                starts[entry.step_key] = entry.timestamp
            elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
                ends[entry.step_key] = entry.timestamp
                if kind == "STEP_FAILURE":
                    failed.add(entry.step_key)
        for key in sorted(starts, key=starts.__getitem__):
            end = ends.get(key, starts[key])
            name = next((n for n in STAGE_OF_STEP if key.endswith(n)), key)
            steps.append(
                {
                    "run": run.job_name,
                    "step": name,
                    "stage": STAGE_OF_STEP.get(name, "other"),
                    "wall": end - starts[key],
                    "rss_mb": sampler.peak(starts[key], end) / 2**20,
                    "failed": key in failed,
                }
            )
    return steps


def _counting(args) -> dict | None:
    """The counting resource's config for --engine spark (its tasks run protection, the audit and the risk
    estimate's jobs too); None: DuckDB and local processes."""
    if args.engine != "spark":
        return None
    conf = dict(item.split("=", 1) for item in args.spark_conf)
    return {"engine": "spark", "spark_master": args.spark_master, "spark_conf": conf}


def work_release(args) -> dict:
    """One whole release through the command line's own entry point, on a fresh work area and ledger."""
    started = time.perf_counter()
    import dagster as dg

    from spatial_release import cli
    from spatial_release.defs import execution

    instance = dg.DagsterInstance.ephemeral()
    # the same release, with its event log kept for the step timings (the command line asks this function)
    execution.environment_instance = lambda: instance
    out = Path(args.out)
    # a signing key of this run's own: the ledger is new every run, and the key's pin (which refuses a ledger
    # shorter than the one it last saw, as a rollback) would otherwise remember the previous run's ledger
    from spatial_release.ledger import SIGNING_KEY_ENV

    os.environ[SIGNING_KEY_ENV] = str(out / "key" / "ledger.key")
    with RssSampler() as sampler:
        outcome = cli.run_release(
            args.policy, PERIOD, traces=[args.raw], out=str(out), ledger=str(out / "ledger"), counting=_counting(args)
        )
    release_wall = time.perf_counter() - started
    record = outcome.record
    from spatial_release import stages
    from spatial_release.period import Period
    from spatial_release.policy import load_policy

    area = stages.WorkArea.for_release(out / "work", load_policy(args.policy), Period.parse(PERIOD))
    risk = stages.read_risk(area) if (area.risk / stages.RiskAssessment.FILE).exists() else None
    import pyarrow.parquet as pq

    from spatial_release.fileio import sha256_file

    files = ("cells.parquet", "margins.parquet")
    steps = _steps(instance, sampler)
    if not steps:  # the run went to another instance: per-stage figures would read 0 s, not "not measured"
        raise RuntimeError("no Dagster step in the bench's instance: the command line did not run in it")
    sha256 = None
    if outcome.published:
        assert outcome.release_dir is not None  # a published run names its release folder
        sha256 = {f: sha256_file(outcome.release_dir / f)[:16] for f in files}
    return {
        "sha256": sha256,
        "published": outcome.published,
        "exit_code": outcome.exit_code,
        "failures": [f"{f.kind} {f.name}: {f.message}" for f in outcome.failures],
        "steps": steps,
        "release_wall": release_wall,
        "figures": {
            "cells_published": record.counts.published_cells if record else None,
            "margins_published": record.counts.published_margins if record else None,
            "risk_units": risk and risk.units,
            "risk_keys": risk and risk.keys,
            "risk_seconds": risk and risk.seconds,
            # the protected table's size (cells and margins, published or withheld): the sizing model's unit
            "figures": sum(
                pq.ParquetFile(area.counts / name).metadata.num_rows
                for name in ("cell_counts.parquet", "margin_counts.parquet")
                if (area.counts / name).exists()
            ),
        },
    }


def work_direct(args) -> dict:
    """The DP release's output written directly on the libraries, as a user without this project would: pings
    projected by pyproj to the policy's 500 m cells; per device and local hour its dominant cell (most pings,
    ties to the smallest cell) in DuckDB; each device bounded to --dp-buckets hours by a seeded hash; distinct
    devices per cell, 2 km and 8 km parent and hour, and per hour; one OpenDP `make_laplace_threshold` over
    every figure, calibrated by OpenDP's binary search to the same epsilon and delta; noisy figures clipped at
    zero and written as Parquet. No validation, checks, consistency, report or ledger."""
    started = time.perf_counter()
    import duckdb
    import numpy as np
    import opendp.prelude as dp
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyproj import Transformer

    pings = pq.read_table(args.raw, columns=["device_id", "local_time", "lon", "lat"])
    x, y = Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True).transform(
        pings["lon"].to_numpy(), pings["lat"].to_numpy()
    )
    cells = pa.table(
        {
            "unit": pings["device_id"],
            "local_time": pings["local_time"],
            "ix": np.floor(x / 500).astype("int64"),
            "iy": np.floor(y / 500).astype("int64"),
        }
    )
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("cells", cells)
    counts = con.execute(
        f"""
        WITH hourly AS (
            SELECT unit, timezone('America/New_York', date_trunc('hour', local_time)) AS hour, ix, iy, count(*) AS n
            FROM cells GROUP BY ALL
        ), dominant AS (
            SELECT unit, hour, ix, iy FROM hourly
            QUALIFY row_number() OVER (PARTITION BY unit, hour ORDER BY n DESC, ix, iy) = 1
        ), bounded AS (
            SELECT * FROM dominant
            QUALIFY row_number() OVER (PARTITION BY unit ORDER BY hash(unit, hour, 20180101), hour) <= {args.dp_buckets}
        )
        SELECT 'cell' AS level, ix * 500 AS x, iy * 500 AS y, epoch_us(hour) AS h, count(*) AS n
        FROM bounded GROUP BY ALL
        UNION ALL SELECT '2000m', (ix // 4) * 2000, (iy // 4) * 2000, epoch_us(hour), count(*) FROM bounded GROUP BY ALL
        UNION ALL SELECT '8000m', (ix // 16) * 8000, (iy // 16) * 8000, epoch_us(hour), count(*) FROM bounded GROUP BY ALL
        UNION ALL SELECT 'total', 0, 0, epoch_us(hour), count(*) FROM bounded GROUP BY ALL
        """
    ).df()
    counted = time.perf_counter()
    dp.enable_features("contrib")
    domain = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T="i64"))
    metric = dp.l01inf_distance(dp.absolute_distance(T="i64"))
    l0 = 4 * args.dp_buckets  # a device is in one cell, one 2 km and one 8 km parent and the total of each kept hour
    d_in = (l0, l0, 1)

    def mechanism(scale: float, threshold: int) -> dp.Measurement:
        return dp.m.make_laplace_threshold(domain, metric, scale=scale, threshold=threshold)

    scale = dp.binary_search(lambda s: mechanism(s, 2**30).map(d_in)[0] <= DP_EPSILON, bounds=(1e-9, 1e9), T=float)
    # an integer with T=int, though the stub says float
    threshold = int(dp.binary_search(lambda t: mechanism(scale, int(t)).map(d_in)[1] <= DP_DELTA, bounds=(1, 2**30), T=int))
    keys = counts["level"] + ":" + counts["x"].astype(str) + ":" + counts["y"].astype(str) + ":" + counts["h"].astype(str)
    noisy = mechanism(scale, threshold)(dict(zip(keys, counts["n"].astype("int64").tolist())))
    parts = [key.split(":") for key in noisy]
    out = pd.DataFrame(parts, columns=["level", "x", "y", "h"]).assign(n=[max(0, v) for v in noisy.values()])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out.to_parquet(Path(args.out) / "figures.parquet")
    return {
        "published": True,
        "figures_offered": len(counts),
        "figures_published": len(out),
        "count_wall": counted - started,
        "opendp_wall": time.perf_counter() - counted,
        "release_wall": time.perf_counter() - started,
        "scale": scale,
        "threshold": threshold,
    }


WORKERS = {"generate": work_generate, "release": work_release, "direct": work_direct}


# ---------------------------------------------------------------- the driver


def run_worker(name: str, extra: list[str]) -> dict:
    """Run one worker in a fresh process: its result, wall time and peak RSS (MB, wait4's ru_maxrss)."""
    cmd = [sys.executable, __file__, "--worker", name, *extra]
    started = time.perf_counter()
    log = Path(extra[extra.index("--out") + 1] + ".log") if "--out" in extra else None
    with open(log, "w") if log else open(os.devnull, "w") as errors:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors if log else None, text=True)
        assert proc.stdout is not None  # piped
        output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"worker {name} failed (exit {code}, its log: {log}): {' '.join(cmd)}")
    result = json.loads(output.strip().splitlines()[-1])
    result.update(wall=wall, rss_mb=usage.ru_maxrss / 1024)
    return result


def bench_size(size: str, args) -> list[dict]:
    n = size_of(size)
    data = Path(args.data) / f"{size}-{args.ids}"
    raw = data / "raw.parquet"
    if not raw.exists():
        data.mkdir(parents=True, exist_ok=True)
        print(f"generating {n:,} pings ({args.ids} ids) into {raw}", file=sys.stderr, flush=True)
        run_worker("generate", ["--raw", str(raw), "--pings", size, "--ids", args.ids])
    models = [*args.risk_models, *(["dp"] if args.dp else [])]
    policies = {model: write_policy(data, model, args.dp_buckets) for model in models}
    runs: dict[str, list] = {model: [] for model in [*models, *([DIRECT] if args.dp else [])]}
    for i in range(args.runs):
        if args.dp:  # the direct job first in each round, then the releases: the same machine state
            out = data / "direct"
            shutil.rmtree(out, ignore_errors=True)
            direct = ["--raw", str(raw), "--out", str(out), "--dp-buckets", str(args.dp_buckets)]
            runs[DIRECT].append(run_worker("direct", direct))
            print(f"  {size} {DIRECT} run {i + 1}: {runs[DIRECT][-1]['wall']:.1f} s", file=sys.stderr, flush=True)
        for model, policy in policies.items():  # the models alternate, run by run: the same machine state
            out = data / "run"
            shutil.rmtree(out, ignore_errors=True)
            engine = ["--engine", args.engine, "--spark-master", args.spark_master]
            engine += [x for item in args.spark_conf for x in ("--spark-conf", item)]
            run = run_worker("release", ["--raw", str(raw), "--policy", str(policy), "--out", str(out), *engine])
            if not run["published"]:
                raise RuntimeError(f"the release of {size} pings was not published: {run['failures']}")
            runs[model].append(run)
            print(
                f"  {size} {model} run {i + 1}: {run['wall']:.1f} s, peak RSS {run['rss_mb']:,.0f} MB",
                file=sys.stderr,
                flush=True,
            )
    if not args.keep_output:
        shutil.rmtree(data / "run", ignore_errors=True)
        shutil.rmtree(data / "direct", ignore_errors=True)
    return [{"size": size, "pings": n, "risk_model": model, "runs": runs[model]} for model in runs]


def _stage_totals(run: dict) -> dict[str, tuple[float, float]]:
    totals = {s: [0.0, 0.0] for s in STAGES}
    for step in run["steps"]:
        totals[step["stage"]][0] += step["wall"]
        totals[step["stage"]][1] = max(totals[step["stage"]][1], step["rss_mb"])
    totals["other"][0] = run["wall"] - sum(v[0] for s, v in totals.items() if s != "other")
    totals["other"][1] = run["rss_mb"] if totals["other"][1] == 0 else totals["other"][1]
    return {s: (w, r) for s, (w, r) in totals.items()}


def print_direct(result: dict) -> None:
    runs = result["runs"]
    walls = [r["wall"] for r in runs]
    last = runs[-1]
    print(
        f"\n{result['pings']:,} pings, {DIRECT}, {len(runs)} run(s): whole process {statistics.median(walls):.1f} s "
        f"({', '.join(f'{w:.1f}' for w in walls)}), peak RSS {max(r['rss_mb'] for r in runs):,.0f} MB; counting "
        f"{last['count_wall']:.1f} s, OpenDP {last['opendp_wall']:.1f} s; figures offered {last['figures_offered']:,}, "
        f"published {last['figures_published']:,}; scale {last['scale']:.3g}, threshold {last['threshold']}"
    )


def print_tables(results: list[dict], args) -> None:
    for result in results:
        runs = result["runs"]
        if result["risk_model"] == DIRECT:
            print_direct(result)
            continue
        print(
            f"\n{result['pings']:,} pings, risk.model {result['risk_model']}, engine {args.engine}"
            f"{' on ' + args.spark_master if args.engine == 'spark' else ''}, {len(runs)} run(s); {runs[-1]['figures']}"
            f"; published sha256 {runs[-1]['sha256']}"
        )
        print("| stage | median wall | peak RSS |")
        print("|---|---|---|")
        per_run = [_stage_totals(r) for r in runs]
        for stage in STAGES:
            walls = [t[stage][0] for t in per_run]
            print(
                f"| {stage} | {statistics.median(walls):.1f} s ({', '.join(f'{w:.1f}' for w in walls)}) "
                f"| {max(t[stage][1] for t in per_run):,.0f} MB |"
            )
        walls = [r["wall"] for r in runs]
        print(
            f"| **whole release** | {statistics.median(walls):.1f} s ({', '.join(f'{w:.1f}' for w in walls)}) "
            f"| {max(r['rss_mb'] for r in runs):,.0f} MB |"
        )
        print("\nsteps (median wall, peak RSS):")
        names = [(s["run"], s["step"], s["stage"]) for s in runs[0]["steps"]]
        for i, (job, step, stage) in enumerate(names):
            walls = [r["steps"][i]["wall"] for r in runs if i < len(r["steps"])]
            rss = max(r["steps"][i]["rss_mb"] for r in runs if i < len(r["steps"]))
            print(f"  {stage:<10} {step:<24} {statistics.median(walls):8.1f} s {rss:8,.0f} MB   ({job})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--raw", help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--pings", nargs="+", default=["10M"], help="sizes: 10M, 50M, 2M, 500k ...")
    parser.add_argument("--ids", default="int", choices=["int", "text"])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--data",
        default=str(ROOT / "bench" / ".data" / "release"),
        help="generated pings and the run's output folder are kept here",
    )
    parser.add_argument("--keep-output", action="store_true", help="keep the last run's releases/ and work/")
    parser.add_argument(
        "--risk-models",
        nargs="+",
        default=["uniqueness", "advantage"],
        choices=["uniqueness", "advantage", "attack"],
        help="gate on each, side by side (default both)",
    )
    parser.add_argument(
        "--dp",
        action="store_true",
        help="also the programme under protection.method: dp, and a direct job of the same output on OpenDP",
    )
    parser.add_argument("--dp-buckets", type=int, default=24, help="with --dp: hours a device is bounded to")
    parser.add_argument(
        "--engine",
        default="duckdb",
        choices=["duckdb", "spark"],
        help="spark: counting on Spark and protection's, the audit's and the risk estimate's jobs as Spark tasks",
    )
    parser.add_argument("--spark-master", default="local[*]", help="with --engine spark: local[*], spark://host:7077 ...")
    parser.add_argument("--spark-conf", action="append", default=[], help="with --engine spark: key=value, repeatable")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)), flush=True)
        return
    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d %H:%M %Z')}; "
        f"command: python bench/release_bench.py {' '.join(sys.argv[1:])}; counting's DuckDB memory limit: "
        f"{os.environ.get('SPATIAL_RELEASE_DUCKDB_MEMORY_LIMIT') or 'DuckDB default (80 % of RAM)'}",
        flush=True,
    )
    print_tables([result for size in args.pings for result in bench_size(size, args)], args)
    print(f"load at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
