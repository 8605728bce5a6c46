"""Releases driven through the command line, as an operator runs them: `spatial-release release` into a root
folder that holds the run's `out/` (releases and work areas) and `ledger/`, and the stages before publication
as the job runs them."""

from __future__ import annotations

import fcntl
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from spatial_release import cli, stages
from spatial_release.ledger import ENTRIES, HEAD, Ledger
from spatial_release.ledger.keys import SIGNING_KEY_ENV
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.stages.context import Published
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings
from support.fixture import advantage_city_policy, two_quarter_policy

DATASET = "fixture"  # the fixture policy's name (support.fixture.policy_dict)
PERIOD = "2018-Q1"


def release(
    policy: Path, root: Path, period: str = PERIOD, traces: Sequence[Path] | None = None, extra: Sequence[str] = ()
) -> int:
    """`spatial-release release` of `policy` for `period` into `root` (out/ and ledger/ there), in this
    process: its exit code. `traces` are named on the command line (else the policy's source paths);
    `extra` are further options (e.g. --memory-limit)."""
    return cli.main(release_argv(policy, root, period, traces, extra))


def release_argv(
    policy: Path, root: Path, period: str = PERIOD, traces: Sequence[Path] | None = None, extra: Sequence[str] = ()
) -> list[str]:
    """The command line `release` runs (without the program's name), for tests that edit it."""
    argv = ["release", "--policy", str(policy), "--period", period]
    if traces:
        argv += ["--traces", *map(str, traces)]
    return [*argv, "--out", str(root / "out"), "--ledger", str(root / "ledger"), *extra]


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


def protected_candidate(policy, tmp_path) -> stages.ReleaseContext:
    """A release of `policy` through ingest, counting and protection, in tmp_path/work: what the risk step reads."""
    ctx = stages.ReleaseContext(policy, Period.parse(PERIOD), tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    return ctx


def protected_advantage_city(folder: Path, name: str, seed: int | None = None) -> stages.ReleaseContext:
    """A synthetic city of 200 persons over 3 weeks (`seed`: the generator's, else its default), released at
    1 km cells x 1 week with 4 km risk zones under the advantage gate (`support.fixture.advantage_city_policy`),
    protected: the work area in `folder`/work, the ledger and releases beside it."""
    config = SyntheticConfig(persons=200, days=21) if seed is None else SyntheticConfig(persons=200, days=21, seed=seed)
    pings = write_pings(generate_pings(config), folder / "pings.parquet")
    ctx = stages.ReleaseContext(
        load_policy(advantage_city_policy(folder, name, 1000, 4000, coarsen="propose")),
        Period.parse(PERIOD),
        folder / "work",
    )
    stages.run_ingest(ctx, [pings])
    stages.run_counts(ctx)
    stages.run_protect(ctx, published=Published(Ledger(folder / "ledger", folder / "releases"), folder / "releases"))
    return ctx


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between the processes of a test run (xdist workers), released when the file closes
    (also when a worker dies): fcntl, so the tests need no locking package."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


KEY = Path("keys") / "ledger-ed25519.key"  # a shared release's own signing key, inside its root
_COMPLETE = ".complete"


class ReleaseCache:
    """Releases made once per test run and shared by every test (and every xdist worker) that only reads
    one: each is built under `folder`/<name> by the first process that asks, under a file lock, and never
    changed after; a test works on its own copy (`copy`).

    A shared release is signed with its own key, inside its root (`KEY`), not the test process's: the xdist
    workers each have their own scratch key, and a ledger's pins live beside the key that signed it, so each
    copy keeps its own pins (a test that publishes more into its copy moves no other copy's pin)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def template(self, name: str, build: Callable[[Path], None]) -> Path:
        """The release `name`, built by `build(root)` (which publishes into root/out and root/ledger, signed
        with the key at root/KEY) if no process of this run has built it yet."""
        root = self.folder / name
        self.folder.mkdir(parents=True, exist_ok=True)
        with _locked(self.folder / f"{name}.lock"):
            if not (root / _COMPLETE).exists():
                # a build that failed part way (in this run) is started over, never used
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir()
                with pytest.MonkeyPatch.context() as patch:
                    sign_as(root, patch)
                    build(root)
                (root / _COMPLETE).touch()
        return root

    def copy(self, name: str, build: Callable[[Path], None], dest: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        """A copy of the release `name` at `dest`, signed (for `monkeypatch`'s test) with the copy's key. The
        build names its files relative to the policy: the copy's policy is the published one, byte for byte."""
        shutil.copytree(self.template(name, build), dest, symlinks=True)
        (dest / _COMPLETE).unlink()
        sign_as(dest, monkeypatch)
        return dest


def sign_as(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test signs (and trusts, and keeps its pins) with the key of the shared release copied to `root`."""
    monkeypatch.setenv(SIGNING_KEY_ENV, str(root / KEY))


def build_two_quarter_q1(root: Path) -> None:
    """The fixture programme of two quarters (support.fixture.two_quarter_policy) with 2018-Q1 published
    through the command line; 2018-Q2's traces are beside it, unreleased."""
    policy = two_quarter_policy(root)
    assert release(policy, root, "2018-Q1", traces=[root / "traces-2018-Q1.csv"]) == 0


def copy_programme(source: Path, root: Path) -> Path:
    """A copy of the programme folder `source` (policy, traces, out/, ledger/) at `root`: the policy names its
    traces relative to its folder, so the copy is the same programme at another path."""
    shutil.copytree(source, root)
    return root


def release_period(root: Path, policy: Path, period: str) -> int:
    """`release` of `period` from its own traces, `root`/traces-<period>.csv (the two-quarter programme's)."""
    return release(policy, root, period, traces=[root / f"traces-{period}.csv"])


def write_ledger_entries(root: Path, entries: list[dict], head: bool = True) -> None:
    """`entries` as `root`'s whole ledger, and its HEAD naming the last of them unless `head` is False."""
    (root / "ledger" / ENTRIES).write_text("".join(json.dumps(e) + "\n" for e in entries))
    if head:
        (root / "ledger" / HEAD).write_text(f"{len(entries)} {entries[-1]['hash']}\n")
