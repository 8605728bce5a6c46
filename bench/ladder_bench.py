"""Time generalisation ladder benchmark: a `--k` sweep of how much of the finest figures a ladder release shows.

What it measures, per dataset and k: each zoning's `shown_at_leaf` (the share of its finest figures' unit counts
shown at its own leaf level, at any time rung) for the policy bucket 1d with the ladder [1w, period], against
the single-level 1d release protected on the same counts at the same k (the `baseline` of the protection
step's internal utility report, `summary.utility.headline` of `<work>/<dataset>/<period>/candidate/manifest.json`),
and their ratio; the `finest_shown` shares at the leaf's rungs (e.g. block / block@1w / block@period); the
coarser figures the ladder offered (`summary.ladder.offered`); the protection step's seconds; whether the
protection's own audit passed (`summary.suppression.audit.passed`); and every input check and publication
guarantee (`stages.run_guarantees`), each printed by name. A failing guarantee or a crash is printed loudly
and makes the exit status 1; nothing is retried or hidden.

    .venv/bin/python bench/ladder_bench.py                      # both datasets, k = 5, 10, 20
    .venv/bin/python bench/ladder_bench.py --k 5 10 20          # the same, explicit
    .venv/bin/python bench/ladder_bench.py --only citibike      # Citi Bike Jersey City only
    .venv/bin/python bench/ladder_bench.py --only synthetic --persons 3000
    .venv/bin/python bench/ladder_bench.py --json ladder.json   # the rows as JSON too

Datasets (2018-Q1, policies written by this script into a temporary folder, with absolute paths):
- citibike: Citi Bike Jersey City trips (`../shared/data/citibike-jc`, the source mapping of
  policies/jc-bikes.yaml), unit devices, measure presence, main geometry the council wards (`jc-wards.geojson`,
  id `ward`), linked zoning `block` (`hudson-blocks-geo.geojson`, id `GEOID`, parent `tract` = the first 11
  digits), bucket 1d in America/New_York, ladder [1w, period], suppression budget 0.9. It needs `../shared`
  beside the project (CI has it; a user's machine usually does not): when absent, the dataset is skipped with
  a message saying so.
- synthetic: the project's generator (`spatial_release.traces.synthetic`, generated at ingest from the
  policy's `source.synthetic`, the column mapping of policies/demo.yaml), `--persons` persons (default 3000),
  a 500 m grid with 2 km and 8 km parents in EPSG:32618, bucket 1d, ladder [1w, period], suppression budget
  `--budget` (default 0.9, as for Citi Bike: the budget is a utility limit, and the sweep reports utility
  itself), no structural zeros. Measured on 2 cores (2026-11-30): at 300 persons a k = 5 run takes about
  1.5 minutes; at the default 3000 persons the k = 5 protection was still in its audit after 17 minutes and was
  stopped (its end was not measured): the default sweep of this dataset is long; `--persons 300` is a quick one.

Every release passes through the risk gate (`GATE`: risk.model attack with coarsen apply, the shipped ceilings;
the Citi Bike landscape is jersey-city.yaml, the synthetic one demo.yaml): the columns `shown (gated)` is the
leaf share of the release the gate lets out (0 when it blocks), `leaf ladder` the same release's share before
the gate's verdict (equal unless it blocks), and `risk gate`, `attack`, `upper bound`, `configuration` the
gate's verdict, its attack figure, the uniqueness upper bound and the configuration protection chose.

The stages run directly (ingest, counts, protect, risk, guarantees: no Dagster), each (dataset, k) in
its own fresh process (one at a time), so a crash in one leaves the others' figures; its wall time is the
process's, protection seconds are `stages.run_protect`'s (the ladder release, its audit, the utility report and
the baseline's protection). In the tables `cell` is the main geometry's leaf level (the wards; the 500 m grid
cells), `fs <level>` a `finest_shown` share, ratio = ladder / baseline. The work areas are in a temporary
folder, deleted at the end unless `--keep DIR` names one (then a failing run can be inspected and re-run with
`--only DATASET --k K --keep DIR`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PERIOD = "2018-Q1"
SHARED_DATA = ROOT.parent / "shared" / "data"
CITIBIKE_DIR = SHARED_DATA / "citibike-jc"
JC_DIR = SHARED_DATA / "jersey-city"
DATASETS = ("citibike", "synthetic")
TIME = {"bucket": "1d", "timezone": "America/New_York", "ladder": ["1w", "period"]}


def _scratch_environment(folder: Path) -> None:
    """Never write into the project's ledger/, releases/, work/ or alerts/, never sign with the user's key and
    never send an alert: every default the package reads points into this run's scratch folder."""
    for name in ("LEDGER", "RELEASES", "WORK", "ALERTS"):
        os.environ[f"SPATIAL_RELEASE_{name}"] = str(folder / name.lower())
    os.environ["SPATIAL_RELEASE_SIGNING_KEY"] = str(folder / "keys" / "ledger-ed25519.key")
    for name in (
        "PUBLIC_KEY",
        "SMTP_HOST",
        "SMTP_PORT",
        "SMTP_FROM",
        "SMTP_TO",
        "SMTP_USER",
        "SMTP_PASSWORD",
        "SMTP_STARTTLS",
        "SLACK_WEBHOOK_URL",
    ):
        os.environ.pop(f"SPATIAL_RELEASE_{name}", None)


# ---- policies -------------------------------------------------------------------------------------------


def citibike_policy(k: int, budget: float) -> dict:
    """policies/jc-bikes.yaml's source mapping (paths made absolute), wards + blocks, 1d with the ladder."""
    import yaml

    source = yaml.safe_load((ROOT / "policies" / "jc-bikes.yaml").read_text())["source"]
    source["paths"] = [str(CITIBIKE_DIR / Path(p).name) for p in source["paths"]]
    return {
        "name": "jc-bikes-ladder",
        "version": 1,
        "unit": "devices",
        "k": k,
        "measure": "presence",
        "source": source,
        "geometry": {
            "kind": "zones",
            "path": str(JC_DIR / "jc-wards.geojson"),
            "id": "ward",
            "linked": [
                {
                    "name": "block",
                    "path": str(JC_DIR / "hudson-blocks-geo.geojson"),
                    "id": "GEOID",
                    "parents": [{"level": "tract", "prefix": 11}],
                }
            ],
        },
        "time": TIME,
        "suppression": {"budget": budget},
        "risk": {**GATE, "landscape": str(ROOT / "policies" / "landscapes" / "jersey-city.yaml")},
    }


def synthetic_policy(k: int, budget: float, persons: int) -> dict:
    """policies/demo.yaml's source mapping, traces generated at ingest (`source.synthetic`), 500 m grid."""
    import yaml

    source = yaml.safe_load((ROOT / "policies" / "demo.yaml").read_text())["source"]
    source.pop("paths", None)
    source["synthetic"] = {**source.get("synthetic", {}), "persons": persons}
    return {
        "name": "synthetic-ladder",
        "version": 1,
        "unit": "persons",
        "k": k,
        "measure": "presence",
        "source": source,
        "geometry": {"kind": "grid", "crs": "EPSG:32618", "size_m": 500, "parents_m": [2000, 8000]},
        "time": TIME,
        "suppression": {"budget": budget},
        "risk": {**GATE, "zones": "grid_8000m", "landscape": str(ROOT / "policies" / "landscapes" / "demo.yaml")},
    }


# The risk gate every release of the sweep passes through (the shipped policies' settings): the utility is
# measured on the release that passes every gate, after the zones over it were coarsened.
GATE = {"model": "attack", "coarsen": "apply", "per_release_ceiling": 0.05, "cumulative_ceiling": 0.20}


# ---- one (dataset, k): the worker process ----------------------------------------------------------------


def run_one(dataset: str, k: int, persons: int, budget: float, folder: Path) -> dict:
    """Write the policy, run ingest -> counts -> protect -> guarantees, and return the row."""
    _scratch_environment(folder / "scratch")
    import logging

    import yaml

    # the stages' progress messages (with times) go to the run's stderr.log
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from spatial_release import stages
    from spatial_release.period import Period
    from spatial_release.policy import load_policy

    data = citibike_policy(k, budget) if dataset == "citibike" else synthetic_policy(k, budget, persons)
    policy_path = folder / f"{data['name']}.yaml"
    policy_path.write_text(yaml.safe_dump(data, sort_keys=False))
    policy = load_policy(policy_path)
    from spatial_release.ledger import Ledger
    from spatial_release.stages.context import Published

    ctx = stages.ReleaseContext(policy, Period.parse(PERIOD), folder / "work")
    ledger = Ledger(folder / "ledger", folder / "releases")
    published = Published(ledger, folder / "releases")
    seconds = {}
    for stage, run in (
        ("ingest", stages.run_ingest),
        ("counts", stages.run_counts),
        ("protect", lambda c: stages.run_protect(c, published=published)),
        ("risk", lambda c: stages.run_risk(c, ledger)),
    ):
        start = time.perf_counter()
        result = run(ctx)
        seconds[stage] = round(time.perf_counter() - start, 2)
    assert isinstance(result, stages.RiskAssessment)  # the last stage run: the risk step's assessment
    risk = result
    start = time.perf_counter()
    checks = stages.run_guarantees(ctx)
    seconds["guarantees"] = round(time.perf_counter() - start, 2)
    summary = json.loads((ctx.area.candidate / "manifest.json").read_text())["summary"]
    row = row_of(dataset, k, summary, checks, seconds)
    row["risk"] = {
        "status": risk.status,
        "worst_zone": risk.worst_zone,
        "attack": risk.release_figure,
        "upper_bound": risk.upper_bound,
        "configuration": (summary.get("frontier") or [{"configuration": "as counted"}])[-1]["configuration"],
        "tried": len(summary.get("frontier") or []),
    }
    # Under the gates: a release the risk gate blocks shows nothing
    for zoning in row["zonings"].values():
        zoning["shown_gated"] = zoning["shown_at_leaf"] if risk.status != "block" else 0.0
    return row


def row_of(dataset: str, k: int, summary: dict, checks, seconds: dict) -> dict:
    utility = summary["utility"]
    zonings = {}
    for zoning, head in utility["headline"].items():
        shares = utility["zonings"][zoning]["finest_shown"]
        rungs = [lv for lv in shares if lv == zoning or lv.startswith(f"{zoning}@")]
        zonings[zoning] = {
            "shown_at_leaf": head["shown_at_leaf"],
            "baseline": head["baseline"],
            "ratio": head["shown_at_leaf"] / head["baseline"] if head["baseline"] else None,
            "finest_shown_at_leaf_rungs": {lv: shares[lv] for lv in rungs},
            "finest_shown_none": shares.get("none"),
        }
    audit = summary["suppression"]["audit"]
    return {
        "dataset": dataset,
        "k": k,
        "status": "ok",
        "zonings": zonings,
        "ladder": summary.get("ladder"),
        "offered": (summary.get("ladder") or {}).get("offered", {}),
        "share_withheld": summary["share_withheld"],
        "protection_seconds": seconds["protect"],
        "stage_seconds": seconds,
        "audit_passed": bool(audit["passed"]),
        "audit": {key: audit.get(key) for key in ("primaries_audited", "failures", "errors", "seconds")},
        "guarantees": [{"name": c.name, "passed": bool(c.passed), "summary": c.summary} for c in checks],
        "guarantees_passed": all(c.passed for c in checks),
    }


# ---- the sweep ---------------------------------------------------------------------------------------------


def run_in_subprocess(dataset: str, k: int, args: argparse.Namespace, base: Path) -> dict:
    folder = base / f"{dataset}-k{k}"
    folder.mkdir(parents=True, exist_ok=True)
    out, log = folder / "row.json", folder / "stderr.log"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        dataset,
        "--k",
        str(k),
        "--persons",
        str(args.persons),
        "--budget",
        str(args.budget),
        "--out",
        str(out),
        "--keep",
        str(folder),
    ]
    print(f"... {dataset} k={k}: running (log {log})", flush=True)
    start = time.perf_counter()
    with log.open("w") as errors:
        code = subprocess.run(cmd, stdout=errors, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    wall = round(time.perf_counter() - start, 1)
    if code == 0 and out.exists():
        row = json.loads(out.read_text())
    else:
        tail = log.read_text().strip().splitlines()[-25:]
        row = {
            "dataset": dataset,
            "k": k,
            "status": "error",
            "returncode": code,
            "error": "\n".join(tail),
            "reproduce": f"{sys.executable} bench/ladder_bench.py --only {dataset} --k {k} "
            f"--persons {args.persons} --budget {args.budget} --keep /tmp/ladder-{dataset}-k{k}",
        }
        print(f"!!! {dataset} k={k} FAILED (exit {code}); last lines of {log}:", flush=True)
        print("\n".join(f"!!!   {line}" for line in tail), flush=True)
    row["wall_seconds"] = wall
    for check in row.get("guarantees", []):
        if not check["passed"]:
            print(f"!!! {dataset} k={k}: GUARANTEE FAILED: {check['name']}: {check['summary']}", flush=True)
    if row.get("status") == "ok" and not row["audit_passed"]:
        print(f"!!! {dataset} k={k}: THE PROTECTION'S AUDIT FAILED: {row['audit']}", flush=True)
    return row


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def print_table(dataset: str, rows: list[dict]) -> None:
    print(
        f"\n== {dataset} ({PERIOD}, bucket 1d, ladder [1w, period]; cell = the main geometry's areas, fs = finest_shown) =="
    )
    ok = [r for r in rows if r["status"] == "ok"]
    zonings = list(ok[0]["zonings"]) if ok else []
    header = ["k"]
    for z in zonings:
        rungs = list(ok[0]["zonings"][z]["finest_shown_at_leaf_rungs"])
        header += [f"{z}: shown (gated)", "leaf ladder", "baseline", "ratio", *[f"fs {lv}" for lv in rungs]]
    header += [
        "risk gate",
        "attack",
        "upper bound",
        "configuration",
        "offered",
        "protect s",
        "wall s",
        "audit",
        "guarantees",
    ]
    lines = [header]
    for r in rows:
        if r["status"] != "ok":
            cells = [""] * len(header)
            cells[0], cells[1] = str(r["k"]), f"ERROR (exit {r['returncode']}), see above"
            cells[header.index("wall s")] = f"{r['wall_seconds']:.1f}"
            lines.append(cells)
            continue
        cells = [str(r["k"])]
        for z in zonings:
            zr = r["zonings"][z]
            cells += [
                _pct(zr.get("shown_gated")),
                _pct(zr["shown_at_leaf"]),
                _pct(zr["baseline"]),
                "-" if zr["ratio"] is None else f"{zr['ratio']:.3f}",
                *[_pct(v) for v in zr["finest_shown_at_leaf_rungs"].values()],
            ]
        offered = " ".join(f"{rung}={n}" for rung, n in r["offered"].items()) or "-"
        failed = [g["name"] for g in r["guarantees"] if not g["passed"]]
        risk = r.get("risk", {})
        cells += [
            risk.get("status", "-"),
            "-" if risk.get("attack") is None else f"{risk['attack']:.4f}",
            "-" if risk.get("upper_bound") is None else f"{risk['upper_bound']:.4f}",
            risk.get("configuration", "-"),
        ]
        cells += [
            offered,
            f"{r['protection_seconds']:.1f}",
            f"{r['wall_seconds']:.1f}",
            "passed" if r["audit_passed"] else "FAILED",
            "all passed" if not failed else "FAILED: " + ",".join(failed),
        ]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths)))
    for r in ok:
        print(f"k={r['k']} guarantees: " + ", ".join(f"{g['name']}={g['passed']}" for g in r["guarantees"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--only", choices=DATASETS)
    parser.add_argument("--persons", type=int, default=3000, help="synthetic persons (default 3000)")
    parser.add_argument("--budget", type=float, default=0.9, help="suppression budget of both policies")
    parser.add_argument("--json", help="write the rows as JSON to this file")
    parser.add_argument("--keep", help="work folder to keep (default: a temporary folder, deleted)")
    parser.add_argument("--worker", choices=DATASETS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        row = run_one(args.worker, args.k[0], args.persons, args.budget, Path(args.keep))
        Path(args.out).write_text(json.dumps(row, indent=1))
        return

    from spatial_release.suppression.utility import DEFINITION

    print(f"utility.DEFINITION: {DEFINITION}\n", flush=True)
    datasets = [args.only] if args.only else list(DATASETS)
    if "citibike" in datasets and not (CITIBIKE_DIR.is_dir() and JC_DIR.is_dir()):
        print(f"SKIPPED citibike: {SHARED_DATA} is absent (../shared must be beside the project; CI has it)")
        datasets.remove("citibike")
    temp = None if args.keep else tempfile.TemporaryDirectory(prefix="ladder-bench-")
    base = Path(args.keep) if temp is None else Path(temp.name)
    started = time.perf_counter()
    rows = {}
    for dataset in datasets:  # each table as soon as its dataset is done (a later one may run for long)
        rows[dataset] = [run_in_subprocess(dataset, k, args, base) for k in args.k]
        print_table(dataset, rows[dataset])
        print(flush=True)
    all_rows = [r for dataset_rows in rows.values() for r in dataset_rows]
    if args.json:
        Path(args.json).write_text(json.dumps(all_rows, indent=1))
        print(f"\nrows written to {args.json}")
    bad = [r for r in all_rows if r["status"] != "ok" or not r["guarantees_passed"] or not r["audit_passed"]]
    print(f"\nwall time of the sweep: {time.perf_counter() - started:.1f} s")
    if bad:
        print("!!! FAILED: " + ", ".join(f"{r['dataset']} k={r['k']}" for r in bad))
    if temp is not None:
        temp.cleanup()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
