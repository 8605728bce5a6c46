"""The risk estimate's plain in-memory reference (pandas key sets, factorize, the per-unit groupby, the knowledge
sets drawn one by one in Python as the estimator specifies them, set-by-set anonymity counts), generated key set
tables over a window of several files, and coded key set files edited, for the tests of the estimate over key
sets, ranges and coded files."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from spatial_release.risk import RiskParams
from spatial_release.risk.estimator import KeySets, RiskReport, ZoneRisk, _intersect_sorted
from spatial_release.risk.keysets import KeySource
from spatial_release.risk.ranges import KeyRanges


class _ReferenceIndex:
    """The inverted index the reference counts anonymity sets with, independent of the estimator's own: built
    from the pairs by a lexsort, postings as int64."""

    def __init__(self, unit_ids: np.ndarray, key_ids: np.ndarray, n_keys: int):
        order = np.lexsort((unit_ids, key_ids))
        self.units = unit_ids[order].astype(np.int64)
        bounds = np.searchsorted(key_ids[order], np.arange(n_keys + 1))
        self.starts, self.ends = bounds[:-1], bounds[1:]

    def anonymity(self, keys: list[int]) -> int:
        ordered = sorted(keys, key=lambda k: (self.ends[k] - self.starts[k], k))
        current = self.units[self.starts[ordered[0]] : self.ends[ordered[0]]]
        for key in ordered[1:]:
            if len(current) <= 1:
                break
            current = _intersect_sorted(current, self.units[self.starts[key] : self.ends[key]])
        return max(len(current), 1)


def in_memory(sets: KeySets | KeyRanges) -> KeySets:
    """`sets` as read in memory: a window under the ranges' limit is, and a test of the whole key sets says so."""
    assert isinstance(sets, KeySets), f"key sets read in {len(sets)} ranges, not whole"
    return sets


def reference_draws(by_unit: list[np.ndarray], zones_of_key: np.ndarray, params: RiskParams) -> list[list[list[int]]]:
    """The knowledge sets of each (unit, anchor zone) entry, in unit then zone order, as the estimator specifies
    them, in plain Python. Exhaustive: each anchor with each (p - 1)-subset of the other keys. Sampled, per draw
    (row r = entry * S + draw): the anchor is the floor(U0[r] * a)-th of the unit's a keys in the zone, then
    each other key the floor(U_j[r] * remaining)-th of the unit's keys not yet known (anchor excluded); U0,
    U_1, ... drawn in that order, one value per row each."""
    entries = [(keys, keys[zones_of_key[keys] == zone]) for keys in by_unit for zone in sorted(set(zones_of_key[keys]))]
    if params.exhaustive:
        return [
            [
                [int(anchor), *rest]
                for anchor in anchors
                for rest in itertools.combinations(
                    [int(k) for k in keys if k != anchor], min(params.points - 1, len(keys) - 1)
                )
            ]
            for keys, anchors in entries
        ]
    rows = len(entries) * params.draws
    rng = np.random.default_rng(params.seed)
    u0 = rng.random(rows)
    us = [rng.random(rows) for _ in range(params.points - 1)]
    drawn: list[list[list[int]]] = []
    for e, (keys, anchors) in enumerate(entries):
        drawn.append([])
        for s in range(params.draws):
            r = e * params.draws + s
            anchor = int(anchors[int(u0[r] * len(anchors))])
            remaining = [int(k) for k in keys if k != anchor]
            known = [anchor]
            for j in range(min(params.points - 1, len(remaining))):
                known.append(remaining.pop(int(us[j][r] * len(remaining))))
            drawn[-1].append(known)
    return drawn


def reference_estimate(
    unit_keys: pd.DataFrame, key_zone: pd.Series, params: RiskParams, population: dict[str, float] | None = None
) -> RiskReport:
    pairs = unit_keys[["unit", "key"]].drop_duplicates()
    unit_codes, units = pd.factorize(pairs["unit"], sort=True)
    key_codes, keys = pd.factorize(pairs["key"], sort=True)
    zones_of_key = key_zone.reindex(keys).to_numpy()
    index = _ReferenceIndex(unit_codes, key_codes, len(keys))
    by_unit = list(pd.Series(key_codes).groupby(unit_codes).apply(lambda s: np.sort(s.to_numpy())))
    drawn = iter(reference_draws(by_unit, zones_of_key, params))
    means: dict[str, list[float]] = {}
    worsts: dict[str, list[float]] = {}
    draws: dict[str, list[np.ndarray]] = {}
    for unit_keys_arr in by_unit:
        zones = zones_of_key[unit_keys_arr]
        for zone in sorted(set(zones)):
            risks = np.array([1.0 / index.anonymity(known) for known in next(drawn)])
            means.setdefault(zone, []).append(float(np.mean(risks)))
            worsts.setdefault(zone, []).append(float(np.max(risks)))
            draws.setdefault(zone, []).append(risks)
    zones_out = []
    for zone in sorted(means):
        share = min(1.0, len(means[zone]) / population[zone]) if population and population.get(zone) else None
        journalist = None if share is None else float(np.mean([np.mean(np.minimum(1.0, share * r)) for r in draws[zone]]))
        zones_out.append(
            ZoneRisk(
                str(zone),
                len(means[zone]),
                float(np.mean(means[zone])),
                float(np.mean(np.array(means[zone]) > params.threshold)),
                float(np.max(worsts[zone])),
                journalist,
                share,
            )
        )
    pooled = [m for zone in sorted(means) for m in means[zone]]
    return RiskReport(zones_out, float(np.mean(pooled)) if pooled else 0.0, len(units), len(keys))


def same_report(report: RiskReport, reference: RiskReport) -> None:
    """`report` has every figure of `reference`, exactly."""
    assert report.zones == reference.zones  # every figure of every zone, exactly
    assert (report.units, report.keys, report.pooled) == (reference.units, reference.keys, reference.pooled)


def generated_key_sets(seed: int, units: int, text_units: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(units):
        home = rng.integers(0, 6)
        for _ in range(rng.integers(1, 9)):
            cell = int(home + rng.integers(0, 3)) if rng.random() < 0.8 else int(rng.integers(0, 12))
            bucket = int(rng.integers(0, 10))
            rows.append((f"dev-{u:05d}" if text_units else u * 7 + 3, f"z{cell // 3}c{cell:02d}", bucket))
    frame = pd.DataFrame(rows, columns=["unit", "cell_id", "bucket"])
    frame["key"] = frame["cell_id"] + "@2018-01-" + (frame["bucket"] + 10).astype(str) + "T05:00Z"
    return frame[["unit", "key", "cell_id"]]


def zone_of_cells(cells: pd.Series) -> pd.Series:
    return pd.Series(cells.str.slice(0, 2).to_numpy(), index=cells.to_numpy())


def generated_window(tmp_path, text_units: bool) -> tuple[list[str], dict, pd.DataFrame, pd.Series, dict]:
    """Three generated key set tables as a window: the current one a DataFrame, two earlier ones Parquet files
    (one with a repeated (unit, key), which counts once). Returns the selects, the frames they name, the
    window whole, each key's zone and a population per zone."""
    parts = [generated_key_sets(seed, units, text_units) for seed, units in ((1, 700), (2, 400), (3, 500))]
    parts[1] = pd.concat([parts[1], parts[1].head(50)])
    paths = []
    for i, part in enumerate(parts[1:]):
        paths.append(tmp_path / f"earlier-{i}.parquet")
        part.to_parquet(paths[-1], index=False)
    selects = ["SELECT * FROM current_keys"] + [f"SELECT * FROM read_parquet('{p}')" for p in paths]
    window = pd.concat(parts, ignore_index=True)
    key_zone = pd.Series(window["cell_id"].str.slice(0, 2).to_numpy(), index=window["key"].to_numpy())
    key_zone = key_zone[~key_zone.index.duplicated()]
    return selects, {"current_keys": parts[0]}, window, key_zone, {"z0": 4000.0, "z1": 900.0, "z3": 2.0}


def naming_more(frame_name: str, unit, key: str) -> KeySource:
    """The rows of `frame_name`, with one more unit and one more key named that no row holds (both sort
    first, so every code after them would move if they were counted)."""
    rows = KeySource.of_rows(frame_name)
    return KeySource(
        units=f"{rows.units} UNION ALL SELECT {unit!r} AS unit",
        keys=f"{rows.keys} UNION ALL SELECT '{key}' AS key, 'nowhere' AS cell_id",
        pairs=rows.pairs,
        exact=False,
    )


def rewritten_key_set_file(source: Path, target: Path, edit) -> Path:
    """A copy of a coded key set file with its rows edited by `edit` (a DataFrame -> DataFrame), metadata kept."""
    table = pq.read_table(source)
    frame = edit(table.to_pandas())
    pq.write_table(pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False), target)
    return target
