"""Audit once, certify after: the protection step's audit leaves a certificate that the `suppression_audit`
check and the publish step verify instead of solving the attacker LPs again.

What the certificate holds (owner-only work area; it carries true values of withheld primaries, so it is
per-unit-derived and never goes into a release, a log or Dagster metadata):
- the sha256 of every input it certifies (`inputs`): the true counts files, the candidate cells and margins,
  the policy, a digest of the disclosure spec (k, measure, zeros, buckets, criterion, solver options) and a
  digest of the earlier releases the audit saw (`audit_with`; none at protection time);
- the size of the linear system (figures, relations) and the components' count;
- per withheld primary: its component, true value, the bounds the solver found (`lo`, `up`; `up` may be
  +inf), its verdict (a component's verdict is that of all its primaries), and for each bound a witness: an
  integral point of the attacker's feasible set, stored as the figures where it differs from the true table
  ({node: value}), shared between primaries.

What "verify cheaply and exactly" means here. Protection needs, for each primary of value v, that the
attacker's integer interval reaches lo <= v - 1 and up >= max(k, v + 1) (`Criterion`). An attacker can
never exclude a point that satisfies every published equation and bound, so one feasible integral point
with y_i <= v - 1 proves the lower half and one with y_i >= max(k, v + 1) the upper half: this is exactly
the direction that proves protection. (Optimality of a bound, "the attacker cannot go further", would need
a dual certificate; protection never needs it, so it is not certified.) The verifier therefore:
1. recomputes the input hashes and compares them with the certificate's (any difference in the counts,
   the candidate, the policy or the spec rejects the whole certificate: everything is re-solved; earlier
   releases it did not see re-solve the components next to a figure they publish);
2. builds the published system from the files (as `audit_published` does) and checks the true table
   against it once: every relation exactly, in integers (a relation that fails sends its components to
   the solver; one whose figures are all published is an audit error, as in the audit);
3. checks each witness point once, in integer arithmetic with no tolerance: every moved figure is withheld
   in the published system, at least its a-priori floor (0, or 1 for an absent listed structural zero)
   and every relation that touches a moved figure holds exactly (the relations it does not touch hold by
   step 2). Points are integers by construction (the solver's values are rounded to the nearest integer,
   accepted only within 1e-6 when the certificate is written; what is verified is the rounded point);
4. for every primary of every component: the certificate has it, with its true value, the recorded finite
   bound equals the primary's value in its witness (an infinite `up` needs a witness >= max(k, v + 1)),
   and the witnessed values meet the criterion.
A component whose primaries all verify is certified; any other (missing primary, invalid or missing
witness, a bound that its witness does not attain, a hash mismatch) is re-solved with the LP by the
caller, never trusted. Cost: linear in the system plus the witnesses' sizes times their relations' sizes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import highspy
import numpy as np
import pandas as pd

from spatial_release.fileio import atomic_path, sha256_file, write_json_atomic
from spatial_release.suppression.audit import components, inconsistent_relations
from spatial_release.suppression.table import EQ, PRIMARY, PUBLISHED, Table
from spatial_release.suppression.verdicts import AuditResult, Criterion, Interval

FORMAT = 1
HEADER = "certificate.internal.json"
PRIMARIES = "certificate_primaries.internal.parquet"
POINTS = "certificate_points.internal.parquet"
ROUNDING = 1e-6  # a solver value is taken as an integer only within this distance (when writing)
EARLIER = "earlier_releases"
NO_POINT = -1


def frames_digest(frames: Iterable[pd.DataFrame]) -> str:
    """sha256 of a sequence of tables' contents (columns, then rows in key order); a geometry column is left
    out (it follows from the cell id)."""
    digest = hashlib.sha256()
    for frame in frames:
        frame = pd.DataFrame(frame[[c for c in frame.columns if str(frame[c].dtype) != "geometry"]])
        digest.update(json.dumps([str(c) for c in frame.columns]).encode())
        if len(frame):
            ordered = frame.sort_values(list(frame.columns)).reset_index(drop=True)
            digest.update(pd.util.hash_pandas_object(ordered, index=False).to_numpy().tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def earlier_digest(earlier: Sequence[tuple[pd.DataFrame, pd.DataFrame]]) -> str:
    return frames_digest([f for pair in earlier for f in pair])


@dataclass
class Certificate:
    inputs: dict[str, str]
    k: int
    range_pct: float | None
    solver: str
    nodes: int
    relations: int
    components: int
    passed: bool
    # node, component, value, lo, up, passed (the solver's verdict; a component's is that of all its
    # primaries; the verifier never reads it), lo_point, up_point (point ids; NO_POINT when none)
    primaries: pd.DataFrame
    points: pd.DataFrame  # point, node, value

    @classmethod
    def build(cls, table: Table, result: AuditResult, inputs: Mapping[str, str]) -> Certificate:
        """The certificate of `table`'s final pattern from its audit (`result.intervals` and witnesses)."""
        intervals = {i.node: i for i in result.intervals}
        ids: dict[int, int] = {}
        # column lists, not row tuples: a frame from typed columns is built without converting objects
        point_col: list[int] = []
        node_col: list[int] = []
        value_col: list[int] = []

        def point_id(point: dict | None) -> int:
            if point is None:
                return NO_POINT
            pid = ids.get(id(point))
            if pid is None:
                pid = ids[id(point)] = len(ids)
                moved = sorted(point)
                point_col.extend([pid] * len(moved))
                node_col.extend(moved)
                value_col.extend([point[n] for n in moved])
            return pid

        names = ("node", "component", "value", "lo", "up", "passed", "lo_point", "up_point")
        node_l, comp_l, value_l, lo_l, up_l, passed_l, lo_point_l, up_point_l = ([] for _ in names)
        comps = components(table)
        for c, nodes in enumerate(comps):
            for node in nodes:
                if table.status[node] != PRIMARY:
                    continue
                interval = intervals.get(node)
                lo_point, up_point = result.witnesses.get(node, (None, None))
                node_l.append(node)
                comp_l.append(c)
                value_l.append(table.value[node])
                lo_l.append(math.nan if interval is None else interval.lo)
                up_l.append(math.nan if interval is None else interval.up)
                passed_l.append(interval is not None and interval.passed)
                lo_point_l.append(point_id(lo_point))
                up_point_l.append(point_id(up_point))
        types = (np.int64, np.int64, np.int64, np.float64, np.float64, bool, np.int64, np.int64)
        primaries = pd.DataFrame(
            {
                name: np.array(values, dtype=kind)
                for name, values, kind in zip(
                    names, (node_l, comp_l, value_l, lo_l, up_l, passed_l, lo_point_l, up_point_l), types
                )
            }
        )
        points = pd.DataFrame(
            {
                "point": np.array(point_col, dtype=np.int64),
                "node": np.array(node_col, dtype=np.int64),
                "value": np.array(value_col, dtype=np.int64),
            }
        )
        criterion = result.criterion or Criterion(result.k)
        return cls(
            dict(inputs),
            criterion.k,
            criterion.range_pct,
            f"HiGHS {highspy.Highs().version()}",
            len(table),
            len(table.relations),
            len(comps),
            result.passed,
            primaries,
            points,
        )

    def write(self, folder: Path) -> None:
        """Write the two tables, then the header with their sha256 (last, atomically: a half-written
        certificate never verifies)."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / HEADER).unlink(missing_ok=True)
        for name, frame in ((PRIMARIES, self.primaries), (POINTS, self.points)):
            with atomic_path(folder / name) as tmp:
                frame.to_parquet(tmp, index=False)
        write_json_atomic(
            folder / HEADER,
            {
                "format": FORMAT,
                "inputs": self.inputs,
                "k": self.k,
                "range_pct": self.range_pct,
                "solver": self.solver,
                "nodes": self.nodes,
                "relations": self.relations,
                "components": self.components,
                "passed": self.passed,
                "files": {name: sha256_file(folder / name) for name in (PRIMARIES, POINTS)},
                "tolerances": {"witness_rounding": ROUNDING, "verification": "exact integer arithmetic"},
            },
        )

    @classmethod
    def read(cls, folder: Path) -> Certificate:
        """The certificate in `folder`; ValueError when it is missing, incomplete or altered."""
        try:
            header = json.loads((folder / HEADER).read_text())
            if header.get("format") != FORMAT:
                raise ValueError(f"format {header.get('format')!r}, expected {FORMAT}")
            for name in (PRIMARIES, POINTS):
                if sha256_file(folder / name) != header["files"][name]:
                    raise ValueError(f"{name} does not match the header's sha256")
            return cls(
                header["inputs"],
                int(header["k"]),
                header["range_pct"],
                header["solver"],
                int(header["nodes"]),
                int(header["relations"]),
                int(header["components"]),
                bool(header["passed"]),
                pd.read_parquet(folder / PRIMARIES),
                pd.read_parquet(folder / POINTS),
            )
        except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"no readable audit certificate in {folder} ({exc})") from None


@dataclass
class Verification:
    """What the verifier found: the certified primaries' intervals (as witnessed), the components it could
    not certify (to re-solve) with why, and errors (relations contradicted by published figures)."""

    components: list[list[int]] = field(default_factory=list)
    certified: list[int] = field(default_factory=list)  # indices into `components`
    unverified: dict[int, str] = field(default_factory=dict)  # component index -> first reason
    intervals: list[Interval] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rejected: str | None = None  # the whole certificate was not usable
    invalid_points: int = 0

    def to_resolve(self) -> set[int]:
        """The primaries of every component that was not certified."""
        return {n for c in self.unverified for n in self.components[c]}


def _relation_holds(rel, x) -> bool:
    parent = x(rel.parent)
    kids = [x(c) for c in rel.children]
    total = sum(kids) + (0 if rel.rest is None else x(rel.rest))
    if rel.kind == EQ:
        return parent == total
    if parent > total or any(kid > parent for kid in kids):
        return False
    return rel.rest is None or rel.rest_children is None or x(rel.rest) <= rel.rest_children * parent


def verify(
    table: Table,
    certificate: Certificate,
    inputs: Mapping[str, str],
    criterion: Criterion,
    learned_from_earlier: Iterable[int] = (),
) -> Verification:
    """Verify `certificate` against `table`, the published system (published figures at their published
    values, every other figure withheld at its true value, floors set). `inputs` are the hashes of the
    inputs now; `learned_from_earlier` the figures published only by earlier releases (withheld here).
    See the module docstring for what is checked. Never solves an LP."""
    out = Verification(components=components(table))
    out.errors.extend(inconsistent_relations(table))
    primary_comps = [c for c, nodes in enumerate(out.components) if any(table.status[n] == PRIMARY for n in nodes)]
    rejected = _rejected(table, certificate, inputs, criterion)
    if rejected is not None:
        out.rejected = rejected
        out.unverified = {c: rejected for c in primary_comps}
        return out
    checks = _Checks(table, out)
    if inputs.get(EARLIER) != certificate.inputs.get(EARLIER):
        checks.spoil_next_to(learned_from_earlier, "an earlier release the certificate did not see")
    checks.check_true_table()
    points = _WitnessPoints(table, checks, certificate.points, out)
    recorded = _Recorded(certificate.primaries)
    recorded.read_witnesses(points)
    certified: dict[int, list[Interval]] = {}
    for c in primary_comps:
        if c in out.unverified:
            continue
        intervals = _certify_component(table, out.components[c], recorded, points, criterion)
        if isinstance(intervals, str):
            out.unverified[c] = intervals
        else:
            certified[c] = intervals
    out.certified = [c for c in primary_comps if c not in out.unverified]
    out.intervals = [i for c in out.certified for i in certified[c]]
    return out


def _rejected(table: Table, certificate: Certificate, inputs: Mapping[str, str], criterion: Criterion) -> str | None:
    """Why the whole certificate is unusable (another criterion, changed inputs, another system), or None."""
    if (certificate.k, certificate.range_pct) != (criterion.k, criterion.range_pct):
        return "the certificate is for another criterion"
    changed = sorted(
        name
        for name in set(inputs) | set(certificate.inputs)
        if name != EARLIER and inputs.get(name) != certificate.inputs.get(name)
    )
    if changed:
        return f"inputs changed since the audit: {', '.join(changed)}"
    if (certificate.nodes, certificate.relations) != (len(table), len(table.relations)):
        return "the certificate is for another linear system"
    return None


class _Checks:
    """Steps 1 and 2 of the module docstring, and what step 3 needs from them: the components they send to
    the solver (`spoil`) and each EQ relation's integer residual in the true table."""

    def __init__(self, table: Table, out: Verification):
        self.table, self.out = table, out
        self.comp_of = np.full(len(table), -1, dtype=np.int64)
        for c, nodes in enumerate(out.components):
            self.comp_of[nodes] = c
        self.relations_of = table.relations_of()
        self.eq = np.array([rel.kind == EQ for rel in table.relations], dtype=bool)
        self.residual = np.zeros(len(table.relations), dtype=np.int64)

    def spoil(self, nodes: Iterable[int], reason: str) -> None:
        """Send the components of `nodes` to the solver, with the first reason found."""
        for n in nodes:
            c = int(self.comp_of[n])
            if c >= 0:
                self.out.unverified.setdefault(c, reason)

    def spoil_next_to(self, nodes: Iterable[int], reason: str) -> None:
        relations = self.table.relations
        for n in nodes:
            for r in self.relations_of[n]:
                self.spoil(relations[r].members(), reason)

    def check_true_table(self) -> None:
        """The true table (withheld figures at their true values) against every relation, once: EQ relations
        as one integer residual each (children + rest - parent), the others one by one; then the floors."""
        table, relations, eq = self.table, self.table.relations, self.eq
        member_rel: list[int] = []
        member_node: list[int] = []
        member_coef: list[int] = []
        for r, rel in enumerate(relations):
            if eq[r]:
                members = rel.members()
                member_rel.extend([r] * len(members))
                member_node.extend(members)
                member_coef.extend([-1, *([1] * (len(members) - 1))])
        values = np.asarray(table.value, dtype=np.int64)
        np.add.at(
            self.residual,
            np.asarray(member_rel, dtype=np.int64),
            np.asarray(member_coef, dtype=np.int64) * values[np.asarray(member_node, dtype=np.int64)],
        )
        broken = "the true table does not satisfy a relation of the published system"
        for bad in np.flatnonzero(eq & (self.residual != 0)):
            self.spoil(relations[bad].members(), broken)
        for other in np.flatnonzero(~eq):
            if not _relation_holds(relations[other], table.value.__getitem__):
                self.spoil(relations[other].members(), broken)
        value, status = table.value, table.status
        for n, f in table.floor.items():
            if status[n] != PUBLISHED and value[n] < f:
                self.spoil([n], "a true value below its a-priori floor")
        negative = [n for n in range(len(table)) if status[n] != PUBLISHED and value[n] < 0]
        if negative:
            self.spoil(negative, "a negative true value")


class _WitnessPoints:
    """Step 3: each witness point checked once, in integer arithmetic: a moved figure must be withheld and at
    least its floor; an EQ relation it touches keeps a zero residual (the true table's, checked in step 2,
    plus the moves), any other touched relation is evaluated at the point."""

    def __init__(self, table: Table, checks: _Checks, frame: pd.DataFrame, out: Verification):
        self.table, self.out = table, out
        self.relations_of = checks.relations_of
        self.is_eq, self.residuals = checks.eq.tolist(), checks.residual.tolist()  # Python scalars: faster one at a time
        ordered = frame.sort_values("point", kind="stable")
        pids = ordered["point"].to_numpy(dtype=np.int64)
        self.nodes_of = ordered["node"].to_numpy(dtype=np.int64)
        self.values_of = ordered["value"].to_numpy(dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, pids[1:] != pids[:-1]]) if len(pids) else np.array([], dtype=np.int64)
        ends = np.r_[starts[1:], len(pids)] if len(pids) else starts
        self.slices = {int(pids[a]): (int(a), int(b)) for a, b in zip(starts, ends)}
        self.n_nodes = len(table)
        self.pids_of = pids
        self._lookup: tuple[np.ndarray, np.ndarray] | None = None
        self.points: dict[int, dict[int, int]] = {}
        # Points that touch EQ relations only are checked all at once (the same test as `_valid`, in arrays: a
        # certificate holds hundreds of thousands of points); a point touching any other relation is evaluated
        # one by one.
        self.valid: dict[int, bool] = _eq_points_valid(
            table, checks.relations_of, checks.eq, checks.residual, pids, self.nodes_of, self.values_of
        )
        self.counted_invalid: set[int] = set()

    def has(self, pid: int) -> bool:
        """Whether the certificate has a point `pid` (a point moves at least one figure)."""
        return pid in self.slices

    def values_at(self, pids: np.ndarray, nodes: np.ndarray, default: np.ndarray) -> np.ndarray:
        """For each (point, node): the node's value at the point, `default` where the point does not move it (or
        is not in the certificate). A node listed twice in a point reads its last row, as `moved` does."""
        found = np.asarray(default, dtype=np.int64).copy()
        pids, nodes = np.asarray(pids, dtype=np.int64), np.asarray(nodes, dtype=np.int64)
        if not len(self.nodes_of) or not len(pids):
            return found
        limit = np.int64(self.n_nodes + 1)
        largest = np.int64(2**62) // limit  # point ids past it (or below 0) would wrap the composite keys
        wraps = min(self.pids_of.min(), pids.min()) < 0 or max(self.pids_of.max(), pids.max()) > largest
        if wraps or nodes.min() < 0 or nodes.max() >= self.n_nodes:  # (never for a table's own primaries)
            for j, (pid, node) in enumerate(zip(pids.tolist(), nodes.tolist())):
                moved = self.moved(pid)
                if moved is not None and node in moved:
                    found[j] = moved[node]
            return found
        if self._lookup is None:
            inside = (self.nodes_of >= 0) & (self.nodes_of < self.n_nodes)
            keys = self.pids_of * limit + np.where(inside, self.nodes_of, self.n_nodes)
            order = np.argsort(keys, kind="stable")
            self._lookup = (keys[order], order)
        sorted_keys, order = self._lookup
        wanted = pids * limit + nodes
        at = np.searchsorted(sorted_keys, wanted, side="right") - 1
        hit = (at >= 0) & (sorted_keys[np.maximum(at, 0)] == wanted)
        found[hit] = self.values_of[order[at[hit]]]
        return found

    def moved(self, pid: int) -> dict[int, int] | None:
        """The point's moved figures {node: value}, or None when the certificate has no such point."""
        if pid not in self.points and pid in self.slices:
            a, b = self.slices[pid]
            self.points[pid] = dict(zip(self.nodes_of[a:b].tolist(), self.values_of[a:b].tolist()))
        return self.points.get(pid)

    def ok(self, pid: int) -> bool:
        if pid not in self.valid:
            moved = self.moved(pid)
            self.valid[pid] = moved is not None and self._valid(moved)
        if not self.valid[pid] and pid not in self.counted_invalid:
            self.counted_invalid.add(pid)
            self.out.invalid_points += 1
        return self.valid[pid]

    def _valid(self, moved: dict[int, int]) -> bool:
        table, relations, is_eq = self.table, self.table.relations, self.is_eq
        value, status, floors = table.value, table.status, table.floor
        for n, v in moved.items():
            if not (0 <= n < len(table)) or status[n] == PUBLISHED or v < floors.get(n, 0):
                return False
        change: dict[int, int] = {}
        for n, v in moved.items():
            step = v - value[n]
            for r in self.relations_of[n]:
                if is_eq[r]:
                    change[r] = change.get(r, 0) + (-step if relations[r].parent == n else step)
                else:
                    change.setdefault(r, 0)
        x = lambda n: moved.get(n, value[n])  # noqa: E731
        return all(
            (self.residuals[r] + delta == 0) if is_eq[r] else _relation_holds(relations[r], x) for r, delta in change.items()
        )


class _Recorded:
    """The certificate's rows of primaries, by node (a node recorded twice has no row: it is not covered)."""

    def __init__(self, primaries: pd.DataFrame):
        node_col = primaries["node"].to_numpy(dtype=np.int64)
        unique, counts = np.unique(node_col, return_counts=True)
        once = set(unique[counts == 1].tolist())
        self.row_of = {n: i for i, n in enumerate(node_col.tolist()) if n in once}
        self.value = primaries["value"].to_numpy(dtype=np.int64)
        self.lo, self.up = primaries["lo"].to_numpy(dtype=float), primaries["up"].to_numpy(dtype=float)
        self.lo_point = primaries["lo_point"].to_numpy(dtype=np.int64)
        self.up_point = primaries["up_point"].to_numpy(dtype=np.int64)
        self.node = node_col
        self.y_lo = self.y_up = self.value

    def read_witnesses(self, points: _WitnessPoints) -> None:
        """Each row's value at its lower and upper witness points (its recorded value where the point does not
        move it), read for every row at once."""
        self.y_lo = points.values_at(self.lo_point, self.node, self.value)
        self.y_up = points.values_at(self.up_point, self.node, self.value)


def _certify_component(
    table: Table, nodes: list[int], recorded: _Recorded, points: _WitnessPoints, criterion: Criterion
) -> list[Interval] | str:
    """Step 4 for one component: the witnessed interval of each of its primaries, or the first reason one of
    them does not verify."""
    intervals = []
    for n in nodes:
        if table.status[n] != PRIMARY:
            continue
        i = recorded.row_of.get(n)
        v = table.value[n]
        if i is None:
            return "a withheld primary the certificate does not cover"
        if int(recorded.value[i]) != v:
            return "a primary's value differs from the true count"
        lo_point, up_point = int(recorded.lo_point[i]), int(recorded.up_point[i])
        if not (points.ok(lo_point) and points.ok(up_point)):
            return "a witness point that is not a feasible integral point of the published system"
        if not (points.has(lo_point) and points.has(up_point)):  # never after ok(): it holds only for points it has
            return "a witness point that is not a feasible integral point of the published system"
        y_lo, y_up = int(recorded.y_lo[i]), int(recorded.y_up[i])  # the recorded value is v (checked above)
        lo, up = float(recorded.lo[i]), float(recorded.up[i])
        if lo != y_lo or not (up == y_up or (math.isinf(up) and up > 0)):
            return "a bound its witness does not attain"
        if not criterion.passes(v, y_lo, y_up):
            return "the witnesses do not meet the protection criterion"
        intervals.append(Interval(n, v, float(y_lo), up, True, False, "", (), "witness"))
    return intervals


EXACT_LIMIT = 2**40  # |values| up to this, summed over at most 2^22 moves per relation, stay far inside int64


def _eq_points_valid(
    table: Table,
    relations_of: list[list[int]],
    eq: np.ndarray,
    residual: np.ndarray,
    pids: np.ndarray,
    nodes: np.ndarray,
    values: np.ndarray,
) -> dict[int, bool]:
    """{point id: valid} for every point of (pids, nodes, values) whose moved figures touch EQ relations only:
    each moved figure exists, is withheld and is at least its floor, and every EQ relation it touches keeps the
    true table's zero residual once the moves are added. Points touching another relation are left out."""
    n_nodes = len(table)
    if not len(pids):
        return {}
    inside = (nodes >= 0) & (nodes < n_nodes)
    safe = np.where(inside, nodes, 0)
    withheld = np.fromiter((s != PUBLISHED for s in table.status), dtype=bool, count=n_nodes)
    floor = np.zeros(n_nodes, dtype=np.int64)
    if table.floor:
        floor[np.fromiter(table.floor.keys(), dtype=np.int64)] = np.fromiter(table.floor.values(), dtype=np.int64)
    true = np.asarray(table.value, dtype=np.int64)
    entry_ok = inside & withheld[safe] & (values >= floor[safe])
    # node -> its relations (CSR), for the moved figures only
    counts = np.fromiter((len(relations_of[n]) for n in safe.tolist()), dtype=np.int64, count=len(safe))
    rels = np.fromiter((r for n in safe.tolist() for r in relations_of[n]), dtype=np.int64, count=int(counts.sum()))
    entry = np.repeat(np.arange(len(safe)), counts)
    parent = np.fromiter((rel.parent for rel in table.relations), dtype=np.int64, count=len(table.relations))
    other_kind = ~eq[rels]
    point_ids, point_of_entry = np.unique(pids, return_inverse=True)
    ok = np.ones(len(point_ids), dtype=bool)
    np.logical_and.at(ok, point_of_entry, entry_ok)
    # a figure listed twice in one point has no single value (a forged point could hide a move that way)
    pair = point_of_entry * np.int64(n_nodes + 1) + np.where(inside, nodes, n_nodes)
    uniq, seen = np.unique(pair, return_counts=True)
    np.logical_and.at(ok, (uniq[seen > 1] // np.int64(n_nodes + 1)), False)
    skip = np.zeros(len(point_ids), dtype=bool)
    np.logical_or.at(skip, point_of_entry[entry], other_kind)
    # int64 sums could wrap around on huge values (four moves of 2^62 add up to 0 mod 2^64): a point with any
    # value or true count beyond 2^40 is checked one by one, in Python's exact integers
    np.logical_or.at(skip, point_of_entry, (np.abs(values) > EXACT_LIMIT) | (np.abs(true[safe]) > EXACT_LIMIT))
    step = (values - true[safe])[entry]
    delta = np.where(parent[rels] == safe[entry], -step, step)
    # one (point, relation) sum per pair: the residual after the moves
    key = point_of_entry[entry] * np.int64(max(1, len(table.relations))) + rels
    keys, inverse = np.unique(key, return_inverse=True)
    moved_sum = np.zeros(len(keys), dtype=np.int64)
    np.add.at(moved_sum, inverse, delta)
    pair_rel = keys % max(1, len(table.relations))
    pair_point = keys // max(1, len(table.relations))
    broken = eq[pair_rel] & (residual[pair_rel] + moved_sum != 0)
    np.logical_and.at(ok, pair_point[broken], False)
    return {int(p): bool(v) for p, v, s in zip(point_ids.tolist(), ok.tolist(), skip.tolist()) if not s}


__all__ = ["Certificate", "Verification", "earlier_digest", "frames_digest", "verify"]
