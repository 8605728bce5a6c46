"""Releases driven through the command line, as an operator runs them: `spatial-release release` into a root
folder that holds the run's `out/` (releases and work areas) and `ledger/`, and the stages before publication
as the job runs them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from spatial_release import cli, stages
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy

DATASET = "fixture"  # the fixture policy's name (support.fixture.policy_dict)
PERIOD = "2018-Q1"


def release(
    policy: Path, root: Path, period: str = PERIOD, traces: Sequence[Path] | None = None, extra: Sequence[str] = ()
) -> int:
    """`spatial-release release` of `policy` for `period` into `root` (out/ and ledger/ there), in this
    process: its exit code. `traces` are named on the command line (else the policy's source paths);
    `extra` are further options (e.g. --memory-limit)."""
    argv = ["release", "--policy", str(policy), "--period", period]
    if traces:
        argv += ["--traces", *map(str, traces)]
    argv += ["--out", str(root / "out"), "--ledger", str(root / "ledger"), *extra]
    return cli.main(argv)


def verify(root: Path) -> int:
    """`spatial-release ledger verify` of `root`'s ledger against its published folders: its exit code."""
    return cli.main(["ledger", "verify", "--ledger", str(root / "ledger"), "--releases", str(root / "out/releases")])


def published_folder(root: Path, period: str = PERIOD, dataset: str = DATASET) -> Path:
    """Where `release` into `root` publishes `period`."""
    return root / "out" / "releases" / dataset / period


def nothing_published(root: Path) -> bool:
    """No release folder under `root`'s out/ and no ledger entry: a refused run left nothing public."""
    return not list((root / "out").glob("releases/**/release.json")) and not (root / "ledger" / "entries.jsonl").exists()


def prepare(root: Path, policy_path: Path, label: str) -> stages.WorkArea:
    """Every stage before publication, as the job runs them, in `root`/work with `root`/ledger (the traces
    are `traces-<label>.csv` beside the policy): the work area, ready to publish."""
    policy, period = load_policy(policy_path), Period.parse(label)
    ctx = stages.ReleaseContext(policy, period, root / "work")
    area = ctx.area
    stages.run_ingest(ctx, [policy_path.parent / f"traces-{label}.csv"])
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    stages.run_risk(ctx, Ledger(root / "ledger", root / "releases"))
    return area
