"""Shared fixtures: a tiny hand-made trace set whose every count is known, and policy files built per test."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Runs that forget to name their folders must never write into the project's ledger/, releases/ or alerts/:
# point the defaults at a throw-away folder before spatial_release reads them.
_SCRATCH = Path(tempfile.mkdtemp(prefix="spatial-release-tests-"))
for _name in ("LEDGER", "RELEASES", "WORK", "ALERTS"):
    os.environ[f"SPATIAL_RELEASE_{_name}"] = str(_SCRATCH / _name.lower())
# ...nor sign with (or create) the user's ledger key: tests sign with a key made in the scratch folder.
os.environ["SPATIAL_RELEASE_SIGNING_KEY"] = str(_SCRATCH / "keys" / "ledger-ed25519.key")
os.environ.pop("SPATIAL_RELEASE_PUBLIC_KEY", None)
# ...nor send alerts to the user's SMTP server or Slack: tests that send start their own servers.
for _name in (
    "SMTP_HOST",
    "SMTP_PORT",
    "SMTP_FROM",
    "SMTP_TO",
    "SMTP_USER",
    "SMTP_PASSWORD",
    "SMTP_STARTTLS",
    "SLACK_WEBHOOK_URL",
):
    os.environ.pop(f"SPATIAL_RELEASE_{_name}", None)

import numpy as np
import pandas as pd
import pytest
import yaml
from pyproj import Transformer

from spatial_release.policy import load_policy

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED = PROJECT_ROOT.parent / "shared"
SHARED_DATA = SHARED / "data"

requires_shared = pytest.mark.skipif(
    not (SHARED_DATA / "citibike-jc").is_dir(),
    reason="../shared/data is absent (a user's machine); CI has it and runs these tests",
)

CRS = "EPSG:32618"
SIZE = 1000
TO_LONLAT = Transformer.from_crs(CRS, "EPSG:4326", always_xy=True)
DAY = "2018-01-10"
K = 3

# Fine 1 km cells by their lower-left corner (metres, EPSG:32618). A and E share the 2 km parent P1;
# B, C and D share P2, where B and C (2 + 1 = k devices) protect each other.
CELL_A = (580_000, 4_508_000)  # exactly k = 3 devices: published (inclusive boundary)
CELL_E = (581_000, 4_509_000)  # 6 devices: published
CELL_B = (582_000, 4_508_000)  # 2 devices: below k, withheld
CELL_C = (583_000, 4_508_000)  # 1 device with 40 pings alone in the cell: withheld
CELL_D = (582_000, 4_509_000)  # 5 devices: published


def cell_id(corner: tuple[int, int], size: int = SIZE) -> str:
    return f"{size}mE{corner[0]}N{corner[1]}"


def lonlat_in(corner: tuple[int, int], n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n points strictly inside the cell (50 m from its edges)."""
    x = corner[0] + rng.uniform(50, SIZE - 50, n)
    y = corner[1] + rng.uniform(50, SIZE - 50, n)
    return TO_LONLAT.transform(x, y)


def fixture_pings() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    rows = []

    def add(device: str, corner: tuple[int, int], n_pings: int, gender: str = "f") -> None:
        lon, lat = lonlat_in(corner, n_pings, rng)
        for i in range(n_pings):
            rows.append(
                {
                    "device": device,
                    "when": f"{DAY} {8 + i % 12:02d}:{i % 60:02d}:00",
                    "lon": round(float(lon[i]), 7),
                    "lat": round(float(lat[i]), 7),
                    "gender": gender,
                }
            )

    for i in range(3):
        add(f"a{i}", CELL_A, 2)
    for i in range(2):
        add(f"b{i}", CELL_B, 3)
    add("lonely", CELL_C, 40, gender="m")
    for i in range(5):
        add(f"d{i}", CELL_D, 1)
    for i in range(6):
        add(f"e{i}", CELL_E, 2)
    return pd.DataFrame(rows)


def policy_dict(traces: str, **overrides) -> dict:
    data = {
        "name": "fixture",
        "version": 1,
        "unit": "devices",
        "k": K,
        "measure": "presence",
        "source": {
            "format": "pings",
            "paths": [traces],
            "unit": "device",
            "time": "when",
            "lon": "lon",
            "lat": "lat",
            "time_formats": ["%Y-%m-%d %H:%M:%S"],
            "timezone": "America/New_York",
            "identifiers": ["device", "gender"],
            "max_rejected_share": 0.0,
        },
        "geometry": {"kind": "grid", "crs": CRS, "size_m": SIZE, "parents_m": [2 * SIZE]},
        "time": {"bucket": "1d", "timezone": "America/New_York"},
        "suppression": {"budget": 0.9},
        "risk": {
            "zones": "cell",
            # The fixture's cells hold exactly k units by design (the k floor's inclusive boundary), which the
            # advantage gate (the default) refuses: every unit of such a cell is exposed to membership inference.
            # The tests of the other guarantees gate on the attacks; the advantage gate's tests are
            # tests/test_advantage*.py.
            "model": "attack",
            "landscape": "landscape.yaml",
            "per_release_ceiling": 0.05,
            "cumulative_ceiling": 0.2,
            "warn_at": 0.75,
        },
    }
    for key, value in overrides.items():
        data[key] = value
    return data


def uniqueness_model(data: dict) -> dict:
    """`data` (a policy dict) gated on the uniqueness upper bound (`risk.model: uniqueness`): for the tests of
    the gate's mechanics (ceilings, warn_at, reviews, the journalist's population) whose fixtures set the
    figure through the uniqueness estimator's known closed forms. The attack model's own tests are in
    tests/test_attack.py and test_risk_pipeline.py."""
    data["risk"] = {**data["risk"], "model": "uniqueness"}
    return data


def uniqueness_policy_dict(traces: str, **overrides) -> dict:
    """`policy_dict` gated on the uniqueness upper bound (see `uniqueness_model`)."""
    return uniqueness_model(policy_dict(traces, **overrides))


LANDSCAPE = {
    "version": 1,
    "points": 2,
    "draws": 5,
    "panel": "sample",
    "adversary": "journalist",
    "population": {"table": "population.csv"},
}


def write_policy(folder: Path, data: dict, name: str = "policy.yaml", population: int = 10_000) -> Path:
    """The policy plus its landscape (journalist, a public population per fixture cell)."""
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (folder / "landscape.yaml").write_text(yaml.safe_dump(LANDSCAPE))
    # the fixture's cells and the other two 1 km cells of A's 2 km parent (tests/test_ladder.py's pings)
    cells = [cell_id(c) for c in (CELL_A, CELL_B, CELL_C, CELL_D, CELL_E, (580_000, 4_509_000), (581_000, 4_508_000))]
    (folder / "population.csv").write_text("zone,population\n" + "".join(f"{c},{population}\n" for c in cells))
    return path


@pytest.fixture
def fixture_traces(tmp_path: Path) -> Path:
    path = tmp_path / "traces.csv"
    fixture_pings().to_csv(path, index=False)
    return path


@pytest.fixture
def fixture_policy(tmp_path: Path, fixture_traces: Path):
    return load_policy(write_policy(tmp_path, policy_dict(str(fixture_traces))))


def spy_packing(monkeypatch) -> list:
    """Records what the counting step's `packing_for` decided in each count (None: an SQL path), so a test
    can show that the packed path (spatial_release/counting/packed.py) did run, or did not."""
    from spatial_release.counting import counts as counts_module

    decided = []
    real = counts_module.packing_for

    def spy(*args):
        decided.append(real(*args))
        return decided[-1]

    monkeypatch.setattr(counts_module, "packing_for", spy)
    return decided


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


def period_sensor_keys(defs, prefix: str, instance=None) -> list[str]:
    """The periods the programme's period sensor adds as partitions in `instance` (a fresh one by default),
    added there as the daemon would."""
    import dagster as dg

    instance = instance or dg.DagsterInstance.ephemeral()
    result = defs.resolve_sensor_def(f"{prefix}_period_sensor")(dg.build_sensor_context(instance=instance, definitions=defs))
    added = [key for request in result.dynamic_partitions_requests for key in request.partition_keys]
    if added:
        instance.add_dynamic_partitions(f"{prefix}_periods", added)
    return added
