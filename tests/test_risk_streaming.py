"""The risk step reads and codes the window's key sets in DuckDB (risk.keysets) instead of pandas: its per-zone
figures and its gate decision are exactly those of a plain in-memory reference (the pandas key sets, factorize,
the per-unit groupby, the knowledge sets drawn one by one in Python as the estimator specifies them, set-by-set
anonymity counts and list-based aggregation), on the test fixture, on a synthetic release through the stages,
and on generated key set tables over a window of several files."""

import json
from datetime import date

import geopandas as gpd
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from support.fixture import fixture_pings, uniqueness_policy_dict, write_policy
from support.key_sets import (
    generated_key_sets,
    generated_window,
    in_memory,
    naming_more,
    reference_estimate,
    rewritten_key_set_file,
    same_report,
    zone_of_cells,
)
from support.releases import protected_candidate
from support.spies import counted

from spatial_release import stages
from spatial_release.fileio import sha256_file
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.risk import Adversary, RiskParams, decide, keysets, release_figure
from spatial_release.risk.estimator import estimate_key_sets
from spatial_release.risk.keysets import window_key_sets
from spatial_release.risk.landscape import load_landscape
from spatial_release.stages import keys as keys_stage
from spatial_release.stages import risk as risk_stage
from spatial_release.stages.context import zone_population
from spatial_release.stages.risk import labelled_zones
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings

PERIOD = Period.parse("2018-Q1")


# ------------------------------------------------------------------ the reference key sets (its estimate: support.key_sets)


@pytest.fixture
def fixture_policy(tmp_path, fixture_traces):
    """The conftest fixture policy gated on the uniqueness figure: this file tests that estimator's streaming."""
    return load_policy(write_policy(tmp_path, uniqueness_policy_dict(str(fixture_traces))))


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


# ------------------------------------------------------------------ through the stages


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
    assert policy.risk is not None
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


@pytest.mark.slow
@pytest.mark.parametrize("text_units", [False, True])
@pytest.mark.parametrize(
    "params",
    [RiskParams(points=4, draws=8, seed=3), RiskParams(points=1, draws=3), RiskParams(points=3, draws=20, threshold=0.05)],
)
def test_generated_window_over_files_has_the_reference_figures(tmp_path, params, text_units):
    selects, frames, window, key_zone, population = generated_window(tmp_path, text_units)
    sets = in_memory(window_key_sets(selects, zone_of_cells, frames))
    report = estimate_key_sets(sets, params, population)
    same_report(report, reference_estimate(window, key_zone, params, population))
    assert report.units == window["unit"].nunique() and report.keys == window["key"].nunique()


def test_anonymity_sets_counted_in_small_chunks_give_the_reference_figures(monkeypatch):
    """The batch count of anonymity sets (estimator._anonymity) split into chunks of a few candidates, and the
    draws built in chunks of a few units (fewer pairs than one unit holds, too): the same figures as the
    set-by-set reference, units with fewer keys than p included."""
    from spatial_release.risk import estimator

    monkeypatch.setattr(estimator, "CANDIDATES", 5)
    monkeypatch.setattr(estimator, "DRAW_PAIRS", 7)
    frame = pd.concat([generated_key_sets(4, 300, False), generated_key_sets(5, 40, False).head(30)], ignore_index=True)
    params = RiskParams(points=4, draws=6, seed=11)
    sets = in_memory(window_key_sets(["SELECT * FROM current_keys"], zone_of_cells, {"current_keys": frame}))
    key_zone = pd.Series(frame["cell_id"].str.slice(0, 2).to_numpy(), index=frame["key"].to_numpy())
    reference = reference_estimate(frame, key_zone[~key_zone.index.duplicated()], params)
    assert min(np.diff(sets.unit_offsets)) < params.points  # some units hold fewer keys than p
    assert reference.pooled < 1.0  # sets larger than one unit: the counts matter, not only the 1s
    same_report(estimate_key_sets(sets, params), reference)


def test_generated_exhaustive_mode_has_the_reference_figures(tmp_path):
    frame = generated_key_sets(4, 60, True)
    params = RiskParams(points=2, exhaustive=True)
    sets = in_memory(window_key_sets(["SELECT * FROM current_keys"], zone_of_cells, {"current_keys": frame}))
    key_zone = pd.Series(frame["cell_id"].str.slice(0, 2).to_numpy(), index=frame["key"].to_numpy())
    same_report(estimate_key_sets(sets, params), reference_estimate(frame, key_zone[~key_zone.index.duplicated()], params))


def test_units_and_keys_no_pair_holds_are_not_counted():
    """A part may name more units and keys than its pairs hold (the memberships' units, some counted only in
    withheld cells; every published key): the key sets are those of the pairs alone, numbered as if the rest
    were never named, and a key no pair holds needs no risk zone."""
    frame = generated_key_sets(6, 80, True)
    zones = lambda cells: zone_of_cells(cells[cells != "nowhere"])  # noqa: E731
    plain = in_memory(window_key_sets(["SELECT * FROM current_keys"], zones, {"current_keys": frame}))
    named = in_memory(
        window_key_sets([], zones, {"current_keys": frame}, coded=[naming_more("current_keys", "!first", "!key")])
    )
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
    from_area = in_memory(risk_stage.window_key_sets(ctx, None, [], []))
    from_file = in_memory(risk_stage.window_key_sets(ctx, path, [], []))
    reference = in_memory(
        window_key_sets(
            ["SELECT * FROM reference"],
            ctx.risk_zones,
            {"reference": reference_released_keys(ctx)},
        )
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
    held = keys_stage.keep_released_keys(ctx, None)
    coded_path = ctx.area.unit_keys
    counts = keysets.coded_file_counts(coded_path)
    assert counts is not None and keysets.coded_file_counts(rows_path) is None
    from_rows = in_memory(risk_stage.window_key_sets(ctx, rows_path, [], []))
    from_coded = in_memory(risk_stage.window_key_sets(ctx, coded_path, [], []))
    assert held is not None and held.sha256 == sha256_file(coded_path)
    kept = held.sets
    assert kept.digest() == from_coded.digest() == from_rows.digest()
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
    mixed = in_memory(risk_stage.window_key_sets(ctx, coded_path, [], [earlier_rows]))
    plain = in_memory(risk_stage.window_key_sets(ctx, rows_path, [], [earlier_rows]))
    assert mixed.digest() == plain.digest() and mixed.units == 2 * kept.units
    assert risk_stage.window_key_sets(ctx, rows_path, [], [coded_path]).units == kept.units  # one unit, two files


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
        bad = rewritten_key_set_file(good, tmp_path / f"{name}.parquet", edit)
        with pytest.raises(ValueError, match=f"{bad}: not a valid coded key set file"):
            risk_stage.window_key_sets(ctx, bad, [], [])
    table = pq.read_table(good)
    other = tmp_path / "version.parquet"
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, keysets.FILE_FORMAT: b"2"}), other)
    with pytest.raises(ValueError, match="coded key set file of version"):
        risk_stage.window_key_sets(ctx, other, [], [])
    assert risk_stage.window_key_sets(ctx, good, [], []).units > 0  # the unedited file reads


def test_a_key_without_a_zone_is_refused():
    frame = generated_key_sets(5, 20, False)
    with pytest.raises(ValueError, match="keys without a risk zone"):
        window_key_sets(["SELECT * FROM current_keys"], lambda cells: zone_of_cells(cells).iloc[1:], {"current_keys": frame})


@pytest.mark.slow
def test_the_publish_step_reuses_the_estimate_only_for_byte_identical_inputs(tmp_path, fixture_policy, monkeypatch):
    """The risk step's estimate is reused by the publish step: keyed by the files the key sets derive from (no
    key sets built at all), or else by the coded key sets (built again from the candidate and the ledger's
    window), parameters and population. Negative controls: tampered saved digests, a risk zone that moved,
    and a candidate that lost a published cell each make it compute the estimate again."""
    from spatial_release.stages import reuse
    from spatial_release.stages import risk as risk_stage

    ctx = protected_candidate(fixture_policy, tmp_path)
    ledger = Ledger(tmp_path / "ledger", tmp_path / "releases")
    first = stages.run_risk(ctx, ledger)
    calls: list[int] = []
    built: list[int] = []
    monkeypatch.setattr(risk_stage, "estimate_key_sets", counted(risk_stage.estimate_key_sets, calls))
    monkeypatch.setattr(risk_stage, "window_key_sets", counted(risk_stage.window_key_sets, built))

    again = stages.assess_risk(ctx, ledger)  # as the publish step calls it: no key set file
    assert not calls and not built and again.zones == first.zones and again.release_figure == first.release_figure

    def forge(name: str) -> None:
        saved = ctx.area.root / reuse.MEMO
        data = json.loads(saved.read_text())
        entry = data["results"][name]
        entry["result"]["zones"][0]["mean"] = 0.0  # a forged figure with a digest that no longer matches
        entry["digest"] = "0" * 64
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
