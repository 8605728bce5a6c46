"""The advantage gate's inputs from the work area (`risk.advantage` is the assessment): the candidate's
published key sets with the key names, each key's published count, and the zones each unit was truly in.

The key sets are those the risk step keeps (a coded key set file: units, keys and pairs in one Parquet file);
the coarsening loop codes the candidate it has just written into a scratch file of the same kind. A proposal
(cells shown at a rung of the time ladder) has a file of (unit, key, cell_id) rows, coded here in memory.
"""

from __future__ import annotations

import functools
import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from spatial_release import tasks
from spatial_release.fileio import sha256_file
from spatial_release.levels import LEAF
from spatial_release.risk import kernels, keysets
from spatial_release.risk.advantage import (
    AdvantageParams,
    AdvantageReport,
    RecoverySuccess,
    ZoneAdvantage,
    assess_advantage,
    boundary_keys_per_unit,
)
from spatial_release.risk.attack import (
    AttackParams,
    LinkageInputs,
    Recovered,
    RecoveryStopped,
    attack_risk,
    linkage_inputs,
    recover_trajectories,
    without_unit,
)
from spatial_release.risk.estimator import KeySets
from spatial_release.risk.landscape import Landscape
from spatial_release.stages import reuse
from spatial_release.stages.attack import AttackInputs, attack_inputs
from spatial_release.stages.context import ReleaseContext, risk_spec, zone_population
from spatial_release.stages.keys import KeptKeys, keep_released_keys, write_ladder_buckets

KEY_TIME = "%Y-%m-%dT%H:%MZ"  # as stages.keys.KEY_FORMAT names bucket starts in keys
ROWS_IN_MEMORY = 150_000_000  # key set rows the gate codes in memory (stages.keys.CODED_UP_TO keeps coded files to it)


def read_key_sets(path: Path, zone_of_cells: Callable[[pd.Series], pd.Series]) -> tuple[KeySets, np.ndarray, np.ndarray]:
    """The key sets of a key set file of either kind, its key names and unit names (by code)."""
    if keysets.coded_file_counts(path) is None:
        held = keysets.file_rows(path)
        if held > ROWS_IN_MEMORY:
            # the ranged road of the uniqueness bound has no counterpart here yet: refuse by name, never run out of
            # memory half-way (a missing estimate blocks the release)
            raise ValueError(
                f"{path}: {held:,} (unit, key) rows, over the {ROWS_IN_MEMORY:,} the advantage gate reads in memory; "
                "gate this release on risk.model uniqueness"
            )
        rows = pd.read_parquet(path, columns=["unit", "key", "cell_id"]).drop_duplicates(["unit", "key"])
        unit_codes, units = pd.factorize(rows["unit"], sort=True)
        key_codes, keys = pd.factorize(rows["key"], sort=True)
        cells = rows.groupby("key")["cell_id"].min().reindex(keys)
        names, unit_names = np.asarray(keys, dtype=object), np.asarray(units, dtype=object)
        scan = None
    else:
        unit_codes, key_codes, cells, names, unit_names, scan = _coded_file(path)
    cell_series = pd.Series(np.asarray(cells, dtype=object))
    key_zone = cell_series.map(zone_of_cells(cell_series.drop_duplicates())).to_numpy(dtype=object)
    # 32-bit codes: 8 bytes per pair in each direction, as the uniqueness bound holds them (64-bit copies of every
    # array double the assessment's memory)
    units, keys = np.asarray(unit_codes, dtype=np.int32), np.asarray(key_codes, dtype=np.int32)
    return _key_sets(units, keys, key_zone, scan), names, unit_names


def _key_sets(units: np.ndarray, keys: np.ndarray, key_zone: np.ndarray, scan: kernels.PairScan | None = None) -> KeySets:
    """KeySets of distinct (unit, key) pairs; pairs already by unit then key (as a coded file writes them) are
    taken as they are, with one counting pass for the key-major side, not two lexsorts. `scan`: the pairs'
    `kernels.scan_pairs` (of a checked coded file: every unit holds a pair), which says whether they are so."""
    if scan is None:
        same = units[1:] == units[:-1]
        ordered = bool((np.diff(units) >= 0).all() and (keys[1:][same] > keys[:-1][same]).all()) if len(units) > 1 else True
    else:
        ordered = scan.ordered and scan.in_range
    if not ordered:
        return KeySets.from_codes(units, keys, key_zone)
    n_units = int(units[-1]) + 1 if len(units) else 0
    if scan is not None and len(scan.unit_counts) == n_units:
        unit_offsets = KeySets.offsets(scan.unit_counts)
    else:
        unit_offsets = KeySets.offsets(np.bincount(units, minlength=n_units))
    key_offsets, key_units = kernels.key_major(unit_offsets, keys, len(key_zone), np.int32)
    return KeySets(key_zone, unit_offsets, keys, key_offsets, key_units)


def _coded_file(path: Path) -> tuple[np.ndarray, np.ndarray, pd.Series, np.ndarray, np.ndarray, kernels.PairScan]:
    """A coded key set file's pairs (unit and key codes), and its keys' cells and names and units' names, by
    code, with the pairs' scan; the codes read as arrays, never a frame of one row per pair. The file is checked
    against the counts its metadata records first (`keysets.check_coded_table`, on the rows read)."""
    counts = keysets.coded_file_counts(path)
    if counts is None:
        raise ValueError(f"{path}: not a coded key set file")
    try:
        table = pq.read_table(path, columns=["u", "k", "name", "cell_id"])
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{path}: not a readable key set file ({error})") from None
    rows = keysets.check_coded_table(path, table, counts)
    del table
    # checked: the unit and key codes are 0..n-1, once each, so each name goes to its code's place
    unit_names = np.empty(len(rows.unit_codes), dtype=object)
    unit_names[rows.unit_codes] = rows.unit_names.to_numpy(zero_copy_only=False)
    key_names = np.empty(len(rows.key_codes), dtype=object)
    key_names[rows.key_codes] = rows.key_names.to_numpy(zero_copy_only=False)
    cells = np.empty(len(rows.key_codes), dtype=object)
    cells[rows.key_codes] = rows.key_cells.to_numpy(zero_copy_only=False)
    return rows.pair_units, rows.pair_keys, pd.Series(cells), key_names, unit_names, rows.scan


def _stamp(starts: pd.Series) -> pd.Series:
    return pd.to_datetime(starts, utc=True).dt.strftime(KEY_TIME)


def published_counts(ctx: ReleaseContext, proposal: bool = False) -> pd.Series:
    """Each published key's count, by key name: the candidate's cells and margins (a margin of level `cell@r`
    under both of the names the key sets give it). A `proposal` adds the true counts >= k of every level."""
    count = ctx.policy.count_column
    candidate = ctx.candidate_tables()
    cells, margins = candidate.cells, candidate.margins.rename(columns={count: "n"})
    if proposal:
        true = pd.read_parquet(ctx.area.counts / "margin_counts.parquet", columns=["level", "area_id", "bucket_start", "n"])
        margins = pd.concat([margins, true[true["n"] >= ctx.policy.k]], ignore_index=True)
    named = [pd.Series(cells[count].to_numpy(), index=cells["cell_id"].astype(str) + "@" + _stamp(cells["bucket_start"]))]
    stamp = _stamp(margins["bucket_start"])
    named.append(
        pd.Series(margins["n"].to_numpy(), index=margins["level"] + ":" + margins["area_id"].astype(str) + "@" + stamp)
    )
    rungs = margins["level"].str.startswith(f"{LEAF}@")
    rung = margins.loc[rungs, "level"].str.slice(len(LEAF) + 1)
    named.append(
        pd.Series(
            margins.loc[rungs, "n"].to_numpy(),
            index=margins.loc[rungs, "area_id"].astype(str) + "@" + rung + "@" + stamp[rungs],
        )
    )
    joined = pd.concat(named)
    return joined[~joined.index.duplicated()]


def true_zones(
    ctx: ReleaseContext, unit_names: np.ndarray, zone_of_cells: Callable[[pd.Series], pd.Series]
) -> tuple[np.ndarray, np.ndarray]:
    """(unit code, zone) of every risk zone each unit of the key sets was counted in, published or not, in
    (code, zone) order. Joined in DuckDB: a frame of every distinct (unit, cell) with its unit spelled as a
    string took 15 s at 50 M pings (bench/RESULTS.md); a unit's name is its id as text, as the key sets'
    numbering spells it (`risk.keysets`)."""
    import duckdb

    path = str(ctx.area.counts / "membership.internal.parquet").replace("'", "''")
    con = duckdb.connect()
    try:
        con.execute("SET preserve_insertion_order = false")
        cells = con.sql(f"SELECT DISTINCT CAST(cell_id AS VARCHAR) FROM read_parquet('{path}')").fetchnumpy()
        cell = pd.Series(next(iter(cells.values())), dtype=object)
        zone = cell.map(zone_of_cells(cell))
        known = zone.notna().to_numpy()
        cell_zones = pa.table(
            {"cell_id": pa.array(cell[known], pa.string()), "zone": pa.array(zone[known].astype(str), pa.string())}
        )
        unit_codes = pa.table({"unit": pa.array(unit_names, pa.string()), "u": pa.array(np.arange(len(unit_names)))})
        con.register("cell_zones", cell_zones)
        con.register("unit_codes", unit_codes)
        distinct = f"SELECT DISTINCT unit, cell_id FROM read_parquet('{path}')"
        pairs = f"SELECT CAST(unit AS VARCHAR) AS unit, CAST(cell_id AS VARCHAR) AS cell_id FROM ({distinct})"
        found = con.sql(
            f"SELECT DISTINCT n.u, z.zone FROM ({pairs}) m JOIN cell_zones z ON z.cell_id = m.cell_id "
            "JOIN unit_codes n ON n.unit = m.unit ORDER BY n.u, z.zone"
        ).fetchnumpy()
    finally:
        con.close()
    return np.asarray(found["u"], dtype=np.int64), np.asarray(found["zone"], dtype=object)


def advantage_of(
    ctx: ReleaseContext,
    key_set_file: Path,
    zone_of_cells: Callable[[pd.Series], pd.Series],
    params: AdvantageParams,
    ceiling: float,
    population: dict[str, float] | None,
    rung: str | None = None,
    reported: bool | Callable[[list[ZoneAdvantage]], bool] = True,
    early: EarlyRecovery | None = None,
    held: KeptKeys | None = None,
) -> AdvantageReport:
    """`assess_advantage` of the candidate whose key sets `key_set_file` holds (a coarsening proposal at time
    rung `rung` when one is given); `reported` as there; `early`: the candidate's recovery, already started;
    `held`: those key sets as coded into the file, taken instead of reading it (the caller checked that they
    are: `KeptKeys.serves`)."""
    sets, names, unit_names = read_key_sets(key_set_file, zone_of_cells) if held is None else held.arrays()
    counts = published_counts(ctx, rung is not None).reindex(pd.Index(names.astype(str)))
    if counts.isna().any():  # a key without its published count could hide a boundary key: fail closed
        missing = names[counts.isna().to_numpy()][:3].tolist()
        raise ValueError(f"{key_set_file}: keys without a published count in the candidate, e.g. {missing}")
    key_count = counts.to_numpy(np.int64)
    hidden = true_zones(ctx, unit_names, zone_of_cells)
    boundary = boundary_keys_per_unit(sets, key_count == ctx.policy.k) > 0

    def recovery(targets: tuple[np.ndarray, np.ndarray]) -> RecoverySuccess:
        return recovery_success(ctx, zone_of_cells, unit_names, params, ceiling, boundary, rung, targets, early)

    return assess_advantage(
        sets, names, key_count, ctx.policy.k, params, ceiling, population, hidden, recovery, reported=reported
    )


MEASURED_TARGETS = 100  # targets over the ceiling whose recovery advantage is measured, per assessment
# ... and the work that may take: re-runs x membership rows of the views re-run. A count of work, not a time
# limit, so that the same inputs give the same figures on any machine; past it the others keep their success.
MEASURED_WORK = 50_000_000


def measured_targets(runs: list, over: int) -> int:
    """How many of the `over` targets over the ceiling are measured: at most MEASURED_TARGETS, and as many as
    MEASURED_WORK allows for re-running every view."""
    rows = sum(len(inputs.unit) for inputs, _ in runs)
    return min(over, MEASURED_TARGETS, MEASURED_WORK // max(rows, 1))


def recovery_success(
    ctx: ReleaseContext,
    zone_of_cells: Callable[[pd.Series], pd.Series],
    unit_names: np.ndarray,
    params: AdvantageParams,
    ceiling: float,
    boundary: np.ndarray,
    rung: str | None = None,
    targets: tuple[np.ndarray, np.ndarray] | None = None,
    early: EarlyRecovery | None = None,
) -> RecoverySuccess:
    """The trajectory recovery's success per (unit, zone) target on every view the candidate publishes (each
    zoning at the policy's bucket and at each rung of its time ladder; a proposal: its cells at `rung`), the
    worst view per target, with units coded as `unit_names` (the key sets' order; a unit of the memberships
    without a published key is left out: it has no entry in the gate). `targets`: the (unit code, zone) targets
    to link (the gate's sample; None: every unit); the recovery itself always runs on the whole view. The
    targets whose success is over the `ceiling` and who hold no published figure at exactly k (`boundary`, by
    unit code: the membership attacker already puts those at 1), in zones that attacker does not already put at
    1, are measured: the recovery is re-run without each (`risk.attack.without_unit`), and their bound is the
    largest gain of a view; the others keep their success as the bound. `early`: the recovery of every view of
    this candidate, started before its key sets were coded (`start_recovery`), read instead of recovering
    again when it is of this candidate and these parameters."""
    started = time.perf_counter()
    attack = recovery_params(params)
    prepared = early if early is not None and early.serves(ctx, attack, rung) else None
    runs = [
        run for run in _recovery_runs(ctx, zone_of_cells, unit_names, attack, rung, targets, prepared) if run is not None
    ]
    if not runs:
        empty = np.zeros(0)
        return RecoverySuccess(empty.astype(np.int64), empty.astype(object), empty, None, 0, time.perf_counter() - started)
    found = pd.concat([frame for _, frame in runs], ignore_index=True)
    worst = found.groupby(["u", "zone"], sort=True)["s"].max()
    over = _worth_measuring(worst, boundary, ceiling, params.quantile)
    chosen = over.sort_values(ascending=False, kind="stable").index[: measured_targets(runs, len(over))].to_numpy()
    gains = _measured_gains(runs, chosen, attack)
    bound = worst.copy()
    if len(gains):
        measured = gains.groupby(["u", "zone"])["gain"].max().clip(0.0, 1.0)
        mine = bound.index.get_level_values(0).isin(chosen)
        bound[mine] = measured.reindex(bound.index[mine]).fillna(0.0).to_numpy()
    return RecoverySuccess(
        worst.index.get_level_values(0).to_numpy(np.int64),
        worst.index.get_level_values(1).to_numpy(dtype=object),
        worst.to_numpy(dtype=float),
        bound.to_numpy(dtype=float),
        len(chosen),
        time.perf_counter() - started,
    )


def _worth_measuring(worst: pd.Series, boundary: np.ndarray, ceiling: float, quantile: float) -> pd.Series:
    """The largest success over the ceiling of each unit without a boundary key, over the zones the membership
    attacker does not already settle: a zone where more than 1 - quantile of the units hold a boundary key is at
    1 whatever the recovery's bound, so measuring there would change nothing."""
    units = worst.index.get_level_values(0).to_numpy()
    zones = worst.index.get_level_values(1)
    share = pd.Series(boundary[units], index=zones).groupby(level=0).mean()
    open_zone = ~zones.isin(share.index[share > 1 - quantile])
    keep = (worst.to_numpy() > ceiling) & ~boundary[units] & open_zone
    return worst[keep].groupby(level=0).max()


def _recovery_runs(
    ctx,
    zone_of_cells,
    unit_names: np.ndarray,
    attack: AttackParams,
    rung: str | None,
    targets: tuple[np.ndarray, np.ndarray] | None = None,
    prepared: EarlyRecovery | None = None,
):
    """Per view: its inputs and the recovery's success per target (u: the key sets' unit code, a: the view's
    own unit code, zone, s), of the `targets` only when given; None for a view with no published figure
    (nothing to recover or reveal). `prepared`: each view's inputs and recovery, in `_views` order, computed
    or under way (`start_recovery`)."""
    names = pd.Index(pd.Series(unit_names).astype(str))
    for number, (zoning, at, proposal) in enumerate(_views(ctx, rung)):
        recovered: Callable[[], Recovered] | None = None
        linkage: Callable[[], LinkageInputs] | None = None
        if prepared is not None:
            view_inputs = prepared.inputs()[number]
            if view_inputs is None:
                yield None
                continue
            inputs, recovered = view_inputs, functools.partial(prepared.take, number)
            linkage = functools.partial(prepared.linkage, number)
        else:
            inputs = attack_inputs(ctx, zone_of_cells, at, proposal, zoning)
            if not _recoverable(inputs):
                yield None
                continue
        view_units = inputs.unit_names
        assert view_units is not None  # `_recoverable`
        linked = None
        if targets is not None:  # the targets in the view's own unit codes
            own = pd.Index(view_units.astype(str)).get_indexer(np.asarray(unit_names)[targets[0]].astype(str))
            linked = (own[own >= 0], np.asarray(targets[1], dtype=object)[own >= 0])
        report = attack_risk(
            inputs.view,
            inputs.unit,
            inputs.step,
            inputs.area,
            inputs.zone_of_area,
            attack,
            recovered,
            targets=linked,
            linkage=linkage,
        )
        assert report.targets is not None
        unit, zone, success = report.targets
        code = names.get_indexer(view_units.astype(str)[unit])
        frame = pd.DataFrame({"u": code, "a": unit, "zone": zone.astype(str), "s": success})
        if targets is not None:  # the others were not linked: no figure, rather than a 0 taken for one
            wanted = pd.MultiIndex.from_arrays([np.asarray(targets[0], dtype=np.int64), np.asarray(targets[1]).astype(str)])
            frame = frame[pd.MultiIndex.from_arrays([frame["u"], frame["zone"]]).isin(wanted)]
        yield inputs, frame[frame["u"] >= 0]


def _views(ctx: ReleaseContext, rung: str | None) -> list[tuple[str | None, str | None, bool]]:
    """The views the recovery runs on, as (zoning, rung, proposal): a proposal's cells at `rung`; else every
    zoning the candidate publishes (the main geometry, then each linked one) at its bucket and at each rung of
    the time ladder."""
    if rung is not None:
        return [(None, rung, True)]
    zonings = [None, *(spec.name for spec in ctx.policy.geometry.linked)]
    return [(zoning, r, False) for zoning in zonings for r in [None, *ctx.policy.time.ladder]]


def _recoverable(inputs: AttackInputs) -> bool:
    """A view with a published figure and named units: one with nothing published has nothing to recover or
    reveal."""
    return bool(len(inputs.view.figure_area)) and inputs.unit_names is not None


def recovery_params(params: AdvantageParams) -> AttackParams:
    """The recovery attacker of the advantage gate: the landscape's knowledge (points, draws, seed)."""
    return AttackParams(points=params.points, draws=params.draws, seed=params.seed)


class EarlyRecovery:
    """The trajectory recovery of every view of a candidate, started on a thread of its own before the candidate's
    key sets are coded (`stages.keys.keep_released_keys`), which it does not read: it reads the published
    figures and the memberships, and it is the longest piece of the gate, one core's work bucket by bucket
    (bench/RESULTS.md). `recovery_success` reads it instead of recovering again. Stopped (`stop`) once the
    assessment no longer needs it: a saved assessment, or zones the membership attacker alone settles.

    Each view's linkage inputs (`risk.attack.linkage_inputs`: the true key sets and the knowledge drawn) are
    computed once, by whichever asks first: the assessment, before it waits for a recovery still under way, or
    this thread once its recoveries are done (at 50 M pings they end before the assessment has its targets)."""

    def __init__(self, candidate: object, attack: AttackParams, stopping: threading.Event):
        self.candidate = candidate  # the candidate tables it recovers from (`ReleaseContext.candidate_tables()`)
        self.attack = attack
        self.stopping = stopping
        self.views_read: Future[list[AttackInputs | None]] = Future()  # each view's inputs, read first
        self.views_recovered: Future[list[Recovered | None]] = Future()  # then each view's recovery
        self._linkage_lock = threading.Lock()
        self._linkage: dict[int, Future[LinkageInputs]] = {}
        self._taken: set[int] = set()  # the views whose recovery was handed over (`take`)

    def serves(self, ctx: ReleaseContext, attack: AttackParams, rung: str | None) -> bool:
        """Whether it is the recovery `recovery_success` would run: the same candidate (the very tables the
        context holds now), the same attacker, the candidate's own views (no proposal)."""
        return rung is None and attack == self.attack and ctx.candidate_tables() is self.candidate

    def inputs(self) -> list[AttackInputs | None]:
        """Each view's inputs, in `_views` order (None: nothing published); their error, if reading them failed."""
        return self.views_read.result()

    def recovered(self, number: int) -> Recovered:
        """The recovery of view `number` (one with inputs), once every view's has ended; its error, if it failed."""
        done = self.views_recovered.result()[number]
        assert number not in self._taken, f"the early recovery of view {number} was handed over (`take`)"
        assert done is not None, f"the early recovery has no view {number}"
        return done

    def take(self, number: int) -> Recovered:
        """`recovered(number)`, handed over: this object forgets it, so the points (at 50 M pings 40 M of them)
        are freed as soon as the linkage has coded them (`risk.attack.attack_risk`), not held to the end of the
        assessment. An assessment reads each view's recovery once; a second take is an error."""
        with self._linkage_lock:
            done = self.recovered(number)
            self._taken.add(number)
            self.views_recovered.result()[number] = None
        return done

    def linkage(self, number: int) -> LinkageInputs:
        """View `number`'s linkage inputs: computed here by the first caller, waited for by the others."""
        with self._linkage_lock:
            cell = self._linkage.get(number)
            mine = cell is None
            if cell is None:
                cell = self._linkage[number] = Future()
        if not mine:
            return cell.result()
        inputs = self.inputs()[number]
        assert inputs is not None, f"the early recovery has no view {number}"
        try:
            found = linkage_inputs(inputs.view, inputs.unit, inputs.step, inputs.area, inputs.zone_of_area, self.attack)
        except BaseException as error:
            cell.set_exception(error)
            raise
        cell.set_result(found)
        return found

    def views(self) -> list[tuple[AttackInputs, Recovered] | None]:
        """Each view's inputs and recovery, in `_views` order (None: nothing published)."""
        return [None if inputs is None else (inputs, self.recovered(number)) for number, inputs in enumerate(self.inputs())]

    def stop(self) -> None:
        self.stopping.set()


def start_recovery(
    ctx: ReleaseContext, zone_of_cells: Callable[[pd.Series], pd.Series], params: AdvantageParams
) -> EarlyRecovery:
    """Start the recovery of every view of the context's candidate (`EarlyRecovery`)."""
    early = EarlyRecovery(ctx.candidate_tables(), recovery_params(params), threading.Event())
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="early-recovery")
    try:
        pool.submit(_recover_views, ctx, zone_of_cells, early)
    finally:
        pool.shutdown(wait=False)
    return early


def _recover_views(ctx: ReleaseContext, zone_of_cells: Callable[[pd.Series], pd.Series], early: EarlyRecovery) -> None:
    """Every view's inputs (given to `views_read` as soon as they are all read: the assessment draws its knowledge
    from them while the recoveries run), then every view's recovery (`views_recovered`), then every view's
    linkage inputs that nobody asked for yet. A stop ends it with RecoveryStopped."""
    try:
        views = [attack_inputs(ctx, zone_of_cells, at, proposal, zoning) for zoning, at, proposal in _views(ctx, None)]
    except BaseException as error:
        early.views_read.set_exception(error)
        early.views_recovered.set_exception(error)
        raise
    shown = [inputs if _recoverable(inputs) else None for inputs in views]
    early.views_read.set_result(shown)
    try:
        recovered = [None if inputs is None else _recover_in_process(inputs, early) for inputs in shown]
    except BaseException as error:
        early.views_recovered.set_exception(error)
        raise
    early.views_recovered.set_result(recovered)
    for number, inputs in enumerate(shown):
        if inputs is not None and not early.stopping.is_set():
            early.linkage(number)


def _recover_in_process(inputs: AttackInputs, early: EarlyRecovery) -> Recovered:
    """The view's recovery in a process of its own (`tasks.in_own_process`): OR-Tools' min-cost flow holds the
    interpreter lock while it solves, and on a thread it stalled the assessment's other work, which runs beside
    it. At 50 M pings, two rounds alternating, the assessment took 79.3 and 81.4 s with it in a process against
    102.1 and 85.5 s on a thread, and the process's own memory is freed when it ends (bench/RESULTS.md). A stop
    ends the process (RecoveryStopped)."""
    if multiprocessing.current_process().daemon:  # a pool's worker may have no process of its own: on this thread
        return recover_trajectories(inputs.view, early.attack, early.stopping)
    try:
        return tasks.in_own_process(recover_trajectories, inputs.view, early.attack, stop=early.stopping, name="recovery")
    except tasks.JobStopped:
        raise RecoveryStopped("the recovery was stopped: its process ended") from None


def _measured_gains(runs: list, chosen: np.ndarray, attack: AttackParams) -> pd.DataFrame:
    """(u, zone, gain) of each chosen target in each view where it is a target: its success on the view minus
    its success on the view without it (the same knowledge drawn)."""
    gains = []
    for inputs, frame in runs:
        mine = frame[frame["u"].isin(chosen)]
        for code, own in mine.groupby("a"):
            view = without_unit(inputs.view, inputs.unit, inputs.step, inputs.area, int(code))
            report = attack_risk(
                view, inputs.unit, inputs.step, inputs.area, inputs.zone_of_area, attack, only=np.array([code])
            )
            assert report.targets is not None
            unit, zone, success = report.targets
            without = pd.Series(success[unit == code], index=zone[unit == code].astype(str))
            gain = own["s"].to_numpy() - without.reindex(own["zone"]).fillna(0.0).to_numpy()
            gains.append(pd.DataFrame({"u": own["u"].to_numpy(), "zone": own["zone"].to_numpy(), "gain": gain}))
    return pd.concat(gains, ignore_index=True) if gains else pd.DataFrame(columns=["u", "zone", "gain"])


def advantage_params(landscape) -> AdvantageParams:
    """The adversary of the landscape: p known points, draws per target and anchor, seed."""
    return AdvantageParams(points=landscape.points, draws=landscape.draws, seed=landscape.seed)


def candidate_advantage(
    ctx: ReleaseContext,
    landscape: Landscape,
    key_set_file: Path | None = None,
    rung: str | None = None,
    reported: bool | Callable[[list[ZoneAdvantage]], bool] = True,
    early: EarlyRecovery | None = None,
    held: KeptKeys | None = None,
) -> AdvantageReport:
    """The advantage of the candidate (`stages.advantage`) from its kept key sets (`key_set_file`, the risk
    step's own by default; `held`: as `keep_released_keys` coded them, read instead of the file when it is
    the one they were written to, unchanged since), with the landscape's adversary and public population and
    the ceiling the gate applies. Only this release's key sets: the earlier releases of the window are the
    uniqueness bound's.
    `reported`: the whole report, or the gate's figures only, or a callable that decides from those
    (`assess_advantage`); a saved whole report answers all three. `early`: this candidate's recovery, started
    while its key sets were coded (`start_recovery`)."""
    risk = risk_spec(ctx.policy)
    path = ctx.area.unit_keys if key_set_file is None else key_set_file
    if not path.exists():  # the publish step's assessment, or a review, on a work area without kept key sets
        held = keep_released_keys(ctx, write_ladder_buckets(ctx))
        path = ctx.area.unit_keys
    landscape_path = ctx.policy.resolve(risk.landscape)
    population = zone_population(ctx.policy, landscape, landscape_path, ctx.layers)
    params = replace(
        advantage_params(landscape), gate_classifier=risk.count_classifier == "gate", timezone=ctx.policy.time.timezone
    )
    # one memo of the assessment per set of inputs: the climbing loop's last pass, the risk step and the publish
    # step assess the same candidate
    key_sets_digest = sha256_file(path)
    inputs = {
        "key_sets": key_sets_digest,
        "membership": sha256_file(ctx.area.counts / "membership.internal.parquet"),
        "params": params.__dict__,
        "ceiling": risk.per_release_ceiling,
        "population": population,
        "policy": ctx.policy.sha256,
        "rung": rung,
    }
    digest, memo = reuse.digest_of(inputs), ctx.memo()
    name = "advantage" if rung is None else f"advantage@{rung}"
    gate_name = f"{name}:gate"  # the gate's figures only: never read where the whole report is asked for
    whole = _saved_report(memo, name, digest)
    if whole is not None and whole.reported:
        return whole
    if reported is not True:
        gate_only = _saved_report(memo, gate_name, digest)
        if gate_only is not None and not gate_only.reported:
            if reported is False or not reported(gate_only.zones):
                return gate_only
    coded = held if held is not None and held.serves(path, key_sets_digest, ctx.risk_zones) else None
    found = advantage_of(
        ctx, path, ctx.risk_zones, params, risk.per_release_ceiling, population, rung, reported, early, coded
    )
    memo.save(name if found.reported else gate_name, digest, found.to_json())
    return found


def _saved_report(memo: reuse.Memo, name: str, digest: str | None) -> AdvantageReport | None:
    saved = memo.load(name, digest)
    if saved is None:
        return None
    try:
        return AdvantageReport.from_json(saved)
    except (KeyError, TypeError, ValueError):
        return None
