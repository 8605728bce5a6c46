"""Two runs at once, in real processes.

- Two publications of one period at once record it once; the loser is refused, never a second entry.
- Two publications of different periods at once: the second one's risk assessment sees the first (its
  cumulative figure equals the sequential one), because the read, the assessment and the append happen
  under one ledger lock.
- A re-run of a published period is refused before ingest writes anything: the work area that the
  published release's audit reads stays as it was.
- Two command-line runs of one period at once: one publishes, the other stops with a clear message, and
  the published release's audit still passes on its own work area.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.fixture import QUARTER_DAYS, two_quarter_policy
from support.releases import prepare

from spatial_release import stages
from spatial_release.fileio import sha256_file
from spatial_release.ledger import read_ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy

_PUBLISHER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from spatial_release import stages
    from spatial_release.stages import publish as publish_stage
    from spatial_release.ledger import Ledger
    from spatial_release.period import Period
    from spatial_release.policy import load_policy

    policy_path, label, root, start = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    policy, period = load_policy(policy_path), Period.parse(label)
    ctx = stages.ReleaseContext(policy, period, root / "work")
    area = ctx.area
    publish = publish_stage.publish

    def slow_publish(*args, **kwargs):  # widen the window between reading the ledger and appending to it
        time.sleep(2)
        return publish(*args, **kwargs)

    publish_stage.publish = slow_publish
    while not start.exists():  # both processes are imported and ready: go at once
        time.sleep(0.005)
    try:
        target, record = stages.run_publish(ctx, root / "releases", Ledger(root / "ledger"))
        print(json.dumps({"published": str(target), "cumulative": record.risk.cumulative}))
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
""")


def publish_at_once(tmp_path: Path, policy_path: Path, labels: list[str]) -> list[dict]:
    """Run run_publish for each label in its own process, released together, each pausing 2 s before it
    writes the release (as a slow disk would); their JSON results."""
    start = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _PUBLISHER, str(policy_path), label, str(tmp_path), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for label in labels
    ]
    time.sleep(4)  # let both import everything, so that they really race
    start.write_text("go")
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def release_entries(tmp_path: Path) -> list[dict]:
    return [e for e in read_ledger(tmp_path / "ledger") if e["kind"] == "release"]


@pytest.mark.slow
def test_two_publications_of_one_period_at_once_record_it_once(tmp_path):
    policy_path = two_quarter_policy(tmp_path)
    prepare(tmp_path, policy_path, "2018-Q1")
    results = publish_at_once(tmp_path, policy_path, ["2018-Q1", "2018-Q1"])
    assert len(release_entries(tmp_path)) == 1, results
    assert sorted("published" in r for r in results) == [False, True], results
    [refused] = [r for r in results if "error" in r]
    assert refused["error"] == "AlreadyPublished" and "2018-Q1" in refused["message"]
    [entry] = release_entries(tmp_path)
    record = stages.verify_release_files(tmp_path / "releases/fixture/2018-Q1")
    assert record.ledger_entry == entry["hash"]


@pytest.mark.slow
def test_two_periods_at_once_assess_risk_with_each_other(tmp_path):
    policy_path = two_quarter_policy(tmp_path)
    sequential = tmp_path / "sequential"
    sequential.mkdir()
    concurrent = tmp_path / "concurrent"
    concurrent.mkdir()
    for folder in (sequential, concurrent):
        for label in QUARTER_DAYS:
            prepare(folder, policy_path, label)
    one_by_one = [publish_at_once(sequential, policy_path, [label])[0] for label in QUARTER_DAYS]
    at_once = publish_at_once(concurrent, policy_path, list(QUARTER_DAYS))
    assert all("published" in r for r in one_by_one + at_once), at_once
    # whichever went second saw the first: the programme's cumulative figure is the sequential one
    assert max(r["cumulative"] for r in at_once) == pytest.approx(max(r["cumulative"] for r in one_by_one))
    assert max(r["cumulative"] for r in at_once) > min(r["cumulative"] for r in at_once)
    assert sorted(e["period"] for e in release_entries(concurrent)) == ["2018-Q1", "2018-Q2"]


def _release(tmp_path: Path, policy_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spatial_release.cli",
            "release",
            "--policy",
            str(policy_path),
            "--period",
            "2018-Q1",
            "--traces",
            str(tmp_path / "traces-2018-Q1.csv"),
            "--out",
            str(tmp_path / "out"),
            "--ledger",
            str(tmp_path / "ledger"),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )


def _work_files(tmp_path: Path) -> dict[str, str]:
    work = tmp_path / "out/work/fixture/2018-Q1"
    return {str(p.relative_to(work)): sha256_file(p) for p in sorted(work.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_re_run_of_a_published_period_is_refused_before_it_writes(tmp_path):
    policy_path = two_quarter_policy(tmp_path)
    first = _release(tmp_path, policy_path)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    before = _work_files(tmp_path)
    # the re-run reads other traces: had it ingested them, the counts and key sets would change
    (tmp_path / "traces-2018-Q1.csv").write_text(
        (tmp_path / "traces-2018-Q2.csv").read_text().replace("2018-04-10", "2018-01-11")
    )
    again = _release(tmp_path, policy_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 1
    assert "already published" in err and str(tmp_path / "out/releases/fixture/2018-Q1") in err
    assert _work_files(tmp_path) == before
    assert len(release_entries(tmp_path)) == 1


@pytest.mark.slow
def test_two_command_line_runs_of_one_period_at_once(tmp_path):
    policy_path = two_quarter_policy(tmp_path)
    runs = [_release(tmp_path, policy_path) for _ in range(2)]
    finished: list[tuple[int, str]] = []
    for run in runs:
        assert run.stderr is not None  # _release pipes it
        finished.append((run.wait(timeout=600), run.stderr.read()))
    codes = sorted(code for code, _ in finished)
    assert codes == [0, 1], finished
    [(_, err)] = [(code, err) for code, err in finished if code == 1]
    assert "already published" in err or "belongs to run" in err, err
    assert len(release_entries(tmp_path)) == 1
    # the published release's own work area is intact: its independent audit passes
    audit = subprocess.run(
        [
            sys.executable,
            "-m",
            "spatial_release.cli",
            "audit",
            str(tmp_path / "out/releases/fixture/2018-Q1"),
            "--policy",
            str(policy_path),
            "--ledger",
            str(tmp_path / "ledger"),
        ],
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_a_step_of_a_run_that_lost_the_work_area_stops(tmp_path):
    policy_path = two_quarter_policy(tmp_path)
    policy, period = load_policy(policy_path), Period.parse("2018-Q1")
    ctx = stages.ReleaseContext(policy, period, tmp_path / "work")
    area = ctx.area
    with stages.work_area_step(ctx, None, "run-a", starts_run=True):
        pass
    with stages.work_area_step(ctx, None, "run-a", starts_run=False):
        pass  # the owner's own later step
    with stages.work_area_step(ctx, None, "run-b", starts_run=True):
        pass  # a new run takes over an owner not known to be live (it may have crashed)
    with pytest.raises(stages.WorkAreaBusy, match="belongs to run run-b"):
        with stages.work_area_step(ctx, None, "run-a", starts_run=False):
            pass
    with pytest.raises(stages.WorkAreaBusy, match="still running"):
        with stages.work_area_step(ctx, None, "run-c", starts_run=True, run_is_live=lambda run_id: True):
            pass
    # a killed step's temporary in a step folder is removed by the next step that holds the area
    leftover = area.ingest / ".pings.parquet.0123456789abcdef0123456789abcdef.tmp"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"x" * 1000)
    with stages.work_area_step(ctx, None, "run-b", starts_run=False):
        assert not leftover.exists()
