"""The coarsening loop starts the trajectory recovery of a candidate before it codes the candidate's key sets
(`stages.advantage.start_recovery`). The recovery it hands the assessment must be the one the assessment would
have run; one of another candidate, another attacker or a proposal must not be read; and a recovery nobody
reads is stopped."""

from __future__ import annotations

import threading
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from support.releases import protected_advantage_city
from support.spies import counted

from spatial_release import tasks
from spatial_release.risk.advantage import AdvantageParams
from spatial_release.risk.attack import AttackParams, RecoveryStopped, recover_trajectories
from spatial_release.stages import advantage as advantage_stage
from spatial_release.stages.advantage import read_key_sets, recovery_params, recovery_success, start_recovery
from spatial_release.stages.attack import attack_inputs
from spatial_release.stages.context import CandidateTables, ReleaseContext
from spatial_release.stages.keys import keep_released_keys, write_ladder_buckets

PARAMS = AdvantageParams()


@pytest.fixture(scope="module")
def protected_city(tmp_path_factory):
    """200 persons over 3 weeks, 1 km cells x 1 week, 4 km risk zones, protected, its key sets kept."""
    ctx = protected_advantage_city(tmp_path_factory.mktemp("early-recovery"), "early_recovery")
    keep_released_keys(ctx, write_ladder_buckets(ctx))
    return ctx


def _same_recovery(a, b) -> bool:
    return a.trajectories == b.trajectories and all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in ("traj", "step", "area")
    )


def _success(ctx: ReleaseContext, early=None):
    _, _, unit_names = read_key_sets(ctx.area.unit_keys, ctx.risk_zones)
    boundary = np.zeros(len(unit_names), dtype=bool)
    found = recovery_success(ctx, ctx.risk_zones, unit_names, PARAMS, 0.05, boundary, None, None, early)
    order = np.lexsort((found.zone.astype(str), found.unit))
    return found.unit[order], found.zone.astype(str)[order], found.success[order]


def test_the_early_recovery_is_the_recovery_of_the_candidate(protected_city):
    ctx = protected_city
    early = start_recovery(ctx, ctx.risk_zones, PARAMS)
    views = early.views()
    assert views and views[0] is not None  # the fixture publishes figures: else nothing is compared
    inputs, recovered = views[0]
    assert recovered.trajectories > 0
    fresh = recover_trajectories(attack_inputs(ctx, ctx.risk_zones).view, recovery_params(PARAMS))
    assert _same_recovery(recovered, fresh)
    # the assessment's success with it is its success without it, target by target
    with_early, without = _success(ctx, early), _success(ctx)
    assert len(without[0]) and all(np.array_equal(a, b) for a, b in zip(with_early, without))
    # the assessment took the recovery over: the early recovery no longer holds its points, nor hands them twice
    assert early.views_recovered.result()[0] is None
    with pytest.raises(AssertionError, match="handed over"):
        early.take(0)


def test_an_early_recovery_of_another_candidate_attacker_or_view_is_not_read(protected_city, monkeypatch):
    ctx = protected_city
    early = start_recovery(ctx, ctx.risk_zones, PARAMS)
    early.views()
    attack = recovery_params(PARAMS)
    assert early.serves(ctx, attack, None)
    assert not early.serves(ctx, replace(attack, seed=attack.seed + 1), None)
    assert not early.serves(ctx, attack, "1d")  # a proposal's cells are another view
    # another candidate: the same figures but one, held by the loop as its next configuration
    written = ctx.candidate_tables()
    other = CandidateTables(written.cells.iloc[1:].copy(), written.margins, written.count_column)
    ctx.hold_candidate(other)
    try:
        assert not early.serves(ctx, attack, None)
        # the negative control: a recovery_success that read it anyway (serves patched to yes) would give the
        # first candidate's figures, which differ here from the held one's; the real one recovers again
        held = _success(ctx)
        monkeypatch.setattr(type(early), "serves", lambda *_: True)
        misread = _success(ctx, early)
        monkeypatch.undo()
        assert not all(np.array_equal(a, b) for a, b in zip(misread, held))
        assert all(np.array_equal(a, b) for a, b in zip(_success(ctx, early), held))
    finally:
        ctx.hold_candidate(None)


def test_a_stopped_recovery_ends_at_its_next_bucket(protected_city):
    ctx = protected_city
    view = attack_inputs(ctx, ctx.risk_zones).view
    stop = threading.Event()
    stop.set()
    with pytest.raises(RecoveryStopped, match="stopped at bucket 0"):
        recover_trajectories(view, AttackParams(), stop)
    stop.clear()
    assert _same_recovery(recover_trajectories(view, AttackParams(), stop), recover_trajectories(view, AttackParams()))


def test_the_loop_stops_the_early_recovery_whatever_the_assessment_does(protected_city, monkeypatch):
    ctx = protected_city
    started: list = []
    real = advantage_stage.start_recovery

    def spy(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    from spatial_release.stages import coarsen

    monkeypatch.setattr(coarsen, "start_recovery", spy)
    monkeypatch.setattr(coarsen, "candidate_advantage", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        coarsen.advantage_of_candidate(ctx)
    assert len(started) == 1 and started[0].stopping.is_set()


def _same_linkage(a, b) -> bool:
    same_sets = all(
        np.array_equal(getattr(x, f), getattr(y, f))
        for x, y in ((a.truth_view, b.truth_view),)
        for f in ("unit_offsets", "unit_keys", "key_offsets", "key_units")
    )
    draws = len(a.drawn.by_width) == len(b.drawn.by_width) and all(
        np.array_equal(r1, r2) and np.array_equal(k1, k2) for (r1, k1), (r2, k2) in zip(a.drawn.by_width, b.drawn.by_width)
    )
    return (
        same_sets
        and draws
        and a.width == b.width
        and np.array_equal(a.view_key_of, b.view_key_of)
        and np.array_equal(a.drawn.entry_unit, b.drawn.entry_unit)
    )


def test_the_linkage_inputs_are_computed_once_whoever_asks_first(protected_city, monkeypatch):
    ctx = protected_city
    calls: list[int] = []
    real = advantage_stage.linkage_inputs

    def counted_inputs(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(advantage_stage, "linkage_inputs", counted_inputs)
    early = start_recovery(ctx, ctx.risk_zones, PARAMS)
    asked: list = []
    askers = [threading.Thread(target=lambda: asked.append(early.linkage(0))) for _ in range(3)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    early.recovered(0)  # the thread's own turn comes after its recovery
    found = early.linkage(0)
    assert len(asked) == 3 and all(a is found for a in asked)
    assert len(calls) == 1
    inputs = attack_inputs(ctx, ctx.risk_zones)
    fresh = real(inputs.view, inputs.unit, inputs.step, inputs.area, inputs.zone_of_area, recovery_params(PARAMS))
    assert _same_linkage(found, fresh)
    # the negative control of the comparison: another seed draws other knowledge
    other = real(
        inputs.view, inputs.unit, inputs.step, inputs.area, inputs.zone_of_area, replace(recovery_params(PARAMS), seed=7)
    )
    assert not _same_linkage(found, other)


def test_a_daemonic_process_recovers_on_its_thread(protected_city, monkeypatch):
    """A pool's worker (a daemonic process) may not start a process of its own: the early recovery then runs on
    its thread, with the same result; elsewhere it goes to a process (the negative control of the spy)."""
    ctx = protected_city
    sent: list[int] = []
    monkeypatch.setattr(tasks, "in_own_process", counted(tasks.in_own_process, sent))
    fresh = recover_trajectories(attack_inputs(ctx, ctx.risk_zones).view, recovery_params(PARAMS))
    in_process = start_recovery(ctx, ctx.risk_zones, PARAMS).recovered(0)
    assert sent == [1] and _same_recovery(in_process, fresh)
    monkeypatch.setattr(advantage_stage.multiprocessing, "current_process", lambda: SimpleNamespace(daemon=True))
    on_thread = start_recovery(ctx, ctx.risk_zones, PARAMS).recovered(0)
    assert sent == [1] and _same_recovery(on_thread, fresh)
