"""pytest's fixtures and hooks for the whole suite. Plain helpers (the fixture traces and policies, the
release driver, spies) are in tests/support/, imported as `support.*`.

Every test process runs in a scratch environment (support.environment), set before collection: the default
ledger, releases, work and alerts folders and the signing key point into a throw-away folder, and no alert
channel of the user's is configured.

The whole suite (CI runs this, with SPATIAL_RELEASE_BROWSER_TEST=required):
    pytest -q
The fast tier for local work, every test not marked `slow` (pyproject.toml registers the marker):
    pytest -q -m "not slow"
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.environment import ScratchEnvironment
from support.fixture import fixture_pings, policy_dict, write_policy
from support.releases import ReleaseCache, build_two_quarter_q1

from spatial_release.policy import load_policy

_SCRATCH = ScratchEnvironment()


def pytest_configure(config):
    _SCRATCH.enter()


def pytest_unconfigure(config):
    _SCRATCH.exit()


@pytest.fixture
def fixture_traces(tmp_path: Path) -> Path:
    path = tmp_path / "traces.csv"
    fixture_pings().to_csv(path, index=False)
    return path


@pytest.fixture
def fixture_policy(tmp_path: Path, fixture_traces: Path):
    return load_policy(write_policy(tmp_path, policy_dict(str(fixture_traces))))


@pytest.fixture(scope="session")
def release_cache(tmp_path_factory) -> ReleaseCache:
    """The releases shared by this test run. Under xdist each worker's base temporary folder is a child of
    the run's (`.../pytest-N/popen-gw0`): the parent is where the workers meet, and is new for every run,
    so nothing is reused from an earlier run (with older code). Without xdist the run's own folder."""
    base = tmp_path_factory.getbasetemp()
    return ReleaseCache((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-releases")


@pytest.fixture
def published_q1(release_cache: ReleaseCache, tmp_path: Path, monkeypatch) -> Path:
    """The test's own copy (`tmp_path`/programme) of the run's one published release: the fixture programme
    of two quarters (support.fixture.two_quarter_policy, gated on the uniqueness figure) with 2018-Q1
    published through the command line into out/ and ledger/, and 2018-Q2's traces beside it. The copy is
    signed with its own key (the test's SPATIAL_RELEASE_SIGNING_KEY), so publishing 2018-Q2 into it works
    and touches no other test's copy. Made once per run (support.releases.ReleaseCache)."""
    return release_cache.copy("two-quarter-q1", build_two_quarter_q1, tmp_path / "programme", monkeypatch)


# The longest test files, started first: pytest-xdist (--dist loadfile) hands out files in collection order,
# and one of these collected last kept a single worker busy for minutes while the other sat idle. Order only:
# every test file is independent of the others.
LONGEST_FIRST = (
    "tests/browser/test_dagster_ui.py",
    "tests/test_citibike.py",
    "tests/test_spark.py",
    "tests/test_spark_cluster.py",
    "tests/test_demo.py",
    "tests/test_release_io.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: within a file, and among the rest, the collection order is kept
