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

from pathlib import Path

import pytest
from support.environment import ScratchEnvironment
from support.fixture import fixture_pings, policy_dict, write_policy

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
