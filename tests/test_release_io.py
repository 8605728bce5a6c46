"""Files are replaced atomically: a crash leaves the old file or the new one, and the next run removes the
temporaries a killed writer left and finishes or redoes an interrupted publication (kill -9 at every step;
ledger appends: tests/test_ledger.py)."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.fixture import two_quarter_policy
from support.releases import prepare

from spatial_release import stages
from spatial_release.fileio import atomic_path, remove_stale_temporaries
from spatial_release.ledger import Ledger, check_releases, read_ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy


def test_crash_while_writing_a_file_keeps_the_old_one(tmp_path):
    target = tmp_path / "f.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("new but incomplete")
            raise RuntimeError("crash")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_stale_temporaries_are_removed_and_nothing_else(tmp_path):
    stale = tmp_path / "sub" / ".pings.parquet.0123456789abcdef0123456789abcdef.tmp"
    stale.parent.mkdir()
    stale.write_text("a killed writer's copy")
    kept = [tmp_path / ".hidden.tmp", tmp_path / "data.tmp", tmp_path / "sub" / "pings.parquet"]
    for path in kept:
        path.write_text("keep")
    assert remove_stale_temporaries(tmp_path) == []  # not recursive: the sub-folder is left alone
    assert remove_stale_temporaries(tmp_path, recursive=True) == [stale]
    assert all(p.exists() for p in kept) and not stale.exists()


_SCRATCH_AND_DIE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from spatial_release.fileio import scratch_folder
    held = scratch_folder(Path(sys.argv[1]), "risk-ranges")
    (Path(held.name) / "units-0.int32").write_bytes(b"per-unit rows")
    print(held.name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_scratch_a_killed_run_left_is_swept_by_the_next_step_and_nothing_else(tmp_path, fixture_policy):
    """A kill -9 skips every cleanup: the scratch folder of per-unit rows (key ranges, DuckDB spill) stays in
    the work area until the next step takes the area's lock, which deletes it; other folders stay."""
    from spatial_release.stages.lock import work_area_step

    ctx = stages.ReleaseContext(fixture_policy, Period.parse("2018-Q1"), tmp_path / "work")
    died = subprocess.run([sys.executable, "-c", _SCRATCH_AND_DIE, str(ctx.area.risk)], capture_output=True, text=True)
    assert died.returncode == -signal.SIGKILL
    left = Path(died.stdout.strip())
    assert left.parent == ctx.area.risk and (left / "units-0.int32").exists()
    assert left.stat().st_mode & 0o077 == 0  # owner-only while it lies there
    kept = [ctx.area.risk / "risk-ranges.keep", ctx.area.risk / ".risk-ranges.abc.scratch"]
    for folder in kept:
        folder.mkdir()
    with work_area_step(ctx, None, None, starts_run=False):
        assert not left.exists()
    assert all(folder.is_dir() for folder in kept)


# ------------------------------------------------------------------------ kill -9 during a publication

_PUBLISH_AND_DIE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from spatial_release import stages
    from spatial_release.ledger import Ledger
    from spatial_release.period import Period
    from spatial_release.policy import load_policy

    policy_path, root, crash_at = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    policy, period = load_policy(policy_path), Period.parse("2018-Q1")
    ctx = stages.ReleaseContext(policy, period, root / "work")
    area = ctx.area
    calls = [0]

    def dying(real):
        def step(*args, **kwargs):  # every rename is a step of the publication: die right before the Nth
            calls[0] += 1
            if calls[0] == crash_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return step

    os.replace, os.rename = dying(os.replace), dying(os.rename)
    stages.run_publish(ctx, root / "releases", Ledger(root / "ledger"))
    print("completed after", calls[0], "renames")
""")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A work area ready to publish (ingest, counts, protection, risk), copied for each crash point."""
    root = tmp_path_factory.mktemp("prepared")
    policy = two_quarter_policy(root)
    prepare(root, policy, "2018-Q1")
    return root, policy


@pytest.mark.slow
def test_kill_9_at_every_step_of_a_publication_is_repaired_by_the_next_run(prepared, tmp_path):
    """The publication is killed (SIGKILL) right before each of its renames in turn (audit
    files, staging record, ledger entries, HEAD, release.json, the final rename). Every time, the next
    run_publish finishes or redoes it: one ledger entry, the release folder in place and matching it, no
    staging folder and no temporary left."""
    template, policy_path = prepared
    policy, period = load_policy(policy_path), Period.parse("2018-Q1")
    crash_at, crashed = 1, 0
    while True:
        root = tmp_path / f"crash-{crash_at}"
        shutil.copytree(template, root)
        child = subprocess.run(
            [sys.executable, "-c", _PUBLISH_AND_DIE, str(policy_path), str(root), str(crash_at)],
            capture_output=True,
            text=True,
            env={**os.environ},
        )
        if child.returncode == 0:
            assert "completed" in child.stdout
            break
        assert child.returncode == -9, child.stderr
        crashed += 1
        ctx = stages.ReleaseContext(policy, period, root / "work")
        ledger = Ledger(root / "ledger", root / "releases")
        target, record = stages.run_publish(ctx, root / "releases", ledger)
        [entry] = [e for e in read_ledger(root / "ledger") if e["kind"] == "release"]
        assert record.ledger_entry == entry["hash"], crash_at
        assert stages.verify_release_files(target).files == entry["files"]
        check_releases(read_ledger(root / "ledger"), root / "releases")
        assert not list((root / "releases").rglob(".*.publishing")) and not list((root / "ledger").glob(".*.tmp"))
        crash_at += 1
    assert crashed >= 5  # the ledger's two renames, release.json's and the final rename at least
