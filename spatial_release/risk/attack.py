"""Risk measured by attacking the release: trajectory recovery from the published counts, linkage with the
adversary's known points, and membership inference. Domain code: no Dagster, no files.

What the attacker holds (`ReleaseView`): the published cell figures of one zoning per bucket (area, bucket,
count), the published bucket totals, where each area lies, and the measure. Nothing per unit.

**Trajectory recovery** (Xu et al., "Trajectory Recovery From Ash: User Privacy Is NOT Preserved in
Aggregated Mobility Data", WWW 2017). N trajectories (the largest bucket total) are chained bucket by bucket.
At each bucket the published counts are slots: one per unit counted in each published area, a `WITHHELD`
pseudo-area for the units the published figures do not place (under `presence` exactly the bucket total minus
the published cells: the attacker knows how many are hidden, not where), and `ABSENT` for the N - total
trajectories not seen in the bucket. Trajectories are linked to slots by one transportation problem per
bucket (a min-cost flow, OR-Tools; the paper's linear assignment with trajectories grouped by their state,
which is the same optimum: trajectories in one state have the same costs), whose costs are
  - the distance from the trajectory's last area (night, and every bucket of a day or longer: units stay);
  - in the daytime hours of sub-day buckets, the distance from its predicted area (last + last move: units
    keep going), the paper's daytime cost;
  - across days, regularity: an area where the trajectory was at the same time the day before costs one
    typical distance less (the paper links daily segments by their regularity; here every bucket is pulled
    towards the day before, which needs no separate day-linking pass), and the area where its day began
    costs one less again (units come back to where they spent the night);
  - a unit that was absent tends to stay absent, and a hidden one hidden (one unit of cost to change).
Under `visitors` a unit is in several areas per bucket and the counts add up to more than the bucket's units:
each trajectory first gets one area (the transportation problem with the published counts as capacities),
then each area's remaining slots go to the nearest trajectories not yet in it, so a recovered trajectory's
bucket is a set of areas, as a unit's is.

**Linkage.** The adversary knows p (area, bucket) points of a target, one in the anchor zone, drawn (seeded)
from the target's true trace with `estimator.draw_knowledge` (the same draws as the uniqueness bound). A
known point in a withheld area is known to the adversary, but the recovery can only place the target in
`WITHHELD` there. Candidates are the recovered trajectories consistent with every known point (with the
anchor alone when none is; with none of those, among all of them); the adversary picks one at random.
Success means the pick is the target's: among all true trajectories (seen as the attacker sees them: withheld
areas merged per bucket) the target's is the most similar to it (Jaccard over (area, bucket) points; a tie of t
trajectories counts 1/t), and it shows a published point of the target that the adversary did not know (a pick
that is WITHHELD wherever it is not what the adversary knew reveals nothing).

**Membership inference** (Pyrgelis, Troncoso, De Cristofaro, "Knock Knock, Who's There? Membership Inference
on Aggregate Location Data", NDSS 2018). The adversary says "in the data" when some recovered trajectory is
consistent with all the target's known points. Its advantage is the rate at which the test fires on the
release with the target (IN) minus the rate on the release without it (OUT), for the same knowledge. OUT is
taken leave-one-out on the recovered trajectories: without the target, the trajectories recovered from it
(those whose best match it is) are gone, and the test fires only if another consistent trajectory is left.
So the advantage is the share of knowledge sets whose one consistent trajectory is the target's own.
(Shadow non-members made of other units' points were tried first: they are not coherent traces, so the test
told traces from chimeras, not members from non-members: 0.55 on the demo's weekly 500 m cells.)

Per zone: `linkage` (mean success probability over the zone's targets), `membership` (advantage, floored at
0) and `accuracy` of the recovery (share of a recovered trajectory's points that its best-matching true
trajectory holds, averaged). The figures are lower bounds on what a better attacker could do; the
uniqueness of each unit's published keys (`estimator`) is the upper bound and stays in the report.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import pandas as pd
from ortools.graph.python import min_cost_flow

from spatial_release import tasks
from spatial_release.arrays import distinct_sorted, narrow_codes
from spatial_release.risk import kernels
from spatial_release.risk.estimator import Draws, KeySets, RiskParams, draw_knowledge

STAY_COST = 1.0  # cost of leaving ABSENT or WITHHELD, or of entering them: about one typical distance
REGULARITY = 1.0  # the pull of where a trajectory was at the same time the day before (Xu's across-day link)
HOME_PULL = 1.0  # the pull of where its day began (bench/RESULTS.md: what it adds to the recovery)
HUB_COST = 4.0  # the long way round in a sparse problem: any area, at four typical distances
MAX_STATES = 2_000  # trajectory states per bucket above which the day-before and home pulls leave the states
# states x areas up to which every arc is in the transportation problem; above, the sparse problem (24 nearest
# areas and the hub) recovers as well, faster (bench/RESULTS.md)
FULL_ARCS = 5_000
BEST_PAIRS = 2_000_000  # (trajectory, unit) pairs examined at a time when matching trajectories to units
TARGETED_PAIRS = 32_000_000  # the same, where only the sampled targets' ties are read (`best_matches`)


@dataclass(frozen=True)
class AttackParams:
    points: int = 4  # p, points of the target's trace the adversary knows
    draws: int = 10  # knowledge sets per target and anchor zone
    seed: int = 20180101
    neighbours: int = 24  # arcs from a state to its nearest areas in a sparse transportation problem
    # Xu's daytime cost (distance from last + last move) in the view's daytime buckets. Off by default:
    # on a regular 300-unit city at 250 m x 1 h it lowered recovery accuracy from 0.58 to 0.43 (units jump
    # between anchors more than they keep going), and the gate runs the stronger variant.
    velocity: bool = False

    def knowledge(self) -> RiskParams:
        return RiskParams(points=self.points, draws=self.draws, seed=self.seed)


@dataclass(frozen=True)
class ReleaseView:
    """What the public sees of one zoning: the published figures of its finest level per bucket.

    steps: number of buckets (0..T-1 in time order); xy: (L, 2) coordinates in metres of the L areas;
    figure_step / figure_area / figure_count: the published area figures; totals[t]: the published number of
    distinct units in bucket t, or -1 when withheld; additive: presence (one area per unit and bucket);
    daytime[t]: units move in bucket t (sub-day buckets in the day); day_lag: buckets per day (None for
    buckets of a day or more)."""

    steps: int
    xy: np.ndarray
    figure_step: np.ndarray
    figure_area: np.ndarray
    figure_count: np.ndarray
    totals: np.ndarray
    additive: bool
    daytime: np.ndarray | None = None
    day_lag: int | None = None

    @property
    def areas(self) -> int:
        return len(self.xy)

    @property
    def withheld(self) -> int:
        """The pseudo-area of units the published figures do not place (code L)."""
        return self.areas


@dataclass
class Recovered:
    """The recovered trajectories as points (trajectory, bucket, area; area L is WITHHELD), int32 codes where
    they fit (`arrays.narrow_codes`)."""

    trajectories: int
    traj: np.ndarray
    step: np.ndarray
    area: np.ndarray
    seconds: float = 0.0


@dataclass
class ZoneAttack:
    zone: str
    units: int
    linkage: float  # mean probability that the adversary's pick is the target's trajectory
    membership: float  # advantage of the membership test over guessing (TPR - FPR, >= 0)
    accuracy: float  # recovery accuracy over the trajectories that hold a point in the zone


@dataclass
class AttackReport:
    zones: list[ZoneAttack] = field(default_factory=list)
    trajectories: int = 0
    accuracy: float = 0.0
    seconds: float = 0.0
    # per (unit, zone) target: unit code, zone name, linkage success (mean over the draws). Per-unit figures:
    # never serialised.
    targets: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def to_json(self) -> dict:
        return {
            "zones": [z.__dict__ for z in self.zones],
            "trajectories": self.trajectories,
            "accuracy": self.accuracy,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: dict) -> AttackReport:
        return cls(
            [ZoneAttack(**z) for z in data["zones"]],
            int(data["trajectories"]),
            float(data["accuracy"]),
            float(data["seconds"]),
        )


# --- recovery -----------------------------------------------------------------------------------------------


def _units_in(view: ReleaseView, step: int, counts: np.ndarray) -> int:
    if view.totals[step] >= 0:
        return int(view.totals[step])
    return int(counts.sum() if view.additive else (counts.max() if len(counts) else 0))


class RecoveryStopped(Exception):
    """The recovery was told to stop (`recover_trajectories`'s `stop`) before it ended: nothing was recovered."""


def recover_trajectories(
    view: ReleaseView, params: AttackParams = AttackParams(), stop: threading.Event | None = None
) -> Recovered:
    """Chain the published counts into trajectories, bucket by bucket (see the module docstring). `stop`: when
    set, the recovery raises RecoveryStopped at its next bucket (a recovery started before anyone knew whether
    it would be read)."""
    started = time.perf_counter()
    order = np.lexsort((view.figure_area, view.figure_step))
    f_step, f_area, f_count = view.figure_step[order], view.figure_area[order], view.figure_count[order]
    bounds = np.searchsorted(f_step, np.arange(view.steps + 1))
    per_step = [
        (f_area[bounds[t] : bounds[t + 1]], f_count[bounds[t] : bounds[t + 1]].astype(np.int64)) for t in range(view.steps)
    ]
    n = max([_units_in(view, t, c) for t, (_, c) in enumerate(per_step)] + [0])
    if n == 0:  # nothing published at this resolution: nothing to chain
        empty = np.zeros(0, dtype=np.int64)
        return Recovered(0, empty, empty, empty, time.perf_counter() - started)
    scale = _typical_distance(view.xy)
    rng = np.random.default_rng(params.seed)
    last = np.full(n, -1, dtype=np.int64)  # last area (-1: never seen; L: withheld)
    prev = np.full(n, -1, dtype=np.int64)
    absent = np.ones(n, dtype=bool)
    lag = view.day_lag or 0
    ring = np.full((max(lag, 1), n), -1, dtype=np.int64)  # where each trajectory was `lag` buckets ago
    points: list[tuple[np.ndarray, np.ndarray]] = []
    for t, (areas, counts) in enumerate(per_step):
        if stop is not None and stop.is_set():
            raise RecoveryStopped(f"the recovery was stopped at bucket {t} of {view.steps}")
        moving = params.velocity and view.daytime is not None and bool(view.daytime[t])
        yesterday = ring[t % lag] if lag else None
        home = ring[0] if lag else None  # where the trajectory was in the day's first bucket
        primary = _link_step(
            view,
            n,
            areas,
            counts,
            _units_in(view, t, counts),
            last,
            prev,
            absent,
            moving,
            yesterday,
            scale,
            rng,
            params.neighbours,
            home,
        )
        present = primary >= 0
        points.append((narrow_codes(np.flatnonzero(present)), narrow_codes(primary[present])))
        if not view.additive:
            extra_traj, extra_area = _extra_slots(view, areas, counts, primary, scale)
            points.append((narrow_codes(extra_traj), narrow_codes(extra_area)))
        prev = np.where(present, last, prev)
        last = np.where(present, primary, last)
        absent = ~present
        if lag:
            ring[t % lag] = primary
    # held through the whole assessment (at 50 M pings 40 M points): 32-bit codes where every code fits, each
    # bucket's as it is found and the steps from the lengths, so that no int64 copy of every point is held beside
    # them (the recovery's process grew from 0.8 to 2.0 GB at its end at 50 M pings, bench/RESULTS.md)
    lengths = np.array([len(found) for found, _ in points], dtype=np.int64)
    traj = _narrow(np.concatenate([found for found, _ in points] or [np.zeros(0, dtype=np.int64)]))
    area = _narrow(np.concatenate([where for _, where in points] or [np.zeros(0, dtype=np.int64)]))
    del points
    bucket_of_part = np.arange(len(lengths), dtype=np.int64) // (1 if view.additive else 2)
    step = _narrow(np.repeat(narrow_codes(bucket_of_part), lengths))
    seconds = time.perf_counter() - started
    return Recovered(n, traj, step, area, seconds)


def _narrow(codes: np.ndarray) -> np.ndarray:
    """`narrow_codes`, without copying codes already 32-bit."""
    return codes if codes.dtype == np.int32 else narrow_codes(codes)


def _typical_distance(xy: np.ndarray) -> float:
    """The median distance between areas (a sample of pairs): costs are in units of it."""
    if len(xy) < 2:
        return 1.0
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, len(xy), 4096), rng.integers(0, len(xy), 4096)
    d = np.hypot(*(xy[a] - xy[b]).T)
    d = d[d > 0]
    return float(np.median(d)) if len(d) else 1.0


def _link_step(
    view: ReleaseView,
    n: int,
    areas: np.ndarray,
    counts: np.ndarray,
    units: int,
    last: np.ndarray,
    prev: np.ndarray,
    absent: np.ndarray,
    moving: bool,
    yesterday: np.ndarray | None,
    scale: float,
    rng: np.random.Generator,
    neighbours: int,
    home: np.ndarray | None = None,
) -> np.ndarray:
    """Each trajectory's area in this bucket (-1 absent, L withheld), by one transportation problem between
    trajectory states and the bucket's slots."""
    withheld_code = view.withheld
    units = min(units, n)
    ref_prev = prev if moving else np.full(n, -1, dtype=np.int64)
    states, state_of, coarse = _states(view, n, last, ref_prev, absent, yesterday, home)
    supply = np.bincount(state_of, minlength=len(states)).astype(float)
    published = int(counts.sum())
    hidden = max(units - published, 0) if view.additive else units  # visitors: at most every active unit
    cell_cap = counts.astype(float)
    demand_lo = np.concatenate(
        [cell_cap if view.additive else np.zeros(len(counts)), [hidden if view.additive else 0.0], [float(n - units)]]
    )
    demand_hi = np.concatenate([cell_cap, [float(hidden)], [float(n - units)]])
    if view.additive and published > units:  # inconsistent figures: let the cells take fewer
        demand_lo[: len(counts)] = 0.0
    flows = [_stay_first(view, states, areas, supply, demand_lo, demand_hi)] if coarse else []
    live = np.flatnonzero(supply > 0)
    if len(live):
        cost_cells = _state_costs(view, states[live], areas, moving, scale)
        g, slot, f = _transport(cost_cells, states[live], supply[live], demand_lo, demand_hi, withheld_code, neighbours)
        flows.append((live[g], slot, f))
    # the stays first, then the moves: the order in which `_allocate` serves the states and their ties
    flow_state, flow_slot, flow_size = (
        np.concatenate([part[i] for part in flows] or [np.zeros(0, dtype=np.int64)]) for i in range(3)
    )
    return _allocate(flow_state, flow_slot, flow_size, state_of, areas, withheld_code, yesterday, rng)


def _states(
    view: ReleaseView,
    n: int,
    last: np.ndarray,
    ref_prev: np.ndarray,
    absent: np.ndarray,
    yesterday: np.ndarray | None,
    home: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """The trajectories' states (last area, previous area when moving, absent, where it was the day before,
    where its day began) and each trajectory's state. Above MAX_STATES states, too many trajectories have
    distinct histories for one problem per bucket: the states keep only where each trajectory is (and was,
    and whether it was absent), and the day-before regularity acts inside each state, when its trajectories
    are given their slots (`_allocate`): a weaker attacker, so a lower figure (bench/RESULTS.md says at
    which scale). Returns (states, state of each trajectory, coarse)."""
    none = np.full(n, -1, dtype=np.int64)
    routine = yesterday if yesterday is not None else none
    start = home if home is not None else none
    width = view.areas + 2
    coarse_key = ((last + 1) * width + (ref_prev + 1)) * 2 + absent.astype(np.int64)
    if yesterday is not None or home is not None:
        codes, state_of = _distinct_rows(np.stack([coarse_key, routine, start], axis=1))
        if len(codes) <= MAX_STATES:
            coarse_of = codes[:, 0]
            states = np.stack(
                [coarse_of // 2 // width - 1, coarse_of // 2 % width - 1, coarse_of % 2, codes[:, 1], codes[:, 2]], axis=1
            )
            return states, state_of.ravel(), False
    codes, state_of = kernels.distinct_inverse(coarse_key)
    states = np.stack(
        [codes // 2 // width - 1, codes // 2 % width - 1, codes % 2, np.full(len(codes), -1), np.full(len(codes), -1)],
        axis=1,
    )
    return states, state_of.ravel(), True


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(rows, axis=0, return_inverse=True) of integer rows, through one int64 code per row that
    sorts as the rows do (each column shifted to start at 0, in mixed radix): np.unique over rows is a large
    share of the recovery. Rows whose code would not fit go the slow way."""
    # a column at a time: rows.min(axis=0) of a tall row-major array reads it many times slower
    columns = range(rows.shape[1])
    low = np.array([rows[:, c].min() for c in columns] if len(rows) else np.zeros(rows.shape[1]), dtype=np.int64)
    span = np.array([rows[:, c].max() for c in columns] if len(rows) else low, dtype=np.int64) - low + 1
    if float(np.prod(span.astype(float))) >= 2.0**62:
        codes, inverse = np.unique(rows, axis=0, return_inverse=True)
        return codes, inverse.ravel()
    code = np.zeros(len(rows), dtype=np.int64)
    for column in range(rows.shape[1]):
        code = code * int(span[column]) + (rows[:, column] - low[column])
    distinct, inverse = kernels.distinct_inverse(code)
    decoded = np.empty((len(distinct), rows.shape[1]), dtype=rows.dtype)
    rest = distinct.copy()
    for column in range(rows.shape[1] - 1, -1, -1):
        decoded[:, column] = rest % int(span[column]) + low[column]
        rest //= int(span[column])
    return decoded, inverse.ravel()


def _stay_first(
    view: ReleaseView,
    states: np.ndarray,
    areas: np.ndarray,
    supply: np.ndarray,
    demand_lo: np.ndarray,
    demand_hi: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coarse states only (no regularity pulls): keep every trajectory that can stay where it is (its area
    still has slots it must fill, hidden stays hidden, absent stays absent), before the transportation problem
    moves the rest. Only required slots (their lower demand) are filled so: a trajectory kept in an optional
    slot (a visitors area) could be the one an exact demand elsewhere needs. With distance costs (a metric) and
    fixed costs for leaving the withheld and absent slots, some optimal plan keeps that common mass in place, so
    this only makes the problem smaller: at night most trajectories stay. `supply` and the demands are reduced in
    place. Returns the stays as (state, slot, count), by state.

    The states take a slot's lower demand in state order, each as much as it has, until the demand is met: a
    state keeps min(its supply, what the states before it with the same slot left). `areas` ascend (the bucket's
    published areas in code order), a repeated area's last slot being its slot."""
    n_cells = len(areas)
    last, was_absent = states[:, 0], states[:, 2].astype(bool)
    at = np.searchsorted(areas, last, side="right") - 1
    found = (at >= 0) & (areas[np.maximum(at, 0)] == last) if n_cells else np.zeros(len(states), dtype=bool)
    slot = np.where(was_absent, n_cells + 1, np.where(last == view.withheld, n_cells, np.where(found, at, -1)))
    staying = np.flatnonzero(slot >= 0)
    order = staying[np.argsort(slot[staying], kind="stable")]  # by slot, then state
    slot_in, size = slot[order], supply[order]
    before = np.cumsum(size) - size  # the supply of the states before, then less that of the slots before
    first = np.concatenate([[True], slot_in[1:] != slot_in[:-1]]) if len(order) else np.zeros(0, dtype=bool)
    before -= np.maximum.accumulate(np.where(first, before, 0.0)) if len(order) else before
    keep = np.minimum(size, np.maximum(demand_lo[slot_in] - before, 0.0))  # integers held in floats: exact
    taken = keep > 0
    state, slot_taken, kept = order[taken], slot_in[taken], keep[taken]
    by_state = np.argsort(state, kind="stable")
    state, slot_taken, kept = state[by_state], slot_taken[by_state], kept[by_state]
    supply[state] -= kept
    total = np.bincount(slot_taken, weights=kept, minlength=len(demand_lo))
    demand_hi -= total
    np.maximum(demand_lo - total, 0.0, out=demand_lo)
    return state.astype(np.int64), slot_taken.astype(np.int64), kept.astype(np.int64)


def _state_costs(view: ReleaseView, states: np.ndarray, areas: np.ndarray, moving: bool, scale: float) -> np.ndarray:
    """Cost of sending a trajectory in each state to each published area of the bucket (states x areas)."""
    last, prev, was_absent = states[:, 0], states[:, 1], states[:, 2].astype(bool)
    known = (last >= 0) & (last < view.areas)
    ref = np.zeros((len(states), 2))
    ref[known] = view.xy[last[known]]
    if moving:
        going = known & (prev >= 0) & (prev < view.areas)
        ref[going] = 2 * view.xy[last[going]] - view.xy[prev[going]]
    target = view.xy[areas] if len(areas) else np.zeros((0, 2))
    cost = np.hypot(ref[:, None, 0] - target[None, :, 0], ref[:, None, 1] - target[None, :, 1]) / scale
    cost[~known] = STAY_COST  # never seen, or hidden: anywhere, at a typical distance
    cost[was_absent] += STAY_COST
    routine = states[:, 3]
    cost[routine[:, None] == areas[None, :]] -= REGULARITY  # where it was at this time the day before
    cost[states[:, 4][:, None] == areas[None, :]] -= HOME_PULL  # where its day began
    return cost


# np.argpartition's order among equal values is its implementation's, and numpy picks the implementation by the
# CPU's vector extensions. The same code and data gave Citi Bike 2018-Q1's worst ward bound 0.0128 on the machine
# that wrote the manual and 0.0087 on another (AVX2, no AVX-512); the ties these two choose were the only part of
# the recovery found to depend on the machine. They break ties by position, as a stable sort does, everywhere.


def smallest(values: np.ndarray, take: int) -> np.ndarray:
    """The positions of the `take` smallest values, ties to the lowest position, in the order of a stable sort
    (`np.argsort(values, kind="stable")[:take]`) in linear time but for the sort of the `take` chosen."""
    values = np.asarray(values)
    take = max(0, min(int(take), len(values)))
    if take == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(values, take - 1)[take - 1]  # the value at that rank is the same whatever the method
    below = np.flatnonzero(values < kth)
    tied = np.flatnonzero(values == kth)[: take - len(below)]
    chosen = np.concatenate([below, tied])
    return chosen[np.argsort(values[chosen], kind="stable")].astype(np.int64)


def nearest_columns(cost: np.ndarray, take: int) -> np.ndarray:
    """Per row of `cost` (no NaN), the columns of its `take` smallest costs, ties to the lowest column, in
    ascending column order: the same on every machine."""
    kth = np.partition(cost, take - 1, axis=1)[:, take - 1 : take]
    below = cost < kth
    tied = cost == kth
    room = take - below.sum(axis=1, keepdims=True)
    chosen = below | (tied & (np.cumsum(tied, axis=1) <= room))
    return np.nonzero(chosen)[1].reshape(len(cost), take).astype(np.int64)


def _transport(
    cost_cells: np.ndarray,
    states: np.ndarray,
    supply: np.ndarray,
    demand_lo: np.ndarray,
    demand_hi: np.ndarray,
    withheld_code: int,
    neighbours: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Min-cost flows from states to the slots (published areas, then WITHHELD, then ABSENT): (state, slot,
    flow) of the arcs with a flow, in arc order, then of the routes through the hub (a (state, slot) may come
    twice: once by its arc, once through the hub). Arcs to every area when states x areas is small; otherwise
    to each state's nearest areas, plus a hub reachable from every state at HUB_COST that reaches every area (so
    the problem is always feasible)."""
    n_states, n_cells = cost_cells.shape
    last, was_absent = states[:, 0], states[:, 2].astype(bool)
    cost_hidden = np.where(last == withheld_code, 0.0, STAY_COST) + np.where(was_absent, STAY_COST, 0.0)
    cost_absent = np.where(was_absent, 0.0, STAY_COST)
    if n_states * n_cells <= FULL_ARCS or n_cells <= neighbours:
        arc_state = np.repeat(np.arange(n_states), n_cells)
        arc_slot = np.tile(np.arange(n_cells), n_states)
        arc_cost = cost_cells.ravel()
        hub = False
    else:
        near = nearest_columns(cost_cells, neighbours)
        arc_state = np.repeat(np.arange(n_states), neighbours)
        arc_slot = near.ravel()
        arc_cost = cost_cells[arc_state, arc_slot]
        hub = True
    states_idx = np.arange(n_states)
    arc_state = np.concatenate([arc_state, states_idx, states_idx])
    arc_slot = np.concatenate([arc_slot, np.full(n_states, n_cells), np.full(n_states, n_cells + 1)])
    arc_cost = np.concatenate([arc_cost, cost_hidden, cost_absent])
    network = TransportNetwork(n_states, n_cells + 2, arc_state, arc_slot, arc_cost, hub_areas=n_cells if hub else 0)
    arc_flow, into_hub, out_of_hub = network.solve(supply, demand_lo, demand_hi)
    carried = np.flatnonzero(arc_flow > 0)
    state, slot, flow = arc_state[carried].astype(np.int64), arc_slot[carried].astype(np.int64), arc_flow[carried]
    if not hub:
        return state, slot, flow
    hub_state, hub_slot, hub_flow = _route_hub(into_hub, out_of_hub)
    return np.concatenate([state, hub_state]), np.concatenate([slot, hub_slot]), np.concatenate([flow, hub_flow])


def _route_hub(into: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair the flows through the hub (every route through it costs the same) into (state, area, flow) routes:
    the senders in state order fill the receivers in area order, as two queues (the routes are the pieces
    between the running totals of either side)."""
    senders, receivers = np.flatnonzero(into > 0), np.flatnonzero(out > 0)
    sent, received = np.cumsum(into[senders]), np.cumsum(out[receivers])
    ends = np.union1d(sent, received)
    ends = ends[ends <= min(sent[-1] if len(sent) else 0, received[-1] if len(received) else 0)]
    begins = np.concatenate([[0], ends[:-1]])[: len(ends)].astype(np.int64)
    state = senders[np.searchsorted(sent, begins, side="right")]
    area = receivers[np.searchsorted(received, begins, side="right")]
    return state.astype(np.int64), area.astype(np.int64), (ends - begins).astype(np.int64)


COST_UNITS = 1 << 20  # integer cost units per typical distance in the min-cost flow (costs are a few units)


@dataclass(frozen=True)
class TransportNetwork:
    """One bucket's transportation problem as a min-cost flow network: states -> slots -> a sink, and with
    `hub_areas` a hub reachable from every state at HUB_COST that reaches the first `hub_areas` slots at 0.

    Solved by OR-Tools' min-cost flow (an exact combinatorial algorithm on integers), not as a linear program:
    the problem is a network, its optimal flows are whole trajectories by construction, and a network algorithm
    solves it faster than a general LP solver at the same optimal cost (bench/RESULTS.md has the figures). Costs
    are rounded to 1/COST_UNITS of a typical distance. Where several plans are optimal an LP solver may return
    another one: the attacker is the same (the same objective), its tie-breaking is not."""

    n_states: int
    n_slots: int
    arc_state: np.ndarray
    arc_slot: np.ndarray
    arc_cost: np.ndarray
    hub_areas: int = 0

    def solve(
        self, supply: np.ndarray, demand_lo: np.ndarray, demand_hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flows of the arcs, into the hub per state and out of it per area, of a plan that sends each state's
        `supply` and gives each slot between `demand_lo` and `demand_hi`, at the least cost. A slot's lower
        demand is taken out of the network first (the slot must receive it; the sink receives that much less),
        the standard reduction of lower bounds."""
        if self.n_states == 0:
            return np.zeros(len(self.arc_state), dtype=np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        supply_i, lo, hi = (np.rint(v).astype(np.int64) for v in (supply, demand_lo, demand_hi))
        hub_node = self.n_states + self.n_slots
        sink = hub_node + 1
        total = int(supply_i.sum())
        slots = np.arange(self.n_slots)
        hub_states, hub_areas = np.arange(self.n_states if self.hub_areas else 0), np.arange(self.hub_areas)
        tails = np.concatenate([self.arc_state, hub_states, np.full(len(hub_areas), hub_node), self.n_states + slots])
        heads = np.concatenate(
            [
                self.n_states + self.arc_slot,
                np.full(len(hub_states), hub_node),
                self.n_states + hub_areas,
                np.full(self.n_slots, sink),
            ]
        )
        capacity = np.concatenate(
            [np.full(len(self.arc_state) + len(hub_states) + len(hub_areas), total), np.maximum(hi - lo, 0)]
        )
        cost = np.concatenate([self.arc_cost, np.full(len(hub_states), HUB_COST), np.zeros(len(hub_areas) + self.n_slots)])
        network = min_cost_flow.SimpleMinCostFlow()
        arcs = network.add_arcs_with_capacity_and_unit_cost(
            tails.astype(np.int32),
            heads.astype(np.int32),
            capacity.astype(np.int64),
            np.rint(cost * COST_UNITS).astype(np.int64),
        )
        node_supply = np.zeros(sink + 1, dtype=np.int64)
        node_supply[: self.n_states] = supply_i
        node_supply[self.n_states : hub_node] = -lo
        node_supply[sink] = int(lo.sum()) - total
        network.set_nodes_supplies(np.arange(sink + 1, dtype=np.int32), node_supply)
        status = network.solve()
        if status != network.OPTIMAL:
            raise RuntimeError(f"trajectory recovery: the transportation problem ended with min-cost flow status {status}")
        flow = np.asarray(network.flows(arcs), dtype=np.int64)
        n_arcs, n_hub = len(self.arc_state), len(hub_states)
        return flow[:n_arcs], flow[n_arcs : n_arcs + n_hub], flow[n_arcs + n_hub : n_arcs + n_hub + len(hub_areas)]


def _allocate(
    flow_state: np.ndarray,
    flow_slot: np.ndarray,
    flow_size: np.ndarray,
    state_of: np.ndarray,
    areas: np.ndarray,
    withheld_code: int,
    yesterday: np.ndarray | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Each trajectory's slot from its state's flows (entries (state, slot, size) in the order they were found,
    a repeated (state, slot) adding to its first): within a state, trajectories that were in an area the day
    before take that area's slots first (regularity), the others in a seeded random order.

    The states are served in the order of their first flow, each shuffled then (`rng.permutation` of its
    trajectories, in trajectory order); a state's slots are served largest flow first (ties in the order of
    their first flow); each takes its flow from the state's free trajectories in the shuffled order, those that
    were in its area the day before first. A state of one trajectory draws nothing from the generator
    (`kernels.allocate_flows`; `tests/test_attack.py` checks it against the generator and a reference
    allocation)."""
    slot_codes = np.concatenate([np.asarray(areas, dtype=np.int64), [withheld_code, -1]])
    return kernels.allocate_flows(flow_state, flow_slot, flow_size, state_of, slot_codes, yesterday, rng)


def _extra_slots(
    view: ReleaseView, areas: np.ndarray, counts: np.ndarray, primary: np.ndarray, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """Visitors: each area's slots left after the first pass go to the nearest active trajectories not in it."""
    used = np.bincount(primary[(primary >= 0) & (primary < view.areas)], minlength=view.areas)
    active = np.flatnonzero(primary >= 0)
    placed = (primary[active] >= 0) & (primary[active] < view.areas)
    ref = np.zeros((len(active), 2))
    ref[placed] = view.xy[primary[active][placed]]
    traj, area = [], []
    for a, c in zip(areas, counts):
        left = int(c) - int(used[a])
        if left <= 0 or not len(active):
            continue
        d = np.where(placed, np.hypot(*(ref - view.xy[a]).T) / scale, STAY_COST)
        d[primary[active] == a] = np.inf
        take = min(left, int(np.isfinite(d).sum()))
        chosen = smallest(d, take)
        traj.append(active[chosen])
        area.append(np.full(len(chosen), a, dtype=np.int64))
    return (
        np.concatenate(traj) if traj else np.zeros(0, dtype=np.int64),
        np.concatenate(area) if area else np.zeros(0, dtype=np.int64),
    )


# --- linkage and membership ---------------------------------------------------------------------------------


NARROW_BELOW = 2**31  # owners and keys numbered below it are held as 32-bit codes (`_sets`)


def _sets(owner: np.ndarray, key: np.ndarray, n_owners: int, n_keys: int, key_zone: np.ndarray) -> KeySets:
    """The key sets of the distinct (owner, key) pairs: what KeySets.from_codes builds, from one sort of the
    pair codes (they come out by owner then key) and a counting sort by key, not two lexsorts."""
    # 32-bit codes where they fit, as the release's own key sets are held (`estimator.KeySets`): the true and the
    # recovered key sets are held through the assessment (at 50 M pings 40 M pairs each, both ways)
    code = np.int32 if max(n_owners, n_keys) < NARROW_BELOW else np.int64
    # the pair codes in one array, multiplied and added in place: the expression's temporaries were three arrays
    # of 8 bytes per pair at once (bench/RESULTS.md)
    codes = owner.astype(np.int64)
    codes *= n_keys
    codes += key
    pairs = distinct_sorted(codes)
    del codes
    if not len(pairs):
        return KeySets(
            key_zone,
            np.zeros(n_owners + 1, dtype=np.int64),
            np.zeros(0, dtype=code),
            np.zeros(n_keys + 1, dtype=np.int64),
            np.zeros(0, dtype=code),
        )
    keys = (pairs % n_keys).astype(code)
    unit_offsets = KeySets.offsets(np.bincount(pairs // n_keys, minlength=int(pairs[-1] // n_keys) + 1))
    del pairs
    return KeySets(key_zone, unit_offsets, keys, *kernels.key_major(unit_offsets, keys, len(key_zone), code))


def _padded(sets: KeySets, n_owners: int) -> KeySets:
    """`sets` with owners numbered up to n_owners (owners with no key get empty rows)."""
    missing = n_owners - sets.units
    if missing <= 0:
        return sets
    offsets = np.concatenate([sets.unit_offsets, np.full(missing, sets.unit_offsets[-1])])
    return KeySets(sets.key_zone, offsets, sets.unit_keys, sets.key_offsets, sets.key_units)


def best_matches(
    recovered: KeySets,
    truth: KeySets,
    hidden_key: np.ndarray,
    linked: Linked | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For every recovered trajectory, the true units most similar to it (Jaccard over view keys): pairs
    (trajectory, unit) of every tie with the number of published keys (not `hidden_key`, the WITHHELD ones)
    the two share, and each trajectory's best Jaccard and precision (share of its points the best unit
    holds). The trajectories are matched in slices of about BEST_PAIRS candidate pairs, each independent of
    the others: here, or as Spark tasks when the context runs on Spark (`tasks`; the key sets broadcast
    once), merged in slice order either way.

    `linked` (`_linked_targets`): per trajectory, the only units whose ties with it are read.
    A trajectory whose best match none of its own targets ties is dropped as soon as the walk of its postings
    shows it (`kernels.targets_best_slice`): no pair, NaN for its best Jaccard and precision; every other
    trajectory gets all of the above, every tie included."""
    # a targeted slice clears arrays over every unit, and walks only part of its pairs: fewer, larger slices
    slices = _trajectory_slices(recovered, truth, None if linked is None else TARGETED_PAIRS)
    common: tuple = (recovered, truth, hidden_key)
    if linked is not None:
        sets = kernels.MatchSets(truth.unit_offsets, truth.unit_keys, truth.key_offsets, truth.key_units)
        own = kernels.LinkedTargets(
            sets, linked.offsets, linked.units, linked.guessing, linked.key_offsets, linked.key_units
        )
        common = (*common, sets, own)
    spark = tasks.spark_tasks()
    if spark is None:  # threads: the kernel holds no GIL, the slices are independent
        with ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, len(slices)))) as pool:
            done = list(pool.map(lambda piece: _best_slice(common, piece), slices))
    else:
        done = list(spark.map_shared(_best_slice, common, slices))
    best_j = np.zeros(recovered.units)
    precision = np.zeros(recovered.units)
    for (at, end), (_, _, top, prec) in zip(slices, done):
        best_j[at:end], precision[at:end] = top, prec
    pairs = np.concatenate([d[0] for d in done]) if done else np.zeros(0, dtype=np.int64)
    shared = np.concatenate([d[1] for d in done]) if done else np.zeros(0)
    return pairs, shared, best_j, precision


def _trajectory_slices(recovered: KeySets, truth: KeySets, pairs: int | None = None) -> list[tuple[int, int]]:
    """Consecutive (first, end) trajectory ranges whose candidate pairs (the units of each of their keys) add
    up to about `pairs` (BEST_PAIRS by default) each (a trajectory with more is a slice of its own)."""
    pairs = BEST_PAIRS if pairs is None else pairs
    k_sizes = np.diff(truth.key_offsets)
    load = np.cumsum(k_sizes[recovered.unit_keys])
    slices, at = [], 0
    while at < recovered.units:
        base = int(load[recovered.unit_offsets[at] - 1]) if recovered.unit_offsets[at] else 0
        end_pair = int(np.searchsorted(load, base + pairs, side="right"))
        end = max(at + 1, int(np.searchsorted(recovered.unit_offsets, end_pair, side="right")) - 1)
        end = min(end, recovered.units)
        slices.append((at, end))
        at = end
    return slices


def _best_slice(common: tuple, piece: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`best_matches` of the trajectories at..end-1: their tie pairs, the published keys each pair shares,
    and each trajectory's best Jaccard and precision (`kernels.best_slice`; with the targets' postings in
    `common`, `kernels.targets_best_slice`)."""
    recovered, truth, hidden_key = common[:3]
    if len(common) == 5:
        return kernels.targets_best_slice(
            recovered.unit_offsets, recovered.unit_keys, common[3], hidden_key, common[4], piece[0], piece[1]
        )
    return kernels.best_slice(
        recovered.unit_offsets,
        recovered.unit_keys,
        truth.key_offsets,
        truth.key_units,
        truth.unit_offsets,
        hidden_key,
        piece[0],
        piece[1],
    )


def _candidates(sets: KeySets, keysets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, owner) of every owner of `sets` holding every key of a row of `keysets` (rows x width), by row
    and then owner (`kernels.holders`, from each row's rarest key)."""
    sizes = np.diff(sets.key_offsets)
    keysets = np.take_along_axis(keysets, np.argsort(sizes[keysets], axis=1, kind="stable"), axis=1)
    return kernels.holders(sets.key_offsets, sets.key_units, np.ascontiguousarray(keysets, dtype=np.int64))


def attack_risk(
    view: ReleaseView,
    unit: np.ndarray,
    step: np.ndarray,
    area: np.ndarray,
    zone_of_area: np.ndarray,
    params: AttackParams = AttackParams(),
    recovered: Recovered | Callable[[], Recovered] | None = None,
    only: np.ndarray | None = None,
    targets: tuple[np.ndarray, np.ndarray] | None = None,
    linkage: Callable[[], LinkageInputs] | None = None,
) -> AttackReport:
    """Per-zone linkage and membership figures of the release `view` for the true memberships (unit, step,
    area codes; units numbered 0..U-1), each area's risk zone (`zone_of_area`, strings). `only`: link only the
    knowledge sets of these units; `targets`: only those of these (unit code, zone name) entries (the others
    count as failures in either case; the knowledge drawn is the same as without them, so a target's success
    can be compared between two views, and equals its success when every unit is linked). Linking a sample,
    the trajectories are matched to the units only where a sampled knowledge set can pick them
    (`_linked_targets`): the per-zone figures and the recovery's accuracy then describe the sample alone.
    `recovered`: the view's recovery, or what waits for one under way elsewhere (called once the true key sets
    and the knowledge, which do not read it, are drawn); None: recovered here, beside them. `linkage`: what gives
    those key sets and knowledge (`linkage_inputs` of these memberships and `params`), computed elsewhere or on
    the call."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="attack-recovery") as pool:
        # the recovery (one core's work, step by step) beside the true key sets and the knowledge drawn from
        # them, which do not read it
        pending = pool.submit(recover_trajectories, view, params) if recovered is None else None
        found = linkage_inputs(view, unit, step, area, zone_of_area, params) if linkage is None else linkage()
        truth_view, key_zone, view_key_of, width, drawn = (
            found.truth_view,
            found.key_zone,
            found.view_key_of,
            found.width,
            found.drawn,
        )
        if pending is not None:
            recovered = pending.result()
            pending = None  # the future would hold the points to the end (see `del recovered` below)
        elif callable(recovered):  # a recovery under way elsewhere: waited for only now
            recovered = recovered()
    assert isinstance(recovered, Recovered)
    n_areas = view.areas
    n_units = int(unit.max()) + 1 if len(unit) else 0
    n_traj = recovered.trajectories
    rec = _padded(
        _sets(
            recovered.traj, recovered.step.astype(np.int64) * width + recovered.area, n_traj, view.steps * width, key_zone
        ),
        n_traj,
    )
    # the points are coded into `rec`: not held through the matches (at 50 M pings 40 M points); a recovery
    # handed over by `recovered()` is the caller's last reference
    del recovered
    hidden_key = np.arange(view.steps * width) % width == n_areas
    area_zone = np.concatenate([np.asarray(zone_of_area, dtype=object), ["(withheld)"]])
    rows = len(drawn.entry_zone) * params.draws
    success = np.zeros(rows)
    member_hit = np.zeros(rows, dtype=bool)
    out_hit = np.zeros(rows)
    target = np.zeros(rows, dtype=np.int64)
    sizes = np.diff(rec.key_offsets)
    linked = _linked_entries(drawn, only, targets)
    jobs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (rows, knowledge sets, targets)
    for row_ids, keysets in drawn.by_width:
        target[row_ids] = drawn.entry_unit[row_ids // params.draws]
        if linked is not None:
            keep = linked[row_ids // params.draws]
            row_ids, keysets = row_ids[keep], keysets[keep]
        view_sets = view_key_of[keysets.astype(np.int64)]  # withheld known points are WITHHELD to the recovery
        for part in _row_chunks(sizes[view_sets].min(axis=1)):  # bounded memory: candidates per chunk
            jobs.append((row_ids[part], view_sets[part], target[row_ids[part]]))
    # linking a sample, only the ties of each trajectory with the targets that can read them are read (`_score`,
    # `_guess_success` at the targets): the other trajectories' best matches are not measured, nor the sample's
    # accuracy (NaN)
    own = None if linked is None else _linked_targets(rec, truth_view, jobs, n_units)
    matched = rec if own is None else _only_trajectories(rec, own.matched)
    pairs, shared, _, precision = best_matches(matched, truth_view, hidden_key, own)
    ties = np.bincount(pairs // max(n_units, 1), minlength=rec.units) if len(pairs) else np.zeros(rec.units)
    guess = _guess_success(pairs, shared, ties, n_units, rec.units)
    for (chunk, _, _), (hit, fires_in, fires_out) in zip(
        jobs, _linkages(jobs, (rec, pairs, shared, ties, n_units, hidden_key, guess))
    ):
        success[chunk], member_hit[chunk], out_hit[chunk] = hit, fires_in, fires_out
    # the trajectories matched to units: every one, or those a sampled knowledge set can pick
    was_matched = np.diff(matched.unit_offsets) > 0 if linked is not None else np.ones(rec.units, dtype=bool)
    report = AttackReport(
        trajectories=n_traj,
        accuracy=float(precision[was_matched].mean()) if was_matched.any() else 0.0,
    )
    entry_success = success.reshape(-1, params.draws).mean(axis=1) if rows else np.zeros(0)
    report.targets = (drawn.entry_unit, np.asarray(drawn.zones, dtype=object)[drawn.entry_zone], entry_success)
    point_owner = np.repeat(np.arange(rec.units, dtype=rec.unit_keys.dtype), np.diff(rec.unit_offsets))
    point_area = rec.unit_keys % width
    for code, zone in enumerate(drawn.zones):
        mine = drawn.entry_zone == code
        if not mine.any():
            continue
        row_mask = np.repeat(mine, params.draws)
        advantage = max(0.0, float(member_hit[row_mask].mean() - out_hit[row_mask].mean()))
        owners = _zone_owners(point_owner, point_area, area_zone == zone, rec.units)
        owners = owners[was_matched[owners]]
        report.zones.append(
            ZoneAttack(
                zone=str(zone),
                units=int(mine.sum()),
                linkage=float(entry_success[mine].mean()),
                membership=advantage,
                accuracy=float(precision[owners].mean()) if len(owners) else 0.0,
            )
        )
    report.seconds = time.perf_counter() - started
    return report


@dataclass(frozen=True)
class LinkageInputs:
    """What the linkage reads besides the recovery (the true key sets as the view shows them, each key's zone, the
    view's key of each true key, the keys per bucket) and the knowledge drawn from the true key sets by cell.
    Those (`_truth_sets`'s first) are not kept: nothing reads them once the knowledge is drawn, and they are held
    through the whole assessment (at 50 M pings 0.8 GB of the RSS peak). Per-unit: internal."""

    truth_view: KeySets
    key_zone: np.ndarray
    view_key_of: np.ndarray
    width: int
    drawn: Draws


def linkage_inputs(
    view: ReleaseView,
    unit: np.ndarray,
    step: np.ndarray,
    area: np.ndarray,
    zone_of_area: np.ndarray,
    params: AttackParams,
) -> LinkageInputs:
    """The true key sets of the memberships against the view, and the knowledge drawn from them (`params`)."""
    truth_cells, truth_view, key_zone, view_key_of, width = _truth_sets(view, unit, step, area, zone_of_area)
    return LinkageInputs(truth_view, key_zone, view_key_of, width, draw_knowledge(truth_cells, params.knowledge()))


def _truth_sets(
    view: ReleaseView, unit: np.ndarray, step: np.ndarray, area: np.ndarray, zone_of_area: np.ndarray
) -> tuple[KeySets, KeySets, np.ndarray, np.ndarray, int]:
    """The true key sets by (bucket, area) and as the view shows them (withheld areas merged per bucket into
    WITHHELD, the last code of each bucket), each key's zone, the view's key of each true key, and the keys per
    bucket (the areas and WITHHELD)."""
    n_areas = view.areas
    width = n_areas + 1  # per bucket: the areas, then WITHHELD
    published = np.zeros(view.steps * width, dtype=bool)
    published[view.figure_step.astype(np.int64) * width + view.figure_area] = True
    true_key = step.astype(np.int64) * width + area
    view_key_of = np.arange(view.steps * width, dtype=np.int64)
    hidden = ~published
    view_key_of[hidden] = (view_key_of[hidden] // width) * width + n_areas  # withheld areas merge per bucket
    view_key_of = narrow_codes(view_key_of)  # held through the assessment: one code per (bucket, area)
    area_zone = np.concatenate([np.asarray(zone_of_area, dtype=object), ["(withheld)"]])  # WITHHELD last
    key_zone = area_zone[np.arange(view.steps * width) % width]  # a key's zone is its area's
    n_units = int(unit.max()) + 1 if len(unit) else 0
    truth_cells = _sets(unit, true_key, n_units, view.steps * width, key_zone)
    truth_view = _sets(unit, view_key_of[true_key], n_units, view.steps * width, key_zone)
    return truth_cells, truth_view, key_zone, view_key_of, width


def _zone_owners(point_owner: np.ndarray, point_area: np.ndarray, area_in_zone: np.ndarray, n_owners: int) -> np.ndarray:
    """The trajectories holding a point in the zone, ascending: owner and area code (key % width) of every
    recovered point, and which area codes (WITHHELD last) are in the zone. A key's zone is its area's, so this
    is a lookup per point, not a search of every point among the zone's keys (np.isin) for every zone. The
    owners are marked, not sorted: at 50 M pings the sort's copies of a zone's points were the release's RSS
    peak (9.3 -> 10.5 GB, sampled)."""
    seen = np.zeros(n_owners, dtype=bool)
    seen[point_owner[area_in_zone[point_area]]] = True
    return np.flatnonzero(seen)


def _linked_entries(
    drawn: Draws, only: np.ndarray | None, targets: tuple[np.ndarray, np.ndarray] | None
) -> np.ndarray | None:
    """Per drawn entry: whether it is linked (None: every entry)."""
    if only is None and targets is None:
        return None
    keep = np.ones(len(drawn.entry_unit), dtype=bool)
    if only is not None:
        keep &= np.isin(drawn.entry_unit, only)
    if targets is not None:
        zone_code = pd.Index(np.asarray(drawn.zones).astype(str)).get_indexer(np.asarray(targets[1]).astype(str))
        found = zone_code >= 0
        wanted = np.asarray(targets[0], dtype=np.int64)[found] * max(len(drawn.zones), 1) + zone_code[found]
        keep &= np.isin(drawn.entry_unit.astype(np.int64) * max(len(drawn.zones), 1) + drawn.entry_zone, wanted)
    return keep


class Linked(NamedTuple):
    """The targets whose ties with each trajectory `_linkage` reads (`_linked_targets`): per trajectory (offsets
    over the trajectories, then unit codes, ascending and distinct within each), per key (offsets over the keys,
    then unit codes: the targets of every trajectory holding the key) and the guessing targets (a flag per unit:
    of every trajectory); and which trajectories are matched at all."""

    offsets: np.ndarray
    units: np.ndarray
    key_offsets: np.ndarray
    key_units: np.ndarray
    guessing: np.ndarray
    matched: np.ndarray


def _linked_targets(
    rec: KeySets, truth_view: KeySets, jobs: list[tuple[np.ndarray, np.ndarray, np.ndarray]], n_units: int
) -> Linked:
    """The targets whose ties with each trajectory `_linkage` reads: the target of each linked knowledge set that
    can pick it (every trajectory holding all its points); with none, of each that keeps the holders of its first
    point (the anchor: the targets of every trajectory holding that key); with none of those either, it guesses
    among all of them, and only a trajectory sharing a point with the target can be the target's best match with
    a published point shown (`_guess_success`), so its ties with every trajectory holding one of its points are
    read (a guessing target). A trajectory is matched at all when it has a target of its own, holds an anchor or
    holds a guessing target's point. A tie of another target is never read: `_score` looks up (candidate, the
    row's own target) pairs only. The anchors are kept by key, not listed for each of their holders: a key held by
    thousands of trajectories would list each of them."""
    width = max(n_units, 1)
    picked: list[np.ndarray] = []
    anchored: list[np.ndarray] = []
    guessing = np.zeros(width, dtype=bool)
    for _, view_sets, target in jobs:
        row, owner = _candidates(rec, view_sets)
        picked.append(owner.astype(np.int64) * width + target[row].astype(np.int64))
        lone = np.flatnonzero(np.bincount(row, minlength=len(view_sets)) == 0)
        anchor = view_sets[lone, 0].astype(np.int64)
        held = np.diff(rec.key_offsets)[anchor] > 0
        anchored.append(anchor[held] * width + target[lone][held].astype(np.int64))
        guessing[target[lone][~held].astype(np.int64)] = True
    pairs = np.unique(np.concatenate(picked or [np.zeros(0, dtype=np.int64)]))
    per_trajectory = np.bincount(pairs // width, minlength=rec.units)
    by_key = np.unique(np.concatenate(anchored or [np.zeros(0, dtype=np.int64)]))
    per_key = np.bincount(by_key // width, minlength=rec.keys)
    matched = per_trajectory > 0
    owners = np.repeat(np.arange(truth_view.units), np.diff(truth_view.unit_offsets))
    guessed_keys = np.asarray(truth_view.unit_keys)[guessing[owners]] if guessing.any() else np.zeros(0, dtype=np.int64)
    keys = np.unique(np.concatenate([np.unique(by_key // width), guessed_keys.astype(np.int64)]))
    if len(keys):  # the holders of every anchor and of every point of a guessing target
        held_by = np.zeros(len(rec.key_units) + 1, dtype=np.int64)
        np.add.at(held_by, rec.key_offsets[keys], 1)
        np.add.at(held_by, rec.key_offsets[keys + 1], -1)
        matched[np.asarray(rec.key_units)[np.cumsum(held_by)[:-1] > 0]] = True
    return Linked(
        KeySets.offsets(per_trajectory),
        pairs % width,
        KeySets.offsets(per_key),
        by_key % width,
        guessing[:n_units],
        matched,
    )


def _only_trajectories(rec: KeySets, keep: np.ndarray) -> KeySets:
    """`rec` with every trajectory not in `keep` emptied (unit-major side only: what `best_matches` reads)."""
    counts = np.where(keep, np.diff(rec.unit_offsets), 0)
    owner = np.repeat(np.arange(rec.units), np.diff(rec.unit_offsets))
    return KeySets(rec.key_zone, KeySets.offsets(counts), rec.unit_keys[keep[owner]], rec.key_offsets, rec.key_units)


def without_unit(view: ReleaseView, unit: np.ndarray, step: np.ndarray, area: np.ndarray, target: int) -> ReleaseView:
    """The release of the same data without unit `target`, with the same published pattern: its published area
    figures and the bucket totals of its buckets one lower. The pattern is the release's own for a unit in no
    published figure at exactly k (its removal withholds none of its figures); for a unit in one, it is not."""
    mine = unit == target
    width = view.areas
    published = view.figure_step.astype(np.int64) * width + view.figure_area
    order = np.argsort(published, kind="stable")
    keys = np.unique(step[mine].astype(np.int64) * width + area[mine])
    at = np.searchsorted(published[order], keys)
    hit = at < len(order)
    hit[hit] = published[order][at[hit]] == keys[hit]
    counts = view.figure_count.copy()
    counts[order[at[hit]]] -= 1
    totals = view.totals.copy()
    steps = np.unique(step[mine])
    shown = steps[totals[steps] >= 0]
    totals[shown] -= 1
    return replace(view, figure_count=counts, totals=totals)


CANDIDATES = 2_000_000  # (knowledge set, trajectory) candidates examined at a time (bounds the memory)


def _row_chunks(load: np.ndarray) -> list[slice]:
    """Consecutive slices of rows whose candidates (the postings of each row's rarest key, an upper bound on
    what `_candidates` expands) add up to about CANDIDATES each (a row more than that is a chunk of its own).
    The fallback to the anchor alone is chunked the same way, on the anchor's postings (`_linkage`)."""
    chunks, start, total = [], 0, 0
    for i, n in enumerate(load.tolist()):
        if total and total + n > CANDIDATES:
            chunks.append(slice(start, i))
            start, total = i, 0
        total += n
    if start < len(load):
        chunks.append(slice(start, len(load)))
    return chunks


def _linkage_task(common: tuple, job: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rec, pairs, shared, ties, n_units, hidden_key, guess = common
    view_sets, target = job
    return _linkage(rec, view_sets, target, pairs, shared, ties, n_units, hidden_key, guess)


def _linkages(jobs: list[tuple[np.ndarray, np.ndarray, np.ndarray]], common: tuple) -> Iterator[tuple]:
    """`_linkage` of every chunk of knowledge sets, in order: here, or as Spark tasks when the context runs
    on Spark (the recovered trajectories and the matches, which every chunk reads, broadcast once)."""
    spark = tasks.spark_tasks()
    if spark is None:  # threads: the kernels hold no GIL, the chunks are independent
        with ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, len(jobs)))) as pool:
            yield from pool.map(lambda job: _linkage_task(common, (job[1], job[2])), jobs)
        return
    yield from spark.map_shared(_linkage_task, common, [(view_sets, target) for _, view_sets, target in jobs])


def _guess_success(pairs: np.ndarray, shared: np.ndarray, ties: np.ndarray, n_units: int, n_traj: int) -> np.ndarray:
    """Per unit: the probability that a trajectory picked at random among all recovered ones is its own and
    shows one of its published points (the adversary's guess when nothing fits its knowledge). No
    trajectory, or none that shows anything, is a guess that never succeeds."""
    guess = np.zeros(max(n_units, 1))
    if not len(pairs) or not n_traj:
        return guess
    traj, unit = pairs // max(n_units, 1), pairs % max(n_units, 1)
    np.add.at(guess, unit, (shared > 0) / np.maximum(ties[traj], 1))
    return guess / n_traj


def _linkage(
    rec: KeySets,
    view_sets: np.ndarray,
    target: np.ndarray,
    pairs: np.ndarray,
    shared: np.ndarray,
    ties: np.ndarray,
    n_units: int,
    hidden_key: np.ndarray,
    guess: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # success, IN fires, P(OUT fires)
    """Per knowledge set: the probability that a random consistent recovered trajectory is the target's (its
    best match, a tie of t counting 1/t); whether the membership test fires on the release (some trajectory
    is consistent with every point), and whether it would fire without the target (some consistent
    trajectory is not the target's: leaving the target out removes the trajectories recovered from it).
    With no consistent trajectory the adversary keeps those with the anchor; with none of those it guesses
    among all of them (`_guess_success`: about 1/N)."""
    success = guess[target].astype(float)
    row, owner = _candidates(rec, view_sets)
    known = _published_known(view_sets, hidden_key)
    counts, own = _score(success, row, owner, target, pairs, shared, ties, n_units, known)
    # OUT: the target's trajectory is gone; with two consistent trajectories or more one is left anyway, with
    # one it is left unless it was the target's (a tie of t units: the target's with probability 1/t)
    hit_in = counts > 0
    hit_out = np.where(counts >= 2, 1.0, np.where(counts == 1, 1.0 - own, 0.0))
    fallback = np.flatnonzero(~hit_in)
    anchors = view_sets[fallback, :1]
    # the anchor's holders are not bounded by the chunk's rarest key (`_row_chunks`): in chunks of their own (at
    # 10 M pings one fallback held 13 M candidates at once, bench/RESULTS.md)
    for part in _row_chunks(rec.key_offsets[anchors[:, 0] + 1] - rec.key_offsets[anchors[:, 0]]):
        rows = fallback[part]
        row, owner = _candidates(rec, anchors[part])
        partial = success[rows]
        known = _published_known(anchors[part], hidden_key)
        _score(partial, row, owner, target[rows], pairs, shared, ties, n_units, known)
        success[rows] = partial
    return success, hit_in, hit_out


def _published_known(view_sets: np.ndarray, hidden_key: np.ndarray) -> np.ndarray:
    """How many distinct published (not WITHHELD) points each knowledge set holds."""
    ordered = np.sort(view_sets, axis=1)
    distinct = np.concatenate([np.ones((len(ordered), 1), dtype=bool), ordered[:, 1:] != ordered[:, :-1]], axis=1)
    return (distinct & ~hidden_key[ordered]).sum(axis=1)


def _score(
    success: np.ndarray,
    row: np.ndarray,
    owner: np.ndarray,
    target: np.ndarray,
    pairs: np.ndarray,
    shared: np.ndarray,
    ties: np.ndarray,
    n_units: int,
    known: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """success[r] = mean over row r's candidates of [target among the candidate's best matches] / ties, for the
    rows with a candidate; returns each row's number of candidates and the expected number of them that are
    the target's (each candidate whose best matches tie t units, the target among them, counting 1/t).

    A pick counts as the target's only if it tells the adversary something: it shares with the target at
    least one published point beyond the `known` published points of the knowledge set. A trajectory that is
    only WITHHELD where it is not what the adversary knew (units of a zone with nothing published) reveals
    nothing, whoever it is."""
    rows = len(known)
    counts = np.bincount(row, minlength=rows)
    if not len(row):
        return counts, np.zeros(rows)
    wanted = owner * max(n_units, 1) + target[row]
    at = np.minimum(np.searchsorted(pairs, wanted), max(len(pairs) - 1, 0))
    found = (pairs[at] == wanted) if len(pairs) else np.zeros(len(row), dtype=bool)
    informative = found & (shared[at] > known[row]) if len(pairs) else found
    good = np.bincount(row, weights=informative / np.maximum(ties[owner], 1), minlength=rows)
    some = counts > 0
    success[some] = good[some] / counts[some]
    return counts, good
