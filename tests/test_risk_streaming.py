"""The risk step reads and codes the window's key sets in DuckDB (risk.keysets) instead of pandas: its per-zone
figures and its gate decision are exactly those of a plain in-memory reference (the pandas key sets, factorize,
the per-unit groupby, the knowledge sets drawn one by one in Python as the estimator specifies them, set-by-set
anonymity counts and list-based aggregation), on the test fixture, on a synthetic release through the stages,
and on generated key set tables over a window of several files."""

import itertools
import json
from datetime import date
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from support.fixture import fixture_pings, uniqueness_policy_dict, write_policy

from spatial_release import stages
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.risk import Adversary, RiskParams, decide, keysets, release_figure
from spatial_release.risk.estimator import RiskReport, ZoneRisk, _intersect_sorted, estimate_key_sets
from spatial_release.risk.keysets import KeySource, window_key_sets
from spatial_release.risk.landscape import load_landscape
from spatial_release.stages import keys as keys_stage
from spatial_release.stages import risk as risk_stage
from spatial_release.stages.context import zone_population
from spatial_release.stages.risk import labelled_zones
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings

PERIOD = Period.parse("2018-Q1")


# ------------------------------------------------------------------ the reference: the in-memory estimator


class _ReferenceIndex:
    """The inverted index as it was: built from the pairs by a lexsort, postings as int64."""

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


@pytest.fixture
def fixture_policy(tmp_path, fixture_traces):
    """The conftest fixture policy gated on the uniqueness figure: this file tests that estimator's streaming."""
    return load_policy(write_policy(tmp_path, uniqueness_policy_dict(str(fixture_traces))))


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
    drawn = []
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


def reference_released_keys(ctx: stages.ReleaseContext) -> pd.DataFrame:
    """The candidate's key sets, in pandas: each unit's published cells, and the published parent areas of its
    cells (level:area@bucket, the zone of the unit's cell) that lie in one risk zone."""
    area = ctx.area
    membership = pd.read_parquet(area.counts / "membership.internal.parquet")
    cells = pd.read_parquet(area.candidate / "cells.parquet", columns=["cell_id", "bucket_start"])
    keys = membership.merge(cells, on=["cell_id", "bucket_start"])
    keys["key"] = keys["cell_id"] + "@" + keys["bucket_start"].dt.strftime("%Y-%m-%dT%H:%MZ")
    frames = [keys[["unit", "key", "cell_id"]]]
    margins = pd.read_parquet(area.candidate / "margins.parquet", columns=["level", "area_id", "bucket_start"])
    hierarchy = ctx.locator.hierarchy(membership["cell_id"].drop_duplicates())
    for level in ctx.policy.geometry.level_names():
        up = membership.merge(hierarchy[["cell_id", level]], on="cell_id").rename(columns={level: "area_id"})
        up = up.merge(margins[margins["level"] == level], on=["area_id", "bucket_start"])
        zones = pd.Series(ctx.risk_zones(hierarchy["cell_id"]).reindex(hierarchy["cell_id"]).to_numpy())
        one_zone = zones.groupby(hierarchy[level].to_numpy()).nunique()
        up = up[up["area_id"].map(one_zone) == 1]
        up["key"] = level + ":" + up["area_id"] + "@" + up["bucket_start"].dt.strftime("%Y-%m-%dT%H:%MZ")
        frames.append(up[["unit", "key", "cell_id"]])
    return pd.concat(frames, ignore_index=True).drop_duplicates(["unit", "key"])


def _same(report: RiskReport, reference: RiskReport) -> None:
    assert report.zones == reference.zones  # every figure of every zone, exactly
    assert (report.units, report.keys, report.pooled) == (reference.units, reference.keys, reference.pooled)


# ------------------------------------------------------------------ through the stages


def protected_candidate(policy, tmp_path) -> stages.ReleaseContext:
    """A release of `policy` through ingest, counting and protection, in tmp_path/work: what the risk step reads."""
    ctx = stages.ReleaseContext(policy, PERIOD, tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    return ctx


def _assess_both(ctx: stages.ReleaseContext, ledger: Ledger):
    assessment = stages.run_risk(ctx, ledger)
    policy = ctx.policy
    keys = reference_released_keys(ctx)
    streamed = keys_stage.key_set_rows(ctx.area.unit_keys)
    assert set(map(tuple, streamed[["unit", "key"]].to_numpy().tolist())) == set(
        map(tuple, keys[["unit", "key"]].to_numpy().tolist())
    )
    # the kept file names each key with one cell (the least of the leaves it covers), in the key's risk zone
    kept_cell = streamed.drop_duplicates("key").set_index("key")["cell_id"]
    zone = lambda cells: ctx.risk_zones(cells).reindex(cells).to_numpy()  # noqa: E731
    kept_zone = dict(zip(kept_cell.index, zone(kept_cell)))
    assert kept_zone == dict(zip(keys["key"], zone(keys["cell_id"])))
    landscape_path = policy.resolve(policy.risk.landscape)
    landscape, _ = load_landscape(landscape_path)
    zone_of_key = pd.Series(ctx.risk_zones(keys["cell_id"]).to_numpy(), index=keys["key"].to_numpy())
    reference = reference_estimate(
        keys,
        zone_of_key[~zone_of_key.index.duplicated()],
        landscape.params(),
        zone_population(policy, landscape, landscape_path, ctx.layers),
    )
    worst, figure = release_figure(reference, Adversary(landscape.adversary))
    decision = decide(
        figure,
        worst.zone if worst else None,
        [],
        policy.risk.per_release_ceiling,
        policy.risk.cumulative_ceiling,
        policy.risk.warn_at,
    )
    assert assessment.zones == labelled_zones(reference.frame())
    assert (assessment.status, assessment.release_figure, assessment.worst_zone, assessment.cumulative) == (
        decision.status,
        figure,
        decision.worst_zone,
        decision.cumulative,
    )
    assert (assessment.units, assessment.keys) == (reference.units, reference.keys)
    # the publish step derives the key sets again from the work area, without the key set file
    again = stages.assess_risk(ctx, ledger)
    assert again.zones == assessment.zones and again.status == assessment.status
    return assessment


@pytest.mark.slow
def test_fixture_release_has_the_reference_figures_and_decision(tmp_path, fixture_policy):
    ctx = protected_candidate(fixture_policy, tmp_path)
    assessment = _assess_both(ctx, Ledger(tmp_path / "ledger", tmp_path / "releases"))
    assert assessment.units > 0 and assessment.zones


@pytest.mark.slow
@pytest.mark.parametrize("population", [10_000, 5])  # 5: the gate blocks, on the same figures
def test_fixture_decision_is_the_reference_one_when_blocked_too(tmp_path, population):
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    policy = load_policy(write_policy(tmp_path, uniqueness_policy_dict(str(traces)), population=population))
    ctx = protected_candidate(policy, tmp_path)
    assessment = _assess_both(ctx, Ledger(tmp_path / "ledger", tmp_path / "releases"))
    assert (assessment.status == "block") == (population == 5)


@pytest.mark.slow
def test_synthetic_hourly_release_has_the_reference_figures(tmp_path):
    """Generated pings (the project's generator) at 500 m x hour, risk zones the 2 km parents, p = 4."""
    traces = write_pings(
        generate_pings(SyntheticConfig(persons=400, days=5, start=date(2018, 1, 8))), tmp_path / "pings.csv"
    )
    (tmp_path / "landscape.yaml").write_text(
        yaml.safe_dump({"version": 1, "points": 4, "draws": 6, "panel": "whole", "adversary": "prosecutor"})
    )
    data = uniqueness_policy_dict(
        str(traces),
        name="synthetic",
        geometry={"kind": "grid", "crs": "EPSG:32618", "size_m": 500, "parents_m": [2000]},
        time={"bucket": "1h", "timezone": "America/New_York"},
        suppression={"budget": 1.0},
    )
    data["source"].update(
        unit="device_id", time="local_time", identifiers=["device_id", "imsi", "age_band"], max_rejected_share=0.01
    )
    data["risk"].update(zones="grid_2000m", per_release_ceiling=0.5, cumulative_ceiling=1.0)
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(data))
    ctx = protected_candidate(load_policy(tmp_path / "policy.yaml"), tmp_path)
    assessment = _assess_both(ctx, Ledger(tmp_path / "ledger", tmp_path / "releases"))
    assert assessment.units > 100 and len(assessment.zones) > 1


# ------------------------------------------------------------------ generated key set tables, several files


def _generated(seed: int, units: int, text_units: bool) -> pd.DataFrame:
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


def _zone_of_cells(cells: pd.Series) -> pd.Series:
    return pd.Series(cells.str.slice(0, 2).to_numpy(), index=cells.to_numpy())


def generated_window(tmp_path, text_units: bool) -> tuple[list[str], dict, pd.DataFrame, pd.Series, dict]:
    """Three generated key set tables as a window: the current one a DataFrame, two earlier ones Parquet files
    (one with a repeated (unit, key), which counts once). Returns the selects, the frames they name, the
    window whole, each key's zone and a population per zone."""
    parts = [_generated(seed, units, text_units) for seed, units in ((1, 700), (2, 400), (3, 500))]
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


@pytest.mark.slow
@pytest.mark.parametrize("text_units", [False, True])
@pytest.mark.parametrize(
    "params",
    [RiskParams(points=4, draws=8, seed=3), RiskParams(points=1, draws=3), RiskParams(points=3, draws=20, threshold=0.05)],
)
def test_generated_window_over_files_has_the_reference_figures(tmp_path, params, text_units):
    selects, frames, window, key_zone, population = generated_window(tmp_path, text_units)
    sets = window_key_sets(selects, _zone_of_cells, frames)
    report = estimate_key_sets(sets, params, population)
    _same(report, reference_estimate(window, key_zone, params, population))
    assert report.units == window["unit"].nunique() and report.keys == window["key"].nunique()


def test_anonymity_sets_counted_in_small_chunks_give_the_reference_figures(monkeypatch):
    """The batch count of anonymity sets (estimator._anonymity) split into chunks of a few candidates, and the
    draws built in chunks of a few units (fewer pairs than one unit holds, too): the same figures as the
    set-by-set reference, units with fewer keys than p included."""
    from spatial_release.risk import estimator

    monkeypatch.setattr(estimator, "CANDIDATES", 5)
    monkeypatch.setattr(estimator, "DRAW_PAIRS", 7)
    frame = pd.concat([_generated(4, 300, False), _generated(5, 40, False).head(30)], ignore_index=True)
    params = RiskParams(points=4, draws=6, seed=11)
    sets = window_key_sets(["SELECT * FROM current_keys"], _zone_of_cells, {"current_keys": frame})
    key_zone = pd.Series(frame["cell_id"].str.slice(0, 2).to_numpy(), index=frame["key"].to_numpy())
    reference = reference_estimate(frame, key_zone[~key_zone.index.duplicated()], params)
    assert min(np.diff(sets.unit_offsets)) < params.points  # some units hold fewer keys than p
    assert reference.pooled < 1.0  # sets larger than one unit: the counts matter, not only the 1s
    _same(estimate_key_sets(sets, params), reference)


def test_generated_exhaustive_mode_has_the_reference_figures(tmp_path):
    frame = _generated(4, 60, True)
    params = RiskParams(points=2, exhaustive=True)
    sets = window_key_sets(["SELECT * FROM current_keys"], _zone_of_cells, {"current_keys": frame})
    key_zone = pd.Series(frame["cell_id"].str.slice(0, 2).to_numpy(), index=frame["key"].to_numpy())
    _same(estimate_key_sets(sets, params), reference_estimate(frame, key_zone[~key_zone.index.duplicated()], params))


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


def test_units_and_keys_no_pair_holds_are_not_counted():
    """A part may name more units and keys than its pairs hold (the memberships' units, some counted only in
    withheld cells; every published key): the key sets are those of the pairs alone, numbered as if the rest
    were never named, and a key no pair holds needs no risk zone."""
    frame = _generated(6, 80, True)
    zones = lambda cells: _zone_of_cells(cells[cells != "nowhere"])  # noqa: E731
    plain = window_key_sets(["SELECT * FROM current_keys"], zones, {"current_keys": frame})
    named = window_key_sets([], zones, {"current_keys": frame}, coded=[naming_more("current_keys", "!first", "!key")])
    assert named.digest() == plain.digest()
    assert (named.units, named.keys) == (frame["unit"].nunique(), frame["key"].nunique())
    # negative control: the extra key held by one pair is counted, and then needs its zone
    held = pd.concat([frame, pd.DataFrame({"unit": ["dev-00001"], "key": ["!key"], "cell_id": ["nowhere"]})])
    with pytest.raises(ValueError, match="keys without a risk zone"):
        window_key_sets([], zones, {"current_keys": held}, coded=[naming_more("current_keys", "!first", "!key")])


@pytest.mark.slow
def test_key_sets_coded_from_the_work_area_are_those_of_the_key_set_file(tmp_path, fixture_policy):
    """The risk step codes this release's key sets straight from the memberships and the candidate
    (`released_key_source`), over every unit of the memberships and every published key: the same arrays as
    coding the key set file it writes, and as the pandas reference keys."""
    ctx = protected_candidate(fixture_policy, tmp_path)
    keys_stage.write_risk_areas(ctx)
    path = tmp_path / "keys.parquet"
    keys_stage.write_released_keys(ctx.area, path)
    from_area = risk_stage.window_key_sets(ctx, None, [], [])
    from_file = risk_stage.window_key_sets(ctx, path, [], [])
    reference = window_key_sets(
        ["SELECT * FROM reference"],
        ctx.risk_zones,
        {"reference": reference_released_keys(ctx)},
    )
    assert from_area.digest() == from_file.digest() == reference.digest()
    membership = pd.read_parquet(ctx.area.counts / "membership.internal.parquet")
    assert membership["unit"].nunique() > from_area.units, "no unit is counted only in withheld cells: nothing dropped"


@pytest.mark.slow
def test_the_coded_key_set_file_the_risk_step_keeps_reads_back_as_the_same_key_sets(tmp_path, fixture_policy):
    """The risk step keeps this release's key sets as a coded file (`keysets.write_coded`): coded again from
    it, alone or beside an earlier release's file of either kind, they give the same arrays as the key set
    rows, and its rows are those rows' (unit, key) pairs."""
    ctx = protected_candidate(fixture_policy, tmp_path)
    keys_stage.write_risk_areas(ctx)
    rows_path = tmp_path / "keys.parquet"
    keys_stage.write_released_keys(ctx.area, rows_path)
    kept = keys_stage.keep_released_keys(ctx, None)
    coded_path = ctx.area.unit_keys
    counts = keysets.coded_file_counts(coded_path)
    assert counts is not None and keysets.coded_file_counts(rows_path) is None
    from_rows = risk_stage.window_key_sets(ctx, rows_path, [], [])
    from_coded = risk_stage.window_key_sets(ctx, coded_path, [], [])
    assert kept is not None and kept.digest() == from_coded.digest() == from_rows.digest()
    assert counts == {"units": kept.units, "keys": kept.keys, "pairs": len(kept.unit_keys)}
    assert keysets.file_rows(coded_path) == len(kept.unit_keys)
    rows = pd.read_parquet(rows_path)
    back = keys_stage.key_set_rows(coded_path)
    assert len(back) == len(kept.unit_keys)
    assert set(zip(back["unit"], back["key"])) == set(zip(rows["unit"], rows["key"]))
    # a window of this release and an "earlier" one (here the same keys, renamed): the coded file and the
    # rows give the same figures, whichever kind each part is read from
    renamed = rows.assign(unit="earlier-" + rows["unit"])
    earlier_rows = tmp_path / "earlier_rows.parquet"
    renamed.to_parquet(earlier_rows)
    mixed = risk_stage.window_key_sets(ctx, coded_path, [], [earlier_rows])
    plain = risk_stage.window_key_sets(ctx, rows_path, [], [earlier_rows])
    assert mixed.digest() == plain.digest() and mixed.units == 2 * kept.units
    assert risk_stage.window_key_sets(ctx, rows_path, [], [coded_path]).units == kept.units  # one unit, two files


def _rewritten(source: Path, target: Path, edit) -> Path:
    """A copy of a coded key set file with its rows edited by `edit` (a DataFrame -> DataFrame), metadata kept."""
    table = pq.read_table(source)
    frame = edit(table.to_pandas())
    pq.write_table(pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False), target)
    return target


@pytest.mark.slow
def test_a_coded_key_set_file_whose_codes_do_not_join_is_refused_naming_it(tmp_path, fixture_policy):
    """A coded key set file is checked before it is read: a pair whose unit or key has no name row would be
    dropped by the joins silently. Negative controls: a unit's name row removed, two units given one name, a
    pair's key code out of range, a pair removed (the metadata's count), and another format version."""
    ctx = protected_candidate(fixture_policy, tmp_path)
    keys_stage.write_risk_areas(ctx)
    assert keys_stage.keep_released_keys(ctx, None) is not None
    good = ctx.area.unit_keys
    is_unit = lambda f: f["u"].notna() & f["k"].isna()  # noqa: E731
    is_pair = lambda f: f["u"].notna() & f["k"].notna()  # noqa: E731
    first_unit = lambda f: is_unit(f) & (f["u"] == 0)  # noqa: E731
    edits = {
        "no_unit_name": lambda f: f[~first_unit(f)],
        "same_name": lambda f: f.assign(
            name=f["name"].where(~(is_unit(f) & (f["u"] == 1)), f.loc[first_unit(f), "name"].iloc[0])
        ),
        "key_out_of_range": lambda f: f.assign(k=f["k"].where(~(is_pair(f) & (f.index == f.index[is_pair(f)][0])), 10**6)),
        "pair_removed": lambda f: f.drop(f.index[is_pair(f)][-1]),
    }
    for name, edit in edits.items():
        bad = _rewritten(good, tmp_path / f"{name}.parquet", edit)
        with pytest.raises(ValueError, match=f"{bad}: not a valid coded key set file"):
            risk_stage.window_key_sets(ctx, bad, [], [])
    table = pq.read_table(good)
    other = tmp_path / "version.parquet"
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, keysets.FILE_FORMAT: b"2"}), other)
    with pytest.raises(ValueError, match="coded key set file of version"):
        risk_stage.window_key_sets(ctx, other, [], [])
    assert risk_stage.window_key_sets(ctx, good, [], []).units > 0  # the unedited file reads


def test_a_key_without_a_zone_is_refused():
    frame = _generated(5, 20, False)
    with pytest.raises(ValueError, match="keys without a risk zone"):
        window_key_sets(
            ["SELECT * FROM current_keys"], lambda cells: _zone_of_cells(cells).iloc[1:], {"current_keys": frame}
        )


@pytest.mark.slow
def test_the_publish_step_reuses_the_estimate_only_for_byte_identical_inputs(tmp_path, fixture_policy, monkeypatch):
    """The risk step's estimate is reused by the publish step: keyed by the files the key sets derive from (no
    key sets built at all), or else by the coded key sets (built again from the candidate and the ledger's
    window), parameters and population. Negative controls: tampered saved digests, a risk zone that moved,
    and a candidate that lost a published cell each make it compute the estimate again."""
    from spatial_release.stages import risk as risk_stage

    ctx = protected_candidate(fixture_policy, tmp_path)
    ledger = Ledger(tmp_path / "ledger", tmp_path / "releases")
    first = stages.run_risk(ctx, ledger)
    calls, built = [], []
    real, real_sets = risk_stage.estimate_key_sets, risk_stage.window_key_sets
    monkeypatch.setattr(risk_stage, "estimate_key_sets", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(risk_stage, "window_key_sets", lambda *a, **k: built.append(1) or real_sets(*a, **k))

    again = stages.assess_risk(ctx, ledger)  # as the publish step calls it: no key set file
    assert not calls and not built and again.zones == first.zones and again.release_figure == first.release_figure

    def forge(name: str) -> None:
        saved = ctx.area.risk / name
        data = json.loads(saved.read_text())
        data["result"]["zones"][0]["mean"] = 0.0  # a forged figure with a digest that no longer matches
        data["digest"] = "0" * 64
        saved.write_text(json.dumps(data))

    forge(risk_stage.ESTIMATE_BY_INPUTS)
    assert stages.assess_risk(ctx, ledger).zones == first.zones and not calls and built  # by the key sets
    forge(risk_stage.ESTIMATE_BY_INPUTS)
    forge(risk_stage.ESTIMATE)
    assert stages.assess_risk(ctx, ledger).zones == first.zones and len(calls) == 1

    real_zone = stages.ReleaseContext.risk_zones
    monkeypatch.setattr(
        stages.ReleaseContext, "risk_zones", lambda c, cells: real_zone(c, cells).map(lambda z: f"moved-{z}")
    )
    moved = stages.assess_risk(ctx, ledger)
    assert len(calls) == 2 and {z.zone for z in moved.zones} == {f"moved-{z.zone}" for z in first.zones}
    monkeypatch.setattr(stages.ReleaseContext, "risk_zones", real_zone)
    assert stages.assess_risk(ctx, ledger).zones == first.zones and len(calls) == 3  # the last save was "moved"
    assert stages.assess_risk(ctx, ledger).zones == first.zones and len(calls) == 3

    cells_path = ctx.area.candidate / "cells.parquet"
    cells = gpd.read_parquet(cells_path)
    cells[cells[fixture_policy.count_column] > 0].iloc[1:].to_parquet(cells_path)  # one published cell fewer
    changed = stages.assess_risk(ctx, ledger)
    assert len(calls) == 4 and changed.keys < first.keys
