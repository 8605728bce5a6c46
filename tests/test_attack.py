"""The attacks on aggregates (risk.attack): they must succeed where the published figures give people away
(regular trajectories in sparse fine cells, a planted unique trajectory), fail where they cannot (dense,
coarse), and never find a coarser or more crowded release riskier. Every figure is re-derived here from the
true trajectories, never taken from the attack's own report where it can be avoided."""

from __future__ import annotations

import numpy as np
import pytest
from support.attack_city import regular_city

from spatial_release.risk.attack import HUB_COST, AttackParams, ReleaseView, attack_risk, recover_trajectories


def worst(report) -> float:
    return max(z.linkage for z in report.zones)


def true_accuracy(view, recovered, unit, step, area) -> float:
    """Xu et al.'s accuracy, re-derived from the true trajectories: per recovered trajectory, the share of its
    published points held by the true trajectory that agrees with it most."""
    truth = np.full((unit.max() + 1, view.steps), -1)
    truth[unit, step] = area
    shown = np.zeros(view.steps * view.areas, dtype=bool)
    shown[view.figure_step * view.areas + view.figure_area] = True
    rec = np.full((recovered.trajectories, view.steps), -2)
    rec[recovered.traj, recovered.step] = recovered.area
    scores = []
    for r in range(recovered.trajectories):
        mine = rec[r] >= 0
        mine &= rec[r] < view.areas
        if not mine.any():
            continue
        scores.append((truth[:, mine] == rec[r][mine]).mean(axis=1).max())
    return float(np.mean(scores))


PARAMS = AttackParams(points=4, draws=5)


def test_regular_sparse_city_is_recovered_and_linked():
    """The negative control where the attack must succeed: regular units, 250 m x 1 h, sparse cells (k = 2).
    Xu et al. report 73-91 % accuracy; the linkage success is far over a 0.05 ceiling."""
    view, unit, step, area, zones = regular_city(150, 16, 3, k=2)
    recovered = recover_trajectories(view, PARAMS)
    assert true_accuracy(view, recovered, unit, step, area) >= 0.65  # 0.70 measured
    report = attack_risk(view, unit, step, area, zones, PARAMS, recovered)
    assert worst(report) > 0.05
    assert max(z.membership for z in report.zones) > 0  # some knowledge sets single out a member


def test_dense_coarse_release_gives_near_the_floor():
    """Where the attack must fail: the same city on a 2 x 2 grid of 2 km cells, weekly-like dense counts: the
    linkage success stays within a few times 1/N."""
    view, unit, step, area, zones = regular_city(600, 16, 2, k=5, merge=8, hours=12)
    report = attack_risk(view, unit, step, area, zones, PARAMS)
    assert worst(report) <= 5.0 / 600


# Monotonicity is a property of what is published: with every figure published (k = 1), a coarser or more
# crowded release must never be riskier. At a k that withholds figures it is not a property of any attack: a
# coarser grid withholds fewer figures, so the attacker reads more (measured below, and in docs/guarantees.md).


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_coarser_in_space_is_never_riskier(seed):
    fine = attack_risk(*regular_city(200, 16, 2, k=1, seed=seed), PARAMS)
    coarse = attack_risk(*regular_city(200, 16, 2, k=1, seed=seed, merge=2), PARAMS)
    assert worst(coarse) <= worst(fine) + 0.01


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_coarser_in_time_is_never_riskier(seed):
    fine = attack_risk(*regular_city(200, 16, 2, k=1, seed=seed), PARAMS)
    coarse = attack_risk(*regular_city(200, 16, 2, k=1, seed=seed, hours=6), PARAMS)
    assert worst(coarse) <= worst(fine) + 0.01


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_more_units_is_never_riskier(seed):
    few = attack_risk(*regular_city(100, 12, 2, k=1, seed=seed), PARAMS)
    many = attack_risk(*regular_city(400, 12, 2, k=1, seed=seed), PARAMS)
    assert worst(many) <= worst(few) + 0.01


def test_suppression_is_what_makes_a_coarser_grid_riskier():
    """Measured, not assumed: at k = 2 the fine grid withholds most figures and the coarser one publishes
    more of them. The test pins the direction so that a change to it is seen."""
    fine_view = regular_city(200, 16, 2, k=2)[0]
    coarse_view = regular_city(200, 16, 2, k=2, merge=2)[0]
    assert coarse_view.figure_count.sum() > fine_view.figure_count.sum()


@pytest.mark.slow
def test_planted_unique_trajectory_is_found():
    """Tampering is caught: a unit that walks alone through cells nobody else visits (published at k = 1) is
    linked to its own trajectory: its zone's success is near 1."""
    view, unit, step, area, zones = regular_city(150, 12, 2, k=1, plant=True)
    report = attack_risk(view, unit, step, area, zones, PARAMS)
    planted = next(z for z in report.zones if z.zone == "P")
    assert planted.units == 1
    assert planted.linkage >= 0.9


@pytest.mark.slow
def test_same_inputs_same_figures():
    inputs = regular_city(120, 12, 2, k=2)
    a, b = attack_risk(*inputs, PARAMS), attack_risk(*inputs, PARAMS)
    assert [z.__dict__ for z in a.zones] == [z.__dict__ for z in b.zones]


def test_withheld_units_are_pooled_not_placed():
    """Under presence the attacker knows how many units the published cells do not place (the total minus the
    cells) but not where: every such unit is in WITHHELD, none in an unpublished area."""
    view, unit, step, area, zones = regular_city(150, 16, 1, k=3)
    recovered = recover_trajectories(view, PARAMS)
    shown = set(zip(view.figure_step.tolist(), view.figure_area.tolist()))
    placed = recovered.area < view.areas
    assert all((s, a) in shown for s, a in zip(recovered.step[placed].tolist(), recovered.area[placed].tolist()))
    for t in range(view.steps):
        at_t = recovered.step == t
        hidden = int((recovered.area[at_t] == view.withheld).sum())
        assert hidden == view.totals[t] - view.figure_count[view.figure_step == t].sum()


def test_visitors_buckets_are_sets_of_areas():
    """Under visitors every published slot is filled: each area's recovered count equals its published count."""
    view, unit, step, area, zones = regular_city(150, 16, 1, k=2, hours=3)
    recovered = recover_trajectories(view, PARAMS)
    placed = recovered.area < view.areas
    got = np.bincount(recovered.step[placed] * view.areas + recovered.area[placed], minlength=view.steps * view.areas)
    want = np.zeros(view.steps * view.areas, dtype=np.int64)
    want[view.figure_step * view.areas + view.figure_area] = view.figure_count
    assert (got == want).all()


def _allocate_reference(flows, state_of, areas, withheld_code, yesterday, rng):
    """The allocation as first written (a stable argsort per slot, every state shuffled): `_allocate` must give
    the same slots and leave the generator in the same state."""
    n_cells = len(areas)
    result = np.full(len(state_of), -1, dtype=np.int64)
    members = np.argsort(state_of, kind="stable")
    starts = np.searchsorted(state_of[members], np.arange(state_of.max() + 2 if len(state_of) else 1))
    by_state: dict[int, list[tuple[int, int]]] = {}
    for (s, slot), f in flows.items():
        by_state.setdefault(s, []).append((slot, f))
    for s, outs in by_state.items():
        pool = members[starts[s] : starts[s + 1]]
        pool = pool[rng.permutation(len(pool))]
        free = np.ones(len(pool), dtype=bool)
        for slot, f in sorted(outs, key=lambda o: -o[1]):
            code = -1 if slot == n_cells + 1 else (withheld_code if slot == n_cells else int(areas[slot]))
            if yesterday is not None and code >= 0:
                rank = np.argsort(~(free & (yesterday[pool] == code)), kind="stable")
            else:
                rank = np.arange(len(pool))
            chosen = rank[free[rank]][:f]
            result[pool[chosen]] = code
            free[chosen] = False
    return result


def test_a_permutation_of_one_draws_nothing():
    """`_allocate` does not shuffle a state of one trajectory: the generator must not move for it."""
    rng = np.random.default_rng(7)
    state = rng.bit_generator.state
    rng.permutation(1)
    rng.permutation(0)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("with_yesterday", [True, False])
def test_allocation_is_the_reference_allocation(seed, with_yesterday):
    """Random states, flows (every state's supply split over published areas, WITHHELD and ABSENT, in a random
    order, a (state, slot) found more than once) and day-before areas: the same slot per trajectory, and the
    generator left where the reference leaves it (the rest of the recovery draws from it)."""
    from spatial_release.risk.attack import _allocate

    rng = np.random.default_rng(seed)
    n, n_states, n_cells, n_areas = 400, int(rng.integers(5, 300)), int(rng.integers(1, 30)), 60
    state_of = rng.integers(0, n_states, n)
    areas = np.sort(rng.choice(n_areas, n_cells, replace=False))
    yesterday = rng.choice(np.concatenate([areas, [-1, n_areas]]), n) if with_yesterday else None
    flows: dict[tuple[int, int], int] = {}
    entries: list[tuple[int, int, int]] = []  # as found, a (state, slot) repeated: it adds to the first
    for s in rng.permutation(np.unique(state_of)):
        left = int((state_of == s).sum())
        while left:
            slot = int(rng.integers(0, n_cells + 2))
            f = int(rng.integers(1, left + 1))
            flows[(int(s), slot)] = flows.get((int(s), slot), 0) + f
            entries.append((int(s), slot, f))
            left -= f
    for shuffled in (False, True):  # states' entries interleaved: a state is still served at its first flow
        order = np.arange(len(entries))
        if shuffled:
            order = rng.permutation(len(entries))
            flows = {}
            for s, slot, f in (entries[i] for i in order):
                flows[(s, slot)] = flows.get((s, slot), 0) + f
        flow_state, flow_slot, flow_size = (np.array([entries[i][c] for i in order], dtype=np.int64) for c in range(3))
        mine, theirs = np.random.default_rng(seed + 100), np.random.default_rng(seed + 100)
        mine.random(int(shuffled))  # and from a generator with half a 64-bit draw held back
        theirs.random(int(shuffled))
        mine.integers(0, 2**32, int(shuffled), dtype=np.uint32)
        theirs.integers(0, 2**32, int(shuffled), dtype=np.uint32)
        got = _allocate(flow_state, flow_slot, flow_size, state_of, areas, n_areas, yesterday, mine)
        want = _allocate_reference(dict(flows), state_of, areas, n_areas, yesterday, theirs)
        np.testing.assert_array_equal(got, want)
        assert mine.bit_generator.state == theirs.bit_generator.state


def _lp_optimum(n_states, n_slots, arc_state, arc_slot, arc_cost, hub_areas, supply, lo, hi):
    """The same transportation problem as a linear program (scipy's HiGHS), written out independently of
    risk.attack: one column per arc (and per hub arc), supply rows as equalities, demand rows between lo and hi,
    the hub's balance at 0. Returns the optimal cost, or None when infeasible."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, vstack

    n_arcs = len(arc_state)
    n_hub_in, n_hub_out = (n_states, hub_areas) if hub_areas else (0, 0)
    n_cols = n_arcs + n_hub_in + n_hub_out
    rows, cols, vals = [arc_state, n_states + arc_slot], [np.arange(n_arcs)] * 2, [np.ones(n_arcs)] * 2
    if hub_areas:
        hub_row = n_states + n_slots
        into, out = n_arcs + np.arange(n_states), n_arcs + n_states + np.arange(hub_areas)
        rows += [
            np.arange(n_states),
            np.full(n_states, hub_row),
            n_states + np.arange(hub_areas),
            np.full(hub_areas, hub_row),
        ]
        cols += [into, into, out, out]
        vals += [np.ones(n_states), np.ones(n_states), np.ones(hub_areas), -np.ones(hub_areas)]
    n_rows = n_states + n_slots + (1 if hub_areas else 0)
    a = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, n_cols)).tocsr()
    cost = np.concatenate([arc_cost, np.full(n_hub_in, HUB_COST), np.zeros(n_hub_out)])
    row_lo = np.concatenate([supply, lo, [0.0] if hub_areas else []])
    row_hi = np.concatenate([supply, hi, [0.0] if hub_areas else []])
    a_ub = vstack([a, -a]).tocsr()
    b_ub = np.concatenate([row_hi, -row_lo])
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    return result.fun if result.status == 0 else None


@pytest.mark.parametrize("hub", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_the_min_cost_flow_is_a_feasible_plan_at_the_linear_programs_optimum(seed, hub):
    """The recovery's transportation problems are solved as a min-cost flow network (OR-Tools). On random
    problems with lower and upper demands, negative costs (the regularity pulls) and the hub: the flows are
    whole, send every state's supply, give every slot between its demands, and cost what scipy's linear program
    of the same problem says is optimal (to the rounding of costs). An infeasible problem raises."""
    from spatial_release.risk.attack import COST_UNITS, TransportNetwork

    rng = np.random.default_rng(seed)
    n_states, n_cells = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    n_slots = n_cells + 2
    per = int(rng.integers(1, n_cells + 1))
    near = np.stack([rng.choice(n_cells, per, replace=False) for _ in range(n_states)]).ravel()
    arc_state = np.concatenate([np.repeat(np.arange(n_states), per), np.arange(n_states), np.arange(n_states)])
    arc_slot = np.concatenate([near, np.full(n_states, n_cells), np.full(n_states, n_cells + 1)])
    arc_cost = np.round(rng.uniform(-2.0, 6.0, len(arc_state)), 6)
    supply = rng.integers(0, 20, n_states).astype(float)
    hi = rng.integers(0, 15, n_slots).astype(float)
    hi[-1] = supply.sum()  # ABSENT can take anyone, so most problems are feasible
    lo = np.floor(hi * rng.uniform(0, 1, n_slots))
    lo[-1] = 0.0
    hub_areas = n_cells if hub else 0
    network = TransportNetwork(n_states, n_slots, arc_state, arc_slot, arc_cost, hub_areas=hub_areas)
    optimum = _lp_optimum(n_states, n_slots, arc_state, arc_slot, arc_cost, hub_areas, supply, lo, hi)
    if optimum is None:
        with pytest.raises(RuntimeError, match="transportation problem"):
            network.solve(supply, lo, hi)
        return
    flow, into, out = network.solve(supply, lo, hi)
    assert flow.dtype == np.int64 and (flow >= 0).all()
    sent = np.bincount(arc_state, weights=flow, minlength=n_states) + (into if hub else 0)
    np.testing.assert_array_equal(sent, supply)
    got = np.bincount(arc_slot, weights=flow, minlength=n_slots)
    if hub:
        got[:n_cells] += out
        assert into.sum() == out.sum()
    assert (got >= lo).all() and (got <= hi).all()
    cost = float(arc_cost @ flow) + (HUB_COST * float(into.sum()) if hub else 0.0)
    assert cost == pytest.approx(optimum, abs=len(arc_state) * supply.sum() / COST_UNITS + 1e-9)


def test_an_infeasible_transportation_problem_raises():
    """More units than slots can hold: no plan exists, and the recovery says so instead of placing them."""
    from spatial_release.risk.attack import TransportNetwork

    network = TransportNetwork(1, 2, np.array([0, 0]), np.array([0, 1]), np.array([1.0, 1.0]))
    with pytest.raises(RuntimeError, match="transportation problem"):
        network.solve(np.array([5.0]), np.array([0.0, 0.0]), np.array([2.0, 2.0]))


def _stay_first_reference(view, states, areas, supply, demand_lo, demand_hi):
    """The stays as first written (a loop over the states, in order): {(state, slot): count}."""
    n_cells = len(areas)
    slot_of_area = {int(a): i for i, a in enumerate(areas)}
    last, was_absent = states[:, 0], states[:, 2].astype(bool)
    stays = {}
    for g in range(len(states)):
        if was_absent[g]:
            slot = n_cells + 1
        elif last[g] == view.withheld:
            slot = n_cells
        else:
            slot = slot_of_area.get(int(last[g]), -1)
        if slot < 0:
            continue
        keep = int(min(supply[g], demand_lo[slot]))
        if keep <= 0:
            continue
        stays[(g, slot)] = keep
        supply[g] -= keep
        demand_hi[slot] -= keep
        demand_lo[slot] = max(demand_lo[slot] - keep, 0.0)
    return stays


@pytest.mark.parametrize("seed", range(16))
def test_stays_are_the_reference_stays(seed):
    """`_stay_first` keeps, state by state, what the loop it replaced kept, and leaves the supply and the
    demands as it did: many states sharing a slot, demands they exhaust or not, never-seen and absent states,
    areas that are not published in the bucket, and no published area at all."""
    from spatial_release.risk.attack import _stay_first

    rng = np.random.default_rng(seed)
    n_areas = 40
    n_cells = 0 if seed == 0 else int(rng.integers(1, 12))
    areas = np.sort(rng.choice(n_areas, n_cells, replace=False))
    n_states = 1 if seed == 1 else int(rng.integers(1, 200))
    last = rng.choice(np.concatenate([areas, [-1, n_areas], rng.integers(0, n_areas, 3)]), n_states)
    states = np.stack(
        [last, np.full(n_states, -1), rng.random(n_states) < 0.2, np.full(n_states, -1), np.full(n_states, -1)], axis=1
    ).astype(np.int64)
    supply = rng.integers(1, 30, n_states).astype(float)
    demand_hi = rng.integers(0, 400, n_cells + 2).astype(float)
    demand_lo = np.floor(demand_hi * rng.uniform(0, 1, n_cells + 2))
    view = ReleaseView(1, np.zeros((n_areas, 2)), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(1), True)
    mine = [a.copy() for a in (supply, demand_lo, demand_hi)]
    theirs = [a.copy() for a in (supply, demand_lo, demand_hi)]
    state, slot, kept = _stay_first(view, states, areas, *mine)
    want = _stay_first_reference(view, states, areas, *theirs)
    assert list(zip(state.tolist(), slot.tolist(), kept.tolist())) == [(g, s, f) for (g, s), f in want.items()]
    for got_array, want_array in zip(mine, theirs):
        np.testing.assert_array_equal(got_array, want_array)


def _route_hub_reference(into, out):
    senders = [(int(s), int(f)) for s, f in enumerate(into) if f > 0]
    receivers = [(int(c), int(f)) for c, f in enumerate(out) if f > 0]
    routes, i, j = [], 0, 0
    while i < len(senders) and j < len(receivers):
        (s, fs), (c, fc) = senders[i], receivers[j]
        moved = min(fs, fc)
        routes.append((s, c, moved))
        senders[i], receivers[j] = (s, fs - moved), (c, fc - moved)
        i += senders[i][1] == 0
        j += receivers[j][1] == 0
    return routes


@pytest.mark.parametrize("seed", range(16))
def test_hub_routes_are_the_reference_routes(seed):
    """`_route_hub` pairs the flows through the hub as the two queues did: senders in state order fill the
    receivers in area order (equal running totals, zeros on either side, nothing through the hub)."""
    from spatial_release.risk.attack import _route_hub

    rng = np.random.default_rng(seed)
    into = rng.integers(0, 4, int(rng.integers(0, 30))) * (rng.random() < 0.9)
    out = np.zeros(int(rng.integers(1, 30)), dtype=np.int64)
    np.add.at(out, rng.integers(0, len(out), int(into.sum())), 1)
    state, area, flow = _route_hub(into.astype(np.int64), out)
    assert list(zip(state.tolist(), area.tolist(), flow.tolist())) == _route_hub_reference(into, out)


@pytest.mark.parametrize("seed", range(8))
def test_zone_owners_are_the_holders_of_the_zones_keys(seed):
    """`attack._zone_owners` (a lookup of each point's area) gives the trajectories np.isin found among the
    zone's keys: random trajectories' keys over steps x (areas + WITHHELD), zones of a few names, a zone no
    point is in, and trajectories without a point."""
    from spatial_release.arrays import distinct_sorted
    from spatial_release.risk.attack import _zone_owners

    rng = np.random.default_rng(seed)
    steps, n_areas, n_traj = int(rng.integers(1, 20)), int(rng.integers(1, 30)), int(rng.integers(1, 60))
    width = n_areas + 1
    area_zone = np.concatenate([rng.choice(np.array(["a", "b", "c"], dtype=object), n_areas), ["(withheld)"]])
    key_zone = area_zone[np.arange(steps * width) % width]
    sizes = rng.integers(0, 12, n_traj)
    unit_keys = np.concatenate(
        [np.sort(rng.choice(steps * width, min(int(n), steps * width), replace=False)) for n in sizes]
    ).astype(np.int64)
    unit_offsets = np.concatenate([[0], np.cumsum([min(int(n), steps * width) for n in sizes])])
    point_owner = np.repeat(np.arange(n_traj), np.diff(unit_offsets))
    for zone in ["a", "b", "c", "(withheld)", "nowhere"]:
        want = distinct_sorted(point_owner[np.isin(unit_keys, np.flatnonzero(key_zone == zone))])
        got = _zone_owners(point_owner, unit_keys % width, area_zone == zone, n_traj)
        assert got.dtype == want.dtype  # the same codes, the same type
        np.testing.assert_array_equal(got, want)


def test_linkage_in_chunks_of_a_few_candidates_gives_the_same_figures(monkeypatch):
    """The candidates are examined in chunks of about CANDIDATES (bounded memory), the fallback to the anchor
    alone too (its holders are not bounded by the rarest key's: on this city one fallback of the default chunks
    expands 20,296 candidates): with chunks of 20 every fallback chunk holds at most 20 candidates or is one
    row, and every target has the same figure as with the default chunks."""
    import sys

    from spatial_release.risk import attack

    inputs = regular_city(150, 16, 3, k=2)
    recovered = recover_trajectories(inputs[0], PARAMS)
    whole = attack_risk(*inputs, PARAMS, recovered)
    fallback_loads: list[list[int]] = []
    real = attack._row_chunks

    def spy(load):
        chunks = real(load)
        if sys._getframe(1).f_code.co_name == "_linkage":  # the fallback's chunks, not the jobs'
            fallback_loads.extend(load[chunk].tolist() for chunk in chunks)
        return chunks

    monkeypatch.setattr(attack, "_row_chunks", spy)
    monkeypatch.setattr(attack, "CANDIDATES", 20)
    chunked = attack_risk(*inputs, PARAMS, recovered)
    assert sum(len(loads) > 1 for loads in fallback_loads) > 0  # fallbacks of several rows ran, chunked
    assert all(sum(loads) <= 20 or len(loads) == 1 for loads in fallback_loads)
    assert whole.targets is not None and chunked.targets is not None
    for a, b in zip(whole.targets, chunked.targets):
        assert np.array_equal(a, b)
    assert [z.__dict__ for z in whole.zones] == [z.__dict__ for z in chunked.zones]


@pytest.mark.parametrize("hours", [None, 3])  # presence (additive), and visitors with its extra slots
def test_recovered_points_are_32_bit_codes_in_bucket_order(hours):
    """The recovery's points are held through the whole assessment as 32-bit codes (each bucket's narrowed as it
    is found, the steps built from the lengths): ascending steps within the view, trajectories and areas within
    their ranges (WITHHELD the last area code)."""
    kw = {} if hours is None else {"hours": hours}
    view, *_ = regular_city(150, 16, 1, k=2, **kw)
    recovered = recover_trajectories(view, PARAMS)
    assert view.additive == (hours is None)
    assert {recovered.traj.dtype, recovered.step.dtype, recovered.area.dtype} == {np.dtype(np.int32)}
    assert len(recovered.traj) == len(recovered.step) == len(recovered.area) > 0
    assert (np.diff(recovered.step) >= 0).all() and recovered.step.max() < view.steps
    assert recovered.traj.min() >= 0 and recovered.traj.max() < recovered.trajectories
    assert recovered.area.min() >= 0 and recovered.area.max() <= view.withheld
