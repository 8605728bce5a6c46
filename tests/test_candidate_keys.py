"""One candidate, built once: the protection loop holds each configuration in memory, writes the last one once,
and keeps its key sets and its assessment in the work area's memo under the candidate's digest. The risk step
reads them instead of coding and assessing again; any changed byte (the kept key sets, the candidate's figures,
the memberships) and it codes them afresh, with the figures a fresh coding gives."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.fixture import advantage_city_policy
from support.spies import counted

from spatial_release import stages
from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.progress import event_of
from spatial_release.stages import advantage as advantage_stage
from spatial_release.stages import keys as keys_stage
from spatial_release.stages.context import CandidateTables, Published, ReleaseContext
from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings

pytestmark = pytest.mark.slow  # a small release through protection and risk


@pytest.fixture(scope="module")
def candidate(tmp_path_factory) -> tuple[ReleaseContext, Ledger]:
    """A small city (200 persons, 1 km x 1 week, k = 5) protected under the advantage model with coarsening
    applied (ceilings of 1: one pass of the loop)."""
    folder = tmp_path_factory.mktemp("candidate-keys")
    pings = write_pings(generate_pings(SyntheticConfig(persons=200, days=21)), folder / "pings.parquet")
    path = advantage_city_policy(folder, "candidate_keys", 1000, 4000, coarsen="apply")
    ctx = ReleaseContext(load_policy(path), Period.parse("2018-Q1"), folder / "work")
    ledger = Ledger(folder / "ledger", folder / "releases")
    stages.run_ingest(ctx, [pings])
    stages.run_counts(ctx)
    stages.run_protect(ctx, published=Published(ledger, folder / "releases"))
    return ctx, ledger


def _risk_with_coding_counted(
    ctx: ReleaseContext, ledger: Ledger, monkeypatch, assessed: list[int] | None = None, said: list[str] | None = None
):
    """The risk step's assessment (as JSON, without its timing) and how often it coded the key sets; how often it
    assessed the advantage is appended to `assessed`, its progress messages to `said`."""
    calls: list[int] = []
    monkeypatch.setattr(stages.risk, "keep_released_keys", counted(keys_stage.keep_released_keys, calls))
    if assessed is not None:
        monkeypatch.setattr(advantage_stage, "advantage_of", counted(advantage_stage.advantage_of, assessed))
    assessment = stages.run_risk(ctx, ledger, progress=(said if said is not None else []).append).to_json()
    monkeypatch.undo()
    assessment.pop("seconds", None)
    return assessment, len(calls)


def _parts(said: list[str]) -> list[str]:
    """What the risk step said it did, without the times."""
    return [str(m).split(" in ")[0] for m in said]


def test_the_risk_step_reads_the_key_sets_and_the_assessment_the_loop_kept(candidate, monkeypatch):
    ctx, ledger = candidate
    assert ctx.area.unit_keys.exists()
    assert keys_stage.kept_keys_current(ctx)
    keys_stage._hand_over(None)  # the file read back (taking over what this process coded is tested below)
    kept = ctx.area.unit_keys.read_bytes()
    assessed: list[int] = []
    said: list[str] = []
    reused, coded = _risk_with_coding_counted(ctx, ledger, monkeypatch, assessed, said)
    assert coded == 0 and not assessed  # read as the loop kept them, and its assessment reused
    # the run log says what the step did, part by part, in the order it did it (and never a figure)
    assert _parts(said) == [
        "risk: the key sets the protection step kept read back",
        "risk: the uniqueness bound and the advantage model's figures assessed, this release with the earlier ones",
    ]
    assert all((e := event_of(m)) is not None and e.step == "risk" and e.seconds is not None for m in said)
    assert ctx.area.unit_keys.read_bytes() == kept
    # the same figures as key sets coded afresh: the record removed, the risk step codes them again
    ctx.memo().save(keys_stage.KEPT_KEYS, None, {})
    assert not keys_stage.kept_keys_current(ctx)
    said = []
    fresh, coded = _risk_with_coding_counted(ctx, ledger, monkeypatch, said=said)
    assert coded == 1
    assert _parts(said)[0] == "risk: the release's key sets coded and kept"  # what it did this time
    assert ctx.area.unit_keys.read_bytes() == kept  # the loop's coding is the risk step's, byte for byte
    assert json.dumps(reused, sort_keys=True) == json.dumps(fresh, sort_keys=True)
    assert keys_stage.kept_keys_current(ctx)  # the risk step records what it kept
    # negative control of the spy: without the loop's assessment in the memo, the risk step assesses
    ctx.memo().save("advantage", None, {})
    _risk_with_coding_counted(ctx, ledger, monkeypatch, assessed)
    assert assessed == [1]


def _restore_after(path: Path):
    original = path.read_bytes()

    def restore() -> None:
        path.write_bytes(original)

    return restore


@pytest.mark.parametrize(
    "edited", ["risk/unit_keys.internal.parquet", "candidate/cells.parquet", "counts/membership.internal.parquet"]
)
def test_an_edited_file_voids_the_kept_key_sets_and_the_risk_step_codes_again(candidate, monkeypatch, edited):
    """Negative control: a byte changed in the kept key sets, the candidate or the membership they were coded
    from, and the kept file is not read."""
    ctx, ledger = candidate
    assert keys_stage.kept_keys_current(ctx)
    path = ctx.area.root / edited
    restore = _restore_after(path)
    try:
        frame = pd.read_parquet(path)
        if edited == "candidate/cells.parquet":
            # the candidate's digest is of its figures, not of how the file encodes them: a changed count
            frame.loc[frame.index[0], ctx.policy.count_column] += 1
            frame.to_parquet(path, index=False)
        else:
            frame.iloc[::-1].to_parquet(path, index=False)  # the same rows in another order: other bytes
        assert not keys_stage.kept_keys_current(ctx)
        if edited == "risk/unit_keys.internal.parquet":
            _, coded = _risk_with_coding_counted(ctx, ledger, monkeypatch)
            assert coded == 1
            assert keys_stage.kept_keys_current(ctx)  # coded again from the files as they are, and recorded
    finally:
        restore()
        # the kept file coded from the restored files and recorded again, for the next test
        stages.run_risk(ctx, ledger)
    assert keys_stage.kept_keys_current(ctx)


def test_the_candidate_digest_is_of_the_figures_whatever_holds_them(candidate):
    """The loop holds the candidate in memory and the risk step reads the files: the same figures must give the
    same digest either way, and another figure another digest."""
    ctx, _ = candidate
    written = ctx.candidate_tables()
    cells, margins = written.cells.iloc[::-1].copy(), written.margins.copy()
    cells["bucket_start"] = pd.to_datetime(cells["bucket_start"], utc=True).dt.as_unit("us")
    same = CandidateTables(cells, margins, written.count_column)
    assert same.digest() == written.digest()
    margins.loc[margins.index[0], written.count_column] += 1
    assert CandidateTables(written.cells, margins, written.count_column).digest() != written.digest()


def test_the_memo_is_deleted_with_the_per_unit_data():
    assert "memo.internal.json" in stages.context.PER_UNIT_ARTEFACTS


def test_the_risk_step_takes_over_the_key_sets_this_process_coded(candidate, monkeypatch):
    """In one process (a run executed in process, the command line) the risk step takes the key sets the
    protection step coded instead of reading the file back: the same assessment, and the file not read. The
    negative control: key sets handed over with other zones give other figures, so the takeover is what the
    estimate read."""
    ctx, ledger = candidate
    keys_stage._hand_over(None)  # whatever an earlier test left: this first step reads the file back
    said: list[str] = []
    _forget_estimates(ctx)  # each step below estimates from the key sets it holds, not from the memo
    read_back, coded = _risk_with_coding_counted(ctx, ledger, monkeypatch, said=said)
    assert coded == 0 and _parts(said)[0] == "risk: the key sets the protection step kept read back"
    kept = keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx))  # as the loop's last pass
    assert kept is not None
    reads: list[int] = []
    monkeypatch.setattr(stages.risk, "read_key_sets", counted(stages.risk.read_key_sets, reads))
    said = []
    _forget_estimates(ctx)
    taken, coded = _risk_with_coding_counted(ctx, ledger, monkeypatch, said=said)
    assert coded == 0 and reads == []
    assert _parts(said)[0] == "risk: the key sets the protection step kept taken over from it, not read back"
    assert json.dumps(taken, sort_keys=True) == json.dumps(read_back, sort_keys=True)
    assert keys_stage.take_handed_over(ctx) is None  # taken once
    # negative control: the same file and sources, key sets of other zones handed over
    other = replace(kept.sets, key_zone=np.full(len(kept.sets.key_zone), "elsewhere", dtype=object))
    keys_stage._hand_over(replace(kept, coded=replace(kept.coded, sets=other)))
    _forget_estimates(ctx)
    wrong, _ = _risk_with_coding_counted(ctx, ledger, monkeypatch)
    assert json.dumps(wrong, sort_keys=True) != json.dumps(read_back, sort_keys=True)
    stages.run_risk(ctx, ledger)  # the assessment of the files as they are, for the next test


def _forget_estimates(ctx: ReleaseContext) -> None:
    for name in (stages.risk.ESTIMATE, stages.risk.ESTIMATE_BY_INPUTS):
        ctx.memo().save(name, None, {})


@pytest.mark.parametrize("edited", ["risk/unit_keys.internal.parquet", "counts/membership.internal.parquet"])
def test_key_sets_are_not_taken_over_once_a_file_changed(candidate, edited):
    """Negative control of the takeover: a byte changed in the kept file or in what it was coded from, and the
    key sets this process coded are not taken (the risk step reads or codes the files as they are); the slot
    is emptied all the same."""
    ctx, ledger = candidate
    kept = keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx))
    assert kept is not None
    path = ctx.area.root / edited
    restore = _restore_after(path)
    try:
        pd.read_parquet(path).iloc[::-1].to_parquet(path, index=False)  # the same rows in another order
        assert keys_stage.take_handed_over(ctx) is None
    finally:
        restore()
    assert keys_stage.take_handed_over(ctx) is None  # emptied by the refused take, not kept for later
    again = keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx))
    assert again is not None and keys_stage.take_handed_over(ctx) is again.sets  # unchanged files: taken
    stages.run_risk(ctx, ledger)


def test_key_sets_are_not_taken_over_when_the_code_is_not_known(candidate, monkeypatch):
    """As the memo: code changed on disk since it was imported has no digest, and nothing is taken over."""
    ctx, ledger = candidate
    assert keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx)) is not None
    monkeypatch.setattr(keys_stage.reuse, "code_digest", lambda: None)
    assert keys_stage.take_handed_over(ctx) is None
    monkeypatch.undo()
    stages.run_risk(ctx, ledger)


def _estimates_by_thread(monkeypatch) -> list[str]:
    """The threads `estimate_key_sets` runs on from now on (the risk step's own, or the one started beside)."""
    threads: list[str] = []
    real = stages.risk.estimate_key_sets

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(stages.risk, "estimate_key_sets", spy)
    return threads


def test_the_risk_step_reads_the_estimate_started_beside_the_checks(candidate, monkeypatch):
    """The protection step starts the risk step's uniqueness estimate once the candidate is written
    (`start_estimate_beside`): the risk step waits for it and reads it from the memo, under the digest of its own
    inputs, instead of estimating again: the same figures as its own estimate. Negative control: an estimate
    beside of other inputs (other zone populations) is not read; the risk step estimates on its own."""
    ctx, ledger = candidate
    published = Published(ledger, ctx.area.root / "releases")
    kept = keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx))  # as the loop's last pass
    assert kept is not None
    _forget_estimates(ctx)
    alone = stages.run_risk(ctx, ledger).to_json()  # the risk step's own estimate, nothing beside it
    alone.pop("seconds", None)

    keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx))
    _forget_estimates(ctx)
    threads = _estimates_by_thread(monkeypatch)
    stages.risk.start_estimate_beside(ctx, published)
    said: list[str] = []
    beside = stages.run_risk(ctx, ledger, progress=said.append).to_json()
    beside.pop("seconds", None)
    assert threads == ["estimate-beside"]  # estimated once, beside; the risk step read it
    assert "risk: the uniqueness estimate started beside the checks has ended" in _parts(said)
    assert json.dumps(beside, sort_keys=True) == json.dumps(alone, sort_keys=True)

    # negative control: beside, an estimate of other inputs; the risk step does not take it for its own
    keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx))
    _forget_estimates(ctx)
    threads.clear()
    real_population = stages.risk.zone_population
    monkeypatch.setattr(
        stages.risk, "zone_population", lambda *a, **k: {z: 2 * v for z, v in (real_population(*a, **k) or {}).items()}
    )
    stages.risk.start_estimate_beside(ctx, published)
    assert stages.risk._beside[ctx.area.root].exception(timeout=120) is None  # ended, with the other populations
    monkeypatch.setattr(stages.risk, "zone_population", real_population)
    again = stages.run_risk(ctx, ledger).to_json()
    again.pop("seconds", None)
    assert threads == ["estimate-beside", "MainThread"]
    assert json.dumps(again, sort_keys=True) == json.dumps(alone, sort_keys=True)


def test_a_failed_estimate_beside_the_checks_leaves_the_risk_step_its_own(candidate, monkeypatch):
    """An error in the estimate started beside is dropped there: the risk step estimates on its own, and says
    nothing of an estimate beside."""
    ctx, ledger = candidate
    assert keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx)) is not None
    _forget_estimates(ctx)
    threads = _estimates_by_thread(monkeypatch)
    real_window = stages.risk.estimate_window

    def failing(*args, **kwargs):
        if threading.current_thread().name == "estimate-beside":
            raise OSError("the disk went away")
        return real_window(*args, **kwargs)

    monkeypatch.setattr(stages.risk, "estimate_window", failing)
    stages.risk.start_estimate_beside(ctx, Published(ledger, ctx.area.root / "releases"))
    said: list[str] = []
    assessment = stages.run_risk(ctx, ledger, progress=said.append)
    assert threads == ["MainThread"]
    assert not any("beside" in part for part in _parts(said))
    assert assessment.status in {"pass", "warn", "block"}


def test_nothing_is_estimated_beside_without_a_ledger_or_kept_key_sets(candidate, monkeypatch):
    ctx, ledger = candidate
    threads = _estimates_by_thread(monkeypatch)
    keys_stage._hand_over(None)
    stages.risk.start_estimate_beside(ctx, Published(ledger, ctx.area.root / "releases"))  # nothing kept in process
    assert keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx)) is not None
    stages.risk.start_estimate_beside(ctx, None)  # no ledger: the window is not known
    assert ctx.area.root not in stages.risk._beside and threads == []
    keys_stage._hand_over(None)


def test_a_release_run_estimates_once_beside_the_checks(tmp_path, monkeypatch):
    """Through the Dagster jobs (`cli.run_release`, every step in one process): the protection step starts the
    estimate once the candidate is written, and neither the risk step nor the publish step estimates again; the
    release publishes. Negative control: the same run without the start (the step's hook replaced by nothing)
    estimates on the risk step's own thread, with the same published risk figures."""
    from spatial_release.cli import run_release

    pings = write_pings(generate_pings(SyntheticConfig(persons=200, days=21)), tmp_path / "pings.parquet")
    path = advantage_city_policy(tmp_path, "beside_run", 1000, 4000, coarsen="apply")

    def released(name: str) -> tuple[list[str], dict]:
        threads = _estimates_by_thread(monkeypatch)
        outcome = run_release(str(path), "2018-Q1", [str(pings)], str(tmp_path / name), str(tmp_path / name / "ledger"))
        assert outcome.published and outcome.release_dir is not None, outcome.failures
        record = json.loads((outcome.release_dir / "release.json").read_text())
        record["risk"].pop("seconds", None)
        return threads, record["risk"]

    threads, beside = released("beside")
    assert threads == ["estimate-beside"]
    monkeypatch.setattr(stages, "start_estimate_beside", lambda ctx, published: None)
    threads, alone = released("alone")
    assert threads and "estimate-beside" not in threads
    assert json.dumps(beside, sort_keys=True) == json.dumps(alone, sort_keys=True)


def test_key_sets_are_not_taken_over_for_another_candidate(candidate, monkeypatch):
    """A later protection in the same process may write another candidate and keep no key sets (no climbing):
    the kept file, what it was coded from and the slot all stay as they were. The key sets coded for the
    earlier candidate are then neither taken by the risk step nor estimated beside it: another candidate's
    figures would be read as this one's. Negative control: the candidate put back, they are taken."""
    ctx, ledger = candidate
    kept = keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx))
    assert kept is not None and keys_stage.peek_handed_over(ctx) is kept.sets
    path = ctx.area.candidate / "cells.parquet"
    restore = _restore_after(path)
    try:
        cells = pd.read_parquet(path)
        cells.iloc[1:].to_parquet(path, index=False)  # another candidate: one figure fewer
        assert ctx.candidate_tables().digest() != kept.candidate
        threads = _estimates_by_thread(monkeypatch)
        stages.risk.start_estimate_beside(ctx, Published(ledger, ctx.area.root / "releases"))
        assert not stages.risk._estimate_beside_done(ctx) and threads == []  # nothing estimated beside
        assert keys_stage.peek_handed_over(ctx) is None
        assert keys_stage.take_handed_over(ctx) is None
    finally:
        restore()
    monkeypatch.undo()
    again = keys_stage.keep_released_keys(ctx, keys_stage.write_ladder_buckets(ctx))
    assert again is not None and keys_stage.take_handed_over(ctx) is again.sets
    stages.run_risk(ctx, ledger)
