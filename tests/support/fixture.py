"""The hand-made fixture: a tiny trace set whose every count is known, and the policy files built around it
(per test, in the test's folder)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from pyproj import Transformer

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
    # the fixture's cells and the other two 1 km cells of A's 2 km parent (support/ladder.py's pings)
    cells = [cell_id(c) for c in (CELL_A, CELL_B, CELL_C, CELL_D, CELL_E, (580_000, 4_509_000), (581_000, 4_508_000))]
    (folder / "population.csv").write_text("zone,population\n" + "".join(f"{c},{population}\n" for c in cells))
    return path


QUARTER_DAYS = {"2018-Q1": DAY, "2018-Q2": "2018-04-10"}


def two_quarter_policy(tmp_path: Path) -> Path:
    """The fixture policy and one trace file per quarter: the same devices on one day of each quarter, so
    both releases count in one cumulative risk (gated on the uniqueness figure, which is above 0 here: the
    tests of the cumulative budget need figures that add up). The policy names its traces relative to its
    folder, so a copy of the folder is the same programme (the same policy, byte for byte) elsewhere."""
    for label, day in QUARTER_DAYS.items():
        pings = fixture_pings()
        pings["when"] = pings["when"].str.replace(DAY, day)
        pings.to_csv(tmp_path / f"traces-{label}.csv", index=False)
    return write_policy(tmp_path, uniqueness_policy_dict("traces-2018-Q1.csv"))


def advantage_city_policy(folder: Path, name: str, size_m: int, parents_m: int, coarsen: str) -> Path:
    """A policy over synthetic city pings (the demo's source columns) at `size_m` cells x one week, k = 5, risk
    zones the `parents_m` parents, gated on the advantage with ceilings of 1 (it publishes whatever the gate
    reads) and `risk.coarsen` as given; written to `folder`/policy.yaml."""
    from support.paths import PROJECT_ROOT

    data = yaml.safe_load((PROJECT_ROOT / "policies" / "demo.yaml").read_text())
    data.update(name=name, k=5)
    data["source"].pop("synthetic", None)
    data["source"]["identifiers"] = ["device_id"]
    data["geometry"] = {"kind": "grid", "crs": "EPSG:32618", "size_m": size_m, "parents_m": [parents_m]}
    data["time"] = {"bucket": "1w", "timezone": "America/New_York"}
    data["suppression"] = {"budget": 1.0}
    data["risk"].update(
        zones=f"grid_{parents_m}m",
        model="advantage",
        coarsen=coarsen,
        landscape=str(PROJECT_ROOT / "policies" / "landscapes" / "demo.yaml"),
        per_release_ceiling=1.0,
        cumulative_ceiling=1.0,
    )
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
