"""A Spark standalone cluster on this machine for benchmarks: a master and N workers as separate processes
from the PySpark distribution, on 127.0.0.1, until Ctrl-C (or SIGTERM) stops them all.

    python bench/standalone_cluster.py --workers 2 --cores 1 --memory 6g &
    python bench/release_bench.py --pings 10M --risk-models uniqueness --engine spark \\
        --spark-master spark://127.0.0.1:7077 --spark-conf spark.executor.memory=6g

The workers' folders and logs go under --root (default bench/.data/cluster); the CI test of the same set-up is
tests/test_spark_cluster.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="6g", help="memory per worker")
    parser.add_argument("--port", type=int, default=7077)
    parser.add_argument("--root", default=str(ROOT / "bench" / ".data" / "cluster"))
    args = parser.parse_args()
    from pyspark.find_spark_home import _find_spark_home

    spark_class = Path(_find_spark_home()) / "bin" / "spark-class"
    root = Path(args.root)
    (root / "conf").mkdir(parents=True, exist_ok=True)  # empty: no spark-defaults.conf of the machine
    (root / "logs").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_class.parents[1]),
        "SPARK_CONF_DIR": str(root / "conf"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    url = f"spark://127.0.0.1:{args.port}"
    commands = [("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(args.port)])]
    for i in range(args.workers):
        work = root / f"worker{i}"
        work.mkdir(exist_ok=True)
        commands.append(
            (
                f"worker{i}",
                ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(args.cores)]
                + ["--memory", args.memory, "--work-dir", str(work), url],
            )
        )
    processes = []
    for name, command in commands:
        with open(root / "logs" / f"{name}.log", "wb") as log:
            processes.append(subprocess.Popen([str(spark_class), *command], env=env, stdout=log, stderr=subprocess.STDOUT))
        time.sleep(3 if name == "master" else 0)
    print(f"{url}: {args.workers} workers x {args.cores} cores, {args.memory} each; logs in {root / 'logs'}", flush=True)

    def stop(*_) -> None:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while all(p.poll() is None for p in processes):
        time.sleep(1)
    stop()
    return 1


if __name__ == "__main__":
    sys.exit(main())
