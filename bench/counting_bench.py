"""Counting benchmark: the pipeline's counting step against the same job done by a plain DuckDB job and by
pandas, and the read floor, in the same run.

    python bench/counting_bench.py --sizes 10M 50M --only read count duckdb-job pandas-job   # the table of contenders
    python bench/counting_bench.py --sizes 10M --repeat 3 --only read count duckdb-lean duckdb-job pandas-job  # lean SQL
    python bench/counting_bench.py --sizes 2M --repeat 1 --only count duckdb-job            # a quick comparison
    python bench/counting_bench.py --sizes 500M --ids int --repeat 1 --memory-limit 2GB --only ingest count

Input: pings written by the project's generator (`write_pings_in_chunks`, bursty devices, home/work anchors)
as Parquet (device_id, local_time, lon, lat), 45 days of Q1 2018, then the pipeline's ingest step, whose
output (unit, ts, lon, lat) every contender below reads:
- read:       DuckDB reads the four columns and sums them: the I/O floor.
- count:      the pipeline's counting step (`count_pings` on DuckDB, the grid policy's plan built as
              `stages.count_validated_pings` builds it; only the counting package is imported): with integer
              unit ids its packed path (`counting.arrayscan`, `counting.packed`): pyarrow reads the row groups
              and numpy projects them by the validated polynomial and keys them on the engine's threads,
              exact pyproj assignment near edges, hourly buckets in America/New_York, the dominant cells from
              the sorted keys, presence per 250 m EPSG:32618 cell with 1 km and 4 km parents and hourly
              totals, and the membership file (integer keys until the files are written).
- duckdb-lean: the same job as a skilled DuckDB user writes it: DuckDB reads the pings with the
              hour as epoch_us(ts) // 3600e6; pyproj projects the coordinates over numpy arrays; one integer
              cell key ix * 2^22 + iy; then SQL: one GROUP BY unit, hour, cell and arg_max(cell, n * 2^40 -
              cell) per (unit, hour) (most pings, ties to the smallest cell), presence per cell x hour, parents
              by integer division of the key, hourly totals; the published cell ids are formatted once per
              distinct cell and joined where the files are written (the membership included).
- duckdb-job: the same job with string cell ids formatted for every row where they are written: pyproj over
              numpy arrays, then SQL: pings per (unit, hour, ix, iy), the dominant cell per (unit, hour)
              (arg_max over (n, -ix, -iy)), presence per cell x hour, per 1 km and 4 km parent and per hour,
              and the membership written to Parquet.
- pandas-job: the same job in pandas (pyproj, groupby sizes, a sort for the dominant cell, the same files).
- pandas:     the seeds' smaller job: pyproj, then groupby(cell, hour).unit.nunique() (cells only, no
              parents, membership or dominant cell); not the same work, so not in the default run.
- spark:      (with --spark) the same counting step on a local[*] Spark session.
count, duckdb-lean, duckdb-job, pandas-job (and spark) write the same three files (cell_counts, margin_counts,
membership.internal); after the runs the driver asserts they hold the same rows as the pipeline's: the
count tables row for row, the membership row for row up to --exact-rows rows and by row count and an
order-free checksum above (`check_same_outputs`), else the ratios would compare unlike work.
With --zones N the counting step assigns pings to N polygon zones (Voronoi cells over the city, EPSG:4326)
through the zone lookup grid instead of the 250 m grid (the references stay on the grid: not compared).
- ingest: the pipeline's ingest step (validation, quarantine) that produced the input, for reference.
Each run is a fresh process; the contenders take turns (one run of each, --repeat times), so a change of
load hits all of them; wall time is the median of the runs, CPU the median of user + system time (all
threads), peak RSS the largest of the runs (the larger of wait4's ru_maxrss and the sampled RSS of the
process and its children), DuckDB spill the largest size its temp folder reached. The last lines give the
pipeline's speed-up over each reference (their median wall time over the pipeline's).
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
SIZES = {"1M": 1_000_000, "2M": 2_000_000, "10M": 10_000_000, "50M": 50_000_000, "100M": 100_000_000, "500M": 500_000_000}


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
    seeds = shapely.multipoints(
        np.column_stack([cx + rng.uniform(-12_000, 12_000, n), cy + rng.uniform(-12_000, 12_000, n)])
    )
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
        data["geometry"] = {
            "kind": "zones",
            "path": str(zones),
            "id": "zone",
            "parents": [{"level": "district", "prefix": 3}],
        }
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
    row = con.execute(
        f"SELECT count(*), sum(hash(unit)), sum(epoch_us(ts)), sum(lon), sum(lat) FROM read_parquet('{args.pings}')"
    ).fetchall()[0]
    return {"rows": row[0]}


def work_count(args) -> dict:
    from spatial_release.counting.engines import DuckDBSettings, SparkSettings, open_engine
    from spatial_release.period import Period

    zones = Path(args.zones_file) if args.zones_file else None
    policy = bench_policy(zones)
    out = Path(args.out)
    settings = DuckDBSettings(memory_limit=args.memory_limit)
    with open_engine(
        args.engine,
        scratch=out / "spill",
        duckdb_settings=settings,
        spark_settings=SparkSettings(shuffle_partitions=16, conf={"spark.driver.memory": "6g"}),
    ) as engine:
        progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        if zones is None:
            # The grid policy's counting step (`stages.count_validated_pings`, whose `zoning_plans` is this one
            # grid plan here) with only the counting package imported: importing `stages` would also load the
            # release's other stages, alerts and their clients, about 0.5 s that is not counting.
            from spatial_release.counting import count_pings, data_extent
            from spatial_release.counting.pings import usable_area
            from spatial_release.counting.plan import evaluate_with, grid_plan
            from spatial_release.geometry import Grid
            from spatial_release.levels import LEAF

            pings = [Path(args.pings)]
            extent = data_extent(engine, pings, usable_area(policy))
            plans = [
                grid_plan(LEAF, Grid(policy.geometry), tuple(policy.geometry.level_names()), evaluate_with(engine), extent)
            ]
            result = count_pings(policy, Period.parse(PERIOD), pings, plans, out, engine, progress)
        else:
            from spatial_release import stages

            result = stages.count_validated_pings(
                policy, Period.parse(PERIOD), [Path(args.pings)], out, engine, progress=progress
            )
    return {
        "rows": result.pings_located,
        "groups": result.groups,
        "units": result.units,
        "unsure": result.unsure_coordinates,
        "stages": result.seconds,
        **_group_counts(out),
    }


def work_pandas(args) -> dict:
    import numpy as np
    import pandas as pd
    from pyproj import Transformer

    frame = pd.read_parquet(args.pings, columns=["unit", "ts", "lon", "lat"])
    x, y = Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True).transform(
        frame["lon"].to_numpy(), frame["lat"].to_numpy()
    )
    frame["ix"] = np.floor(x / 250).astype("int64")
    frame["iy"] = np.floor(y / 250).astype("int64")
    frame["hour"] = frame["ts"].dt.tz_convert("America/New_York").dt.floor("h", ambiguous=True, nonexistent="shift_forward")
    counts = frame.groupby(["ix", "iy", "hour"])["unit"].nunique()
    return {"rows": len(frame), "groups": len(counts)}


# ---------------------------------------------------------------- same-job references (plain DuckDB, pandas)
# The job both do, as a skilled user would write it without the pipeline: project every ping with pyproj
# (EPSG:4326 -> EPSG:32618) in numpy, 250 m cells, hourly buckets; per (unit, hour) the dominant cell (most
# pings, ties to the smallest cell id); presence counts per cell x hour, per 1 km and 4 km parent x hour, and
# per hour; the membership (unit, bucket_start, cell_id) written to Parquet. Both write the pipeline's three
# files with its columns, so the driver can check they match it (`check_same_outputs`).
# Hours: America/New_York's offsets are whole hours, so its hourly buckets are the UTC hours (the pipeline
# maps 15-minute slots, which holds for any zone; these references use the shortcut, to their advantage).
# Ties: the city's cell ids all have the same number of digits, so the smallest id is the smallest (ix, iy).

REF_SIZE, REF_PARENTS, REF_CRS = 250, (1000, 4000), "EPSG:32618"
HOUR_US = 3_600_000_000


def _project_cells(lon, lat):
    """(ix, iy) of 250 m cells: pyproj over numpy arrays, in chunks (pyproj is single-threaded)."""
    import numpy as np
    from pyproj import Transformer

    to_utm = Transformer.from_crs("EPSG:4326", REF_CRS, always_xy=True)
    ix, iy = np.empty(len(lon), np.int64), np.empty(len(lon), np.int64)
    for s in range(0, len(lon), 4_000_000):
        x, y = to_utm.transform(lon[s : s + 4_000_000], lat[s : s + 4_000_000])
        ix[s : s + 4_000_000], iy[s : s + 4_000_000] = np.floor(x / REF_SIZE), np.floor(y / REF_SIZE)
    return ix, iy


def work_duckdb_job(args) -> dict:
    import duckdb
    import pyarrow as pa

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    pings = con.sql(
        f"SELECT unit, epoch_us(ts) // {HOUR_US} AS hour, lon, lat FROM read_parquet('{args.pings}')"
    ).to_arrow_table()
    ix, iy = _project_cells(pings["lon"].to_numpy(), pings["lat"].to_numpy())
    con.register("located", pa.table({"unit": pings["unit"], "hour": pings["hour"], "ix": ix, "iy": iy}))
    del pings
    # pings per (unit, hour, cell), then the dominant cell per (unit, hour): most pings, then smallest cell
    con.execute(
        "CREATE TEMP TABLE dominant AS SELECT unit, hour, "
        "arg_max(ix, (n, -ix, -iy)) AS ix, arg_max(iy, (n, -ix, -iy)) AS iy FROM "
        "(SELECT unit, hour, ix, iy, count(*) AS n FROM located GROUP BY unit, hour, ix, iy) "
        "GROUP BY unit, hour"
    )
    con.unregister("located")
    hour_ts = f"make_timestamptz(hour * {HOUR_US})"

    def cell_id(size: int, ix: str, iy: str) -> str:
        return f"'{size}mE' || CAST({ix} * {size} AS VARCHAR) || 'N' || CAST({iy} * {size} AS VARCHAR)"

    con.execute("CREATE TEMP TABLE cells AS SELECT ix, iy, hour, count(*) AS n FROM dominant GROUP BY ix, iy, hour")
    con.execute(
        f"COPY (SELECT {cell_id(REF_SIZE, 'ix', 'iy')} AS cell_id, {hour_ts} AS bucket_start, n "
        f"FROM cells) TO '{out / 'cell_counts.parquet'}' (FORMAT parquet)"
    )
    parents = " UNION ALL ".join(
        f"SELECT 'grid_{p}m' AS level, {cell_id(p, f'ix // {p // REF_SIZE}', f'iy // {p // REF_SIZE}')} AS area_id, "
        f"{hour_ts} AS bucket_start, sum(n)::BIGINT AS n FROM cells "
        f"GROUP BY ix // {p // REF_SIZE}, iy // {p // REF_SIZE}, hour"
        for p in REF_PARENTS
    )
    con.execute(
        f"COPY ({parents} UNION ALL SELECT 'total', 'total', {hour_ts}, sum(n)::BIGINT FROM cells "
        f"GROUP BY hour) TO '{out / 'margin_counts.parquet'}' (FORMAT parquet)"
    )
    con.execute(
        f"COPY (SELECT unit, {hour_ts} AS bucket_start, {cell_id(REF_SIZE, 'ix', 'iy')} AS cell_id "
        f"FROM dominant) TO '{out / 'membership.internal.parquet'}' (FORMAT parquet)"
    )
    return {"rows": len(ix), **_group_counts(out)}


LEAN_BITS = 22  # the lean job's cell key: ix * 2^22 + iy (the city's iy < 2^22, ix >= 0)


def work_duckdb_lean(args) -> dict:
    """The same job as a skilled DuckDB user writes it: integer cell keys, pyproj over numpy, one
    GROUP BY unit, hour, cell, then arg_max for the dominant cell; parents by integer division; ids only
    where the files are written (each distinct cell named once, joined to the membership)."""
    import duckdb
    import numpy as np
    import pyarrow as pa
    from pyproj import Transformer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    pings = con.sql(
        f"SELECT unit, epoch_us(ts) // {HOUR_US} AS hour, lon, lat FROM read_parquet('{args.pings}')"
    ).to_arrow_table()
    x, y = Transformer.from_crs("EPSG:4326", REF_CRS, always_xy=True).transform(
        pings["lon"].to_numpy(), pings["lat"].to_numpy()
    )
    cell = np.floor(x / REF_SIZE).astype(np.int64) * 2**LEAN_BITS + np.floor(y / REF_SIZE).astype(np.int64)
    rows = len(cell)
    con.register("located", pa.table({"unit": pings["unit"], "hour": pings["hour"], "cell": cell}))
    del pings, x, y
    # the dominant cell: most pings, ties to the smallest cell (keys compare like the ids here, see above)
    con.execute(
        f"CREATE TEMP TABLE dominant AS SELECT unit, hour, arg_max(cell, n * {2**40} - cell) AS cell FROM "
        "(SELECT unit, hour, cell, count(*) AS n FROM located GROUP BY unit, hour, cell) GROUP BY unit, hour"
    )
    con.unregister("located")
    con.execute("CREATE TEMP TABLE cells AS SELECT cell, hour, count(*) AS n FROM dominant GROUP BY cell, hour")
    hour_ts = f"make_timestamptz(hour * {HOUR_US})"
    ix, iy = f"(cell // {2**LEAN_BITS})", f"(cell % {2**LEAN_BITS})"

    def cell_id(size: int, ix: str, iy: str) -> str:
        return f"'{size}mE' || CAST({ix} * {size} AS VARCHAR) || 'N' || CAST({iy} * {size} AS VARCHAR)"

    con.execute(f"CREATE TEMP TABLE ids AS SELECT DISTINCT cell, {cell_id(REF_SIZE, ix, iy)} AS cell_id FROM cells")
    con.execute(
        f"COPY (SELECT i.cell_id, {hour_ts} AS bucket_start, c.n FROM cells c JOIN ids i USING (cell)) "
        f"TO '{out / 'cell_counts.parquet'}' (FORMAT parquet)"
    )
    parents = " UNION ALL ".join(
        f"SELECT 'grid_{p}m' AS level, {cell_id(p, f'{ix} // {p // REF_SIZE}', f'{iy} // {p // REF_SIZE}')} AS area_id, "
        f"{hour_ts} AS bucket_start, sum(n)::BIGINT AS n FROM cells "
        f"GROUP BY {ix} // {p // REF_SIZE}, {iy} // {p // REF_SIZE}, hour"
        for p in REF_PARENTS
    )
    con.execute(
        f"COPY ({parents} UNION ALL SELECT 'total', 'total', {hour_ts}, sum(n)::BIGINT FROM cells "
        f"GROUP BY hour) TO '{out / 'margin_counts.parquet'}' (FORMAT parquet)"
    )
    con.execute(
        f"COPY (SELECT d.unit, {hour_ts} AS bucket_start, i.cell_id FROM dominant d JOIN ids i USING (cell)) "
        f"TO '{out / 'membership.internal.parquet'}' (FORMAT parquet)"
    )
    return {"rows": rows, **_group_counts(out)}


def work_pandas_job(args) -> dict:
    import numpy as np
    import pandas as pd

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.read_parquet(args.pings, columns=["unit", "ts", "lon", "lat"])
    ix, iy = _project_cells(frame["lon"].to_numpy(), frame["lat"].to_numpy())
    hour = frame["ts"].dt.as_unit("us").astype("int64").to_numpy() // HOUR_US
    located = pd.DataFrame({"unit": frame["unit"].to_numpy(), "hour": hour, "ix": ix, "iy": iy})
    rows = len(frame)
    del frame
    located["cell"] = located["ix"] * 2**32 + located["iy"]  # one key that sorts like (ix, iy): iy >= 0 here
    per_cell = located.groupby(["unit", "hour", "cell"], sort=False).size().rename("n").reset_index()
    del located
    # dominant cell: most pings first, then the smallest cell; the first row of each (unit, hour)
    per_cell = per_cell.sort_values(["n", "cell"], ascending=[False, True])
    dominant = per_cell.drop_duplicates(["unit", "hour"])[["unit", "hour", "cell"]]
    dominant = dominant.assign(ix=dominant["cell"] // 2**32, iy=dominant["cell"] % 2**32)
    del per_cell

    def stamp(h):
        return pd.to_datetime(np.asarray(h, np.int64) * HOUR_US, unit="us", utc=True)

    def cell_id(size, ix, iy):
        return f"{size}mE" + (ix * size).astype(str) + "N" + (iy * size).astype(str)

    cells = dominant.groupby(["ix", "iy", "hour"], sort=False).size().rename("n").reset_index()
    pd.DataFrame(
        {
            "cell_id": cell_id(REF_SIZE, cells["ix"], cells["iy"]),
            "bucket_start": stamp(cells["hour"]),
            "n": cells["n"].astype(np.int64),
        }
    ).to_parquet(out / "cell_counts.parquet", index=False)
    margins = []
    for p in REF_PARENTS:
        f = p // REF_SIZE
        parent = (
            cells.assign(px=cells["ix"] // f, py=cells["iy"] // f)
            .groupby(["px", "py", "hour"], sort=False)["n"]
            .sum()
            .reset_index()
        )
        margins.append(
            pd.DataFrame(
                {
                    "level": f"grid_{p}m",
                    "area_id": cell_id(p, parent["px"], parent["py"]),
                    "bucket_start": stamp(parent["hour"]),
                    "n": parent["n"].astype(np.int64),
                }
            )
        )
    totals = cells.groupby("hour", sort=False)["n"].sum().reset_index()
    margins.append(
        pd.DataFrame(
            {"level": "total", "area_id": "total", "bucket_start": stamp(totals["hour"]), "n": totals["n"].astype(np.int64)}
        )
    )
    pd.concat(margins, ignore_index=True).to_parquet(out / "margin_counts.parquet", index=False)
    pd.DataFrame(
        {
            "unit": dominant["unit"].to_numpy(),
            "bucket_start": stamp(dominant["hour"]),
            "cell_id": cell_id(REF_SIZE, dominant["ix"], dominant["iy"]).to_numpy(),
        }
    ).to_parquet(out / "membership.internal.parquet", index=False)
    return {"rows": rows, **_group_counts(out)}


def _group_counts(out: Path) -> dict:
    """Rows of the three outputs (cell groups, margin groups, membership), read back from the files' footers."""
    import pyarrow.parquet as pq

    return {
        name: pq.ParquetFile(out / f"{name}.parquet").metadata.num_rows
        for name in ("cell_counts", "margin_counts", "membership.internal")
    }


WORKERS = {
    "generate": work_generate,
    "ingest": work_ingest,
    "read": work_read,
    "count": work_count,
    "pandas": work_pandas,
    "duckdb-job": work_duckdb_job,
    "duckdb-lean": work_duckdb_lean,
    "pandas-job": work_pandas_job,
}


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
    """Run one worker in a fresh process; its wall time, CPU time (user + system, all threads), peak RSS (MB)
    and largest spill (MB)."""
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
    assert proc.stdout is not None  # piped above
    output = proc.stdout.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {name} failed (exit {proc.returncode}): {' '.join(cmd)}")
    result = json.loads(output.strip().splitlines()[-1])
    result.update(
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime,
        rss_mb=max(usage.ru_maxrss / 1024, peak_tree[0] / 2**20),
        spill_mb=peak_spill[0] / 2**20,
    )
    return result


def _summarise(runs: list[dict]) -> dict:
    best = dict(runs[-1])
    best.update(
        wall=statistics.median(r["wall"] for r in runs),
        walls=[round(r["wall"], 2) for r in runs],
        cpu=statistics.median(r["cpu"] for r in runs),
        rss_mb=max(r["rss_mb"] for r in runs),
        spill_mb=max(r["spill_mb"] for r in runs),
    )
    return best


def _median_runs(name: str, extra: list[str], repeat: int, spill_dir: Path | None = None) -> dict:
    runs = []
    for _ in range(repeat):
        if spill_dir is not None:
            shutil.rmtree(spill_dir.parent, ignore_errors=True)
        runs.append(run_worker(name, extra, spill_dir))
        print(f"    {name}: {runs[-1]['wall']:.2f} s, peak RSS {runs[-1]['rss_mb']:.0f} MB", file=sys.stderr, flush=True)
    return _summarise(runs)


CONTENDERS = ("ingest", "read", "count", "duckdb-lean", "duckdb-job", "pandas-job", "spark", "pandas")
SAME_JOB = ("count", "duckdb-lean", "duckdb-job", "pandas-job", "spark")  # contenders that write the three outputs
OUTPUTS = ("cell_counts", "margin_counts", "membership.internal")


def check_same_outputs(folders: dict[str, Path], exact_rows: int) -> str:
    """Every same-job contender's three files hold the pipeline's rows (group counts equal, then the tables):
    the count tables row for row; the membership row for row when it has at most `exact_rows` rows, else by
    row count and an order-free checksum (sum of row hashes). Raises AssertionError on any difference."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    reference = folders["count"]
    notes = []
    for name, folder in folders.items():
        if name == "count":
            continue
        for output in OUTPUTS:
            a, b = (f"read_parquet('{f / (output + '.parquet')}')" for f in (reference, folder))
            rows_a, rows_b = (con.execute(f"SELECT count(*) FROM {x}").fetchall()[0][0] for x in (a, b))
            assert rows_a == rows_b, f"{name}: {output} has {rows_b:,} rows, the pipeline's {rows_a:,}"
            if output != "membership.internal" or rows_a <= exact_rows:
                diff = con.execute(
                    f"SELECT (SELECT count(*) FROM (FROM {a} EXCEPT ALL FROM {b})) + "
                    f"(SELECT count(*) FROM (FROM {b} EXCEPT ALL FROM {a}))"
                ).fetchall()[0][0]
                assert diff == 0, f"{name}: {output} differs from the pipeline's in {diff:,} rows"
                how = "row for row"
            else:
                sums = [
                    con.execute(f"SELECT sum(hash(unit, bucket_start, cell_id)::HUGEINT) FROM {x}").fetchall()[0][0]
                    for x in (a, b)
                ]
                assert sums[0] == sums[1], f"{name}: {output} differs from the pipeline's (checksum)"
                how = "by checksum"
            notes.append(f"{name} {output}: {rows_a:,} rows equal {how}")
    return "; ".join(notes)


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
    contenders = [c for c in CONTENDERS if c in args.only]
    if "ingest" in contenders or not pings.exists():
        rows.append(
            (
                "ingest",
                _median_runs(
                    "ingest",
                    ["--raw", str(raw), "--pings-dir", str(pings_dir)],
                    args.repeat if "ingest" in contenders else 1,
                ),
            )
        )
    plans, folders = {}, {}
    for name in contenders:
        if name == "ingest":
            continue
        extra = ["--pings", str(pings)]
        spill = None
        if name in SAME_JOB:
            out = data / f"out-{name}"
            folders[name] = out
            extra += ["--out", str(out)]
        if name in ("count", "spark"):
            extra += ["--engine", "duckdb" if name == "count" else "spark"]
            if args.zones:
                extra += ["--zones-file", str(zones_file(args.zones, Path(args.data)))]
            if args.memory_limit:
                extra += ["--memory-limit", args.memory_limit]
            spill = out / "spill"
        plans[name] = ("count" if name == "spark" else name, extra, spill)
    # the contenders take turns (one run of each, then again), so a change in the machine's load hits all alike
    runs: dict[str, list[dict]] = {name: [] for name in plans}
    for _ in range(args.repeat):
        for name, (worker, extra, spill) in plans.items():
            if name in folders:
                shutil.rmtree(folders[name], ignore_errors=True)
            runs[name].append(run_worker(worker, extra, spill))
            print(
                f"    {name}: {runs[name][-1]['wall']:.2f} s, CPU {runs[name][-1]['cpu']:.2f} s, "
                f"peak RSS {runs[name][-1]['rss_mb']:.0f} MB",
                file=sys.stderr,
                flush=True,
            )
    rows += [(name, _summarise(r)) for name, r in runs.items()]
    check = ""
    if "count" in folders and len(folders) > 1 and not args.zones:
        check = check_same_outputs(folders, args.exact_rows)
        print(f"  {size}: same outputs: {check}", file=sys.stderr, flush=True)
    table = []
    by_name = dict(rows)
    count = by_name.get("count")
    for name, r in rows:
        table.append(
            {
                "size": size,
                "ids": ids,
                "step": name,
                "pings": r["rows"],
                **r,
                "check": check,
                "x_pandas": by_name["pandas"]["wall"] / r["wall"] if "pandas" in by_name else None,
                "x_count": r["wall"] / count["wall"] if count else None,
                "x_read": r["wall"] / by_name["read"]["wall"] if "read" in by_name else None,
            }
        )
    if args.keep_data is False and size == "500M":
        shutil.rmtree(data, ignore_errors=True)
    return table


def print_table(rows: list[dict]) -> None:
    print(
        "| pings | ids | step | median wall (runs) | median CPU | pings/s | peak RSS | spill "
        "| wall / pipeline's | time vs read floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        count_ratio = f"{r['x_count']:.2f}x" if r["x_count"] else "-"
        read_ratio = f"{r['x_read']:.2f}x" if r["x_read"] else "-"
        print(
            f"| {r['pings']:,} | {r['ids']} | {r['step']} | {r['wall']:.2f} s ({', '.join(map(str, r['walls']))}) "
            f"| {r['cpu']:.2f} s | {r['pings'] / r['wall'] / 1e6:.2f} M | {r['rss_mb']:,.0f} MB | {r['spill_mb']:,.0f} MB "
            f"| {count_ratio} | {read_ratio} |"
        )
    for r in rows:
        if r["step"] == "count":
            others = {o["step"]: o for o in rows if o["size"] == r["size"] and o["ids"] == r["ids"]}
            ratios = [
                f"{others[name]['wall'] / r['wall']:.2f}x faster than {name}"
                for name in ("duckdb-lean", "duckdb-job", "pandas-job", "pandas", "spark")
                if name in others
            ]
            if ratios:
                print(
                    f"  {r['size']} {r['ids']}: the pipeline's counting is "
                    + ", ".join(ratios)
                    + " (median wall times, whole processes)"
                )
        if r["step"] in ("count", "spark") and "stages" in r:
            print(
                f"  {r['size']} {r['ids']} {r['step']}: stages {r['stages']}, {r['groups']:,} cell-hour groups, "
                f"{r['units']:,} units, {r['unsure']:,} unsure coordinates assigned by pyproj"
            )
    for check in dict.fromkeys(r["check"] for r in rows if r["check"]):
        print(f"  outputs checked: {check}")


def run_downstream(args) -> None:
    for script, extra in (
        (
            "suppression_bench.py",
            ["--release-mode", "--persons", str(args.suppression_persons), "--days", str(args.suppression_days)],
        ),
        ("risk_bench.py", ["--persons", str(args.risk_persons), "--days", str(args.risk_days)]),
    ):
        cmd = [sys.executable, str(ROOT / "bench" / script), *extra]
        print(f"\n$ python bench/{script} {' '.join(extra)}", flush=True)
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        assert proc.stdout is not None  # piped above
        lines = [line for line in proc.stdout.read().splitlines() if not line.startswith("Running HiGHS")]
        print("\n".join(lines))
        print(
            f"(wall {time.perf_counter() - started:.1f} s, peak RSS {usage.ru_maxrss / 1024:,.0f} MB, "
            f"exit {os.waitstatus_to_exitcode(status)})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--raw"), parser.add_argument("--pings"), parser.add_argument("--pings-dir")
    parser.add_argument("--out"), parser.add_argument("--engine", default="duckdb")
    parser.add_argument("--sizes", nargs="+", default=["10M", "50M"], choices=sorted(SIZES))
    parser.add_argument("--ids", nargs="+", default=["int"], choices=["text", "int"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--only",
        nargs="+",
        default=["ingest", "read", "count", "duckdb-lean", "duckdb-job", "pandas-job"],
        choices=list(CONTENDERS),
    )
    parser.add_argument(
        "--exact-rows",
        type=int,
        default=20_000_000,
        help="compare memberships up to this many rows row for row (larger: count and checksum)",
    )
    parser.add_argument("--spark", action="store_true", help="also time the counting step on local[*] Spark")
    parser.add_argument("--memory-limit", help="DuckDB memory_limit for the counting step, e.g. 2GB")
    parser.add_argument(
        "--zones", type=int, help="count into this many polygon zones (Voronoi, EPSG:4326) instead of the 250 m grid"
    )
    parser.add_argument("--zones-file", help=argparse.SUPPRESS)
    parser.add_argument("--data", default=str(ROOT / "bench" / ".data"), help="generated inputs are kept here")
    parser.add_argument("--keep-data", action="store_true", help="keep the 500M-ping files after the run")
    parser.add_argument(
        "--downstream", action="store_true", help="also time suppression + audit and the risk estimator on generated tables"
    )
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
    print(
        f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; command: "
        f"python bench/counting_bench.py {' '.join(sys.argv[1:])}",
        flush=True,
    )
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
