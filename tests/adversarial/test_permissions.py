"""Attack: another user of the machine reads the work area. Per-unit files (validated pings, memberships,
key sets, quarantine, outside pings, audit intervals) were created 0644 in 0755 folders. Every file the
pipeline creates is now owner-only from the moment it exists (0600 files, 0700 folders), whatever umask
the caller had."""

from __future__ import annotations

import os
import stat

import pytest
from support.fixture import fixture_pings, policy_dict, write_policy

from spatial_release import cli

# Whole releases: left out of the fast tier (pytest -m "not slow").
pytestmark = pytest.mark.slow


def _group_or_world_bits(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode) & 0o077


def test_every_file_the_release_creates_is_owner_only_even_under_a_permissive_umask(tmp_path, capsys):
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    policy = write_policy(tmp_path, policy_dict(str(traces)))
    out = tmp_path / "out"
    previous = os.umask(0o022)  # a careless caller: the pipeline must not inherit it
    try:
        code = cli.main(
            ["release", "--policy", str(policy), "--period", "2018-Q1", "--out", str(out), "--ledger", str(out / "ledger")]
        )
    finally:
        os.umask(previous)
    assert code == 0, capsys.readouterr()
    created = [p for p in out.rglob("*")]
    work = out / "work" / "fixture" / "2018-Q1"
    assert (work / "ingest" / "pings.parquet") in created and (work / "counts" / "membership.internal.parquet") in created
    readable = [(str(p.relative_to(out)), oct(stat.S_IMODE(p.lstat().st_mode))) for p in created if _group_or_world_bits(p)]
    assert readable == [], readable
