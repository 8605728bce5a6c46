"""The linear system of a release: every published (or withheld) figure and every relation between them.

Nodes are the figures an outsider could see: leaf cells (cell x bucket), margins (area x bucket at every
parent level of every zoning) and bucket totals. Relations are what the outsider knows of the structure:
for `presence` a parent equals the sum of its children (EQ); for `visitors`
max(children) <= parent <= sum(children) (UNION).

The release is sparse: a child that holds no unit is absent, and the outsider cannot tell it from a
withheld one. All absent, unobserved children of one relation are folded into a single `rest` variable
(true value 0, lower bound 0). The fold is exact: such children appear in no other relation (they are
empty leaves, or empty areas whose own relation is all empty), so the projection of the attacker's
feasible set is unchanged. For UNION relations the fold keeps `rest <= m * parent` (m children, each at
most the parent), so the attacker is not weakened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from spatial_release.levels import LEAF, RUNG_SEP, TOTAL
from spatial_release.suppression.rules import below_k

PUBLISHED, PRIMARY, SECONDARY, REST = "published", "primary", "secondary", "rest"
# An empty figure (true value 0) kept as its own node because it sits in relations of two rungs (see
# `ladder.add_absent_fine`): absent from the release like any empty figure, never a primary, free to withhold.
EMPTY = "empty"
EQ, UNION = "eq", "union"


@dataclass(frozen=True)
class Relation:
    kind: str  # EQ or UNION
    parent: int
    children: tuple[int, ...]
    rest: int | None = None  # node index of the folded absent children, if any
    rest_children: int | None = None  # how many children the rest stands for (None: unbounded)
    level: str = ""  # the parent's level, for reporting

    def members(self) -> tuple[int, ...]:
        return (self.parent, *self.children, *(() if self.rest is None else (self.rest,)))


@dataclass(frozen=True)
class Chain:
    """One zoning's levels from finest to coarsest (ending at `total`), with how to map children to parents.

    `parent_of[i](area_id)` maps an area at levels[i] to its parent at levels[i + 1];
    `children_count[i](parent_id)` is the number of areas the structure puts in that parent
    (None when unbounded, e.g. an infinite grid under the total).
    """

    levels: tuple[str, ...]
    parent_of: tuple[Callable[[str], str], ...]
    children_count: tuple[Callable[[str], int | None], ...]


@dataclass
class Table:
    level: list[str] = field(default_factory=list)
    area: list[str] = field(default_factory=list)
    bucket: list[object] = field(default_factory=list)
    value: list[int] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    index: dict[tuple[str, str, object], int] = field(default_factory=dict)
    # A-priori lower bounds an outsider knows for withheld figures, by node (default 0): a listed
    # structural zero absent from the release holds at least one unit (it would be published as 0).
    floor: dict[int, int] = field(default_factory=dict)
    # What the time ladder did (`release_system.protect_release`): figures offered per rung, climbing rounds.
    ladder: dict = field(default_factory=dict)
    # `relations_of`, kept while `relations` is the same list of the same length and the nodes the same number:
    # a protection asks for it once per audit round and per check, each a pass over every relation. Relations
    # are only ever appended (replacing one in place would leave the cache stale; nothing here does). Not pickled.
    _relations_of: tuple[list, int, list[list[int]]] | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        """A compact state (`TablePack.state`) for the worker processes and Spark tasks a protection sends
        tables to: pickling the objects one by one (a datetime per figure, a dataclass per relation, the
        index's key tuples) is slow and large, and all of it runs on the calling process."""
        return TablePack.of(self).state()

    def __setstate__(self, state: dict) -> None:
        self.level, self.area, self.bucket = (_decoded(state[name]) for name in ("level", "area", "bucket"))
        self.value, self.status = state["value"].tolist(), _decoded(state["status"])
        packed = state["relations"]
        kinds, levels = _decoded(packed["kind"]), _decoded(packed["level"])
        offsets, children = packed["offsets"].tolist(), packed["children"].tolist()
        rests, rest_children = _decoded_optional(packed["rest"]), _decoded_optional(packed["rest_children"])
        self.relations = [
            Relation(kind, parent, tuple(children[offsets[r] : offsets[r + 1]]), rest, count, level)
            for r, (kind, parent, rest, count, level) in enumerate(
                zip(kinds, packed["parent"].tolist(), rests, rest_children, levels)
            )
        ]
        # the index is every figure's key, as `add` made it: rebuilt here rather than pickled
        self.index = dict(zip(zip(self.level, self.area, self.bucket), range(len(self.value))))
        self.floor, self.ladder, self._relations_of = state["floor"], state["ladder"], None

    def add(self, level: str, area: str, bucket: object, value: int, status: str) -> int:
        key = (level, area, bucket)
        if key in self.index:
            return self.index[key]
        self.index[key] = len(self.value)
        self.level.append(level)
        self.area.append(area)
        self.bucket.append(bucket)
        self.value.append(int(value))
        self.status.append(status)
        return self.index[key]

    def add_many(
        self, level: str, areas: Sequence[str], buckets: Sequence[object], values: Sequence[int], statuses: Sequence[str]
    ) -> None:
        """`add` for many figures of one level at once (the true counts: hundreds of thousands of rows);
        the same nodes in the same order. Keys already present keep their node, as with `add`."""
        start = len(self.value)
        keys = [(level, area, bucket) for area, bucket in zip(areas, buckets)]
        fresh = dict(zip(keys, range(start, start + len(keys))))
        if len(fresh) != len(keys) or not fresh.keys().isdisjoint(self.index):
            for key, value, status in zip(keys, values, statuses):  # repeated keys: one at a time
                self.add(key[0], key[1], key[2], value, status)
            return
        self.index.update(fresh)
        self.level.extend([level] * len(keys))
        self.area.extend(areas)
        self.bucket.extend(buckets)
        self.value.extend(int(v) for v in values)
        self.status.extend(statuses)

    def __len__(self) -> int:
        return len(self.value)

    def lower_bound(self, i: int) -> int:
        """The least value an outsider allows a withheld figure (0 unless `floor` says more)."""
        return self.floor.get(i, 0)

    def primaries(self) -> list[int]:
        return [i for i, s in enumerate(self.status) if s == PRIMARY]

    def secondaries(self) -> list[int]:
        return [i for i, s in enumerate(self.status) if s == SECONDARY]

    def key(self, i: int) -> dict:
        bucket = self.bucket[i]
        return {
            "level": self.level[i],
            "area_id": self.area[i],
            "bucket_start": bucket.isoformat() if hasattr(bucket, "isoformat") else bucket,
        }

    def keys_frame(self, nodes: Sequence[int]) -> pd.DataFrame:
        """`key` of many nodes as columns (level, area_id, bucket_start), each distinct bucket formatted once."""
        buckets = [self.bucket[n] for n in nodes]
        text = {b: (b.isoformat() if hasattr(b, "isoformat") else b) for b in set(buckets)}
        return pd.DataFrame(
            {
                "level": [self.level[n] for n in nodes],
                "area_id": [self.area[n] for n in nodes],
                "bucket_start": [text[b] for b in buckets],
            }
        )

    def subtable(self, members: Sequence[int], relation_ids: Iterable[int]) -> Table:
        """The figures `members` (ascending) with the relations `relation_ids` (ascending; every member of each
        among `members`), renumbered in the same order: node i of the result is node members[i] here, so every
        order the algorithms follow (node order, relation order, each relation's members) is kept."""
        local = {node: i for i, node in enumerate(members)}
        sub = Table(
            level=[self.level[n] for n in members],
            area=[self.area[n] for n in members],
            bucket=[self.bucket[n] for n in members],
            value=[self.value[n] for n in members],
            status=[self.status[n] for n in members],
            # over the members, not the whole table's floors: this runs once per block
            floor={i: self.floor[n] for i, n in enumerate(members) if n in self.floor},
            ladder=dict(self.ladder),
        )
        sub.index = {(sub.level[i], sub.area[i], sub.bucket[i]): i for i in range(len(members))}
        for r in relation_ids:
            rel = self.relations[r]
            sub.relations.append(
                Relation(
                    rel.kind,
                    local[rel.parent],
                    tuple(local[c] for c in rel.children),
                    None if rel.rest is None else local[rel.rest],
                    rel.rest_children,
                    rel.level,
                )
            )
        return sub

    def relations_of(self) -> list[list[int]]:
        """For each node, the indices of the relations it belongs to (shared: callers must not change it)."""
        cached = self._relations_of
        if (
            cached is not None
            and cached[0] is self.relations
            and cached[1] == len(self.relations)
            and len(cached[2]) == len(self)
        ):
            return cached[2]
        out: list[list[int]] = [[] for _ in range(len(self))]
        for r, relation in enumerate(self.relations):
            for node in relation.members():
                out[node].append(r)
        self._relations_of = (self.relations, len(self.relations), out)
        return out


@dataclass(frozen=True)
class PackedTable:
    """A table as its compact state: unpickles as the `Table` itself. What `TablePack.subtable` hands to a
    worker, so the calling process never builds the sub-table's objects only to pickle them."""

    state: dict

    def __reduce__(self):
        return (_table_from_state, (self.state,))

    def unpack(self) -> Table:
        return _table_from_state(self.state)


def _table_from_state(state: dict) -> Table:
    table = Table.__new__(Table)
    table.__setstate__(state)
    return table


def as_table(table: Table | PackedTable) -> Table:
    return table.unpack() if isinstance(table, PackedTable) else table


@dataclass(frozen=True)
class TablePack:
    """A table's columns and relations as arrays (each text or bucket column as codes into its distinct
    values), made once; `state` is the whole table's pickled state, `subtable` any sub-table's, equal to
    what `Table.subtable` would pickle."""

    table: Table
    columns: dict[str, tuple[np.ndarray, list]]
    value: np.ndarray
    relations: dict

    @classmethod
    def of(cls, table: Table) -> TablePack:
        relations = table.relations
        count = len(relations)
        widths = np.fromiter((len(r.children) for r in relations), dtype=np.int64, count=count)
        return cls(
            table,
            {name: _codes(getattr(table, name)) for name in ("level", "area", "bucket", "status")},
            np.asarray(table.value, dtype=np.int64),
            {
                "kind": _codes([r.kind for r in relations]),
                "parent": np.fromiter((r.parent for r in relations), dtype=np.int64, count=count),
                "offsets": np.concatenate([[0], np.cumsum(widths)]).astype(np.int64),
                "children": np.fromiter((c for r in relations for c in r.children), dtype=np.int64, count=int(widths.sum())),
                "rest": _optional_ints([r.rest for r in relations]),
                "rest_children": _optional_ints([r.rest_children for r in relations]),
                "level": _codes([r.level for r in relations]),
            },
        )

    def state(self) -> dict:
        return {
            **self.columns,
            "value": self.value,
            "relations": self.relations,
            "floor": self.table.floor,
            "ladder": self.table.ladder,
        }

    def subtable(self, members: np.ndarray, relation_ids: np.ndarray) -> PackedTable:
        """`Table.subtable(members, relation_ids)` as a `PackedTable` (same preconditions: both ascending,
        every member of each relation among `members`), from the arrays alone."""
        members = np.asarray(members, dtype=np.int64)
        ids = np.asarray(relation_ids, dtype=np.int64)
        local = np.full(len(self.value), -1, dtype=np.int64)
        local[members] = np.arange(len(members))
        rel = self.relations
        starts, ends = rel["offsets"][ids], rel["offsets"][ids + 1]
        widths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
        positions = np.repeat(starts - offsets[:-1], widths) + np.arange(int(offsets[-1]))
        present, rests = rel["rest"][0][ids], rel["rest"][1][ids]
        parent, children = local[rel["parent"][ids]], local[rel["children"][positions]]
        rest = np.where(present, local[rests], 0)
        if (parent < 0).any() or (children < 0).any() or (rest < 0).any():
            raise ValueError("a relation of the sub-table has a member outside it")
        floor = self.table.floor
        return PackedTable(
            {
                **{name: _subset(coded, members) for name, coded in self.columns.items()},
                "value": self.value[members],
                "relations": {
                    "kind": _subset(rel["kind"], ids),
                    "parent": parent,
                    "offsets": offsets,
                    "children": children,
                    "rest": (present, rest),
                    "rest_children": (rel["rest_children"][0][ids], rel["rest_children"][1][ids]),
                    "level": _subset(rel["level"], ids),
                },
                # in member order, as `Table.subtable` makes it
                "floor": dict(sorted((int(local[n]), f) for n, f in floor.items() if local[n] >= 0)),
                "ladder": dict(self.table.ladder),
            }
        )


def _subset(coded: tuple[np.ndarray, list], rows: np.ndarray) -> tuple[np.ndarray, list]:
    codes, distinct = coded
    used, inverse = np.unique(codes[rows], return_inverse=True)
    return inverse.astype(np.int32), [distinct[u] for u in used.tolist()]


def _codes(values: Sequence) -> tuple[np.ndarray, list]:
    """`values` as (codes, distinct values in order of first appearance): each distinct object pickled once.
    Equal values share a code, as they share a key of the index (a dict) already."""
    first: dict = {}
    codes = np.array([first.setdefault(v, len(first)) for v in values], dtype=np.int64)
    return codes.astype(np.int32) if len(first) < 2**31 else codes, list(first)


def _decoded(coded: tuple[np.ndarray, list]) -> list:
    codes, distinct = coded
    if not len(codes):
        return []
    table = np.empty(len(distinct), dtype=object)
    table[:] = distinct
    return table[codes].tolist()


def _optional_ints(values: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    present = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    return present, np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=len(values))


def _decoded_optional(packed: tuple[np.ndarray, np.ndarray]) -> list[int | None]:
    present, ints = packed
    return [v if p else None for p, v in zip(present.tolist(), ints.tolist())]


def build_table(
    leaves: pd.DataFrame,
    margins: pd.DataFrame,
    chains: Sequence[Chain],
    k: int,
    measure: str,
    zero_leaves: Iterable[tuple[str, object]] | Mapping[str, Iterable[tuple[str, object]]] = (),
    prepare: Callable[[Table], object] | None = None,
) -> Table:
    """Nodes from the true counts (leaves: area_id, bucket_start, n; margins: level, area_id, bucket_start, n),
    primaries where 1 <= n < k, relations along every chain, and a rest variable where a parent has
    absent children. `zero_leaves` are (cell, bucket) structural zeros known to be 0: of the leaf level, or
    by leaf level (`{"cell": [...], "cell@1w": [...]}`) when the chains include time rungs. `prepare` adds
    nodes before any relation is built (the explicit empty figures of a time ladder). A chain of a coarser
    time rung (levels `<level>@<rung>`) is UNION whatever the measure: a unit counted in an area in a week was
    counted there on some day, possibly in other areas on other days, so a parent is no sum."""
    table = Table()
    _add_counts(table, leaves.assign(level=LEAF), k)
    _add_counts(table, margins, k)
    zeros_by_level = (
        {level: set(keys) for level, keys in zero_leaves.items()}
        if isinstance(zero_leaves, Mapping)
        else {LEAF: set(zero_leaves)}
    )
    if prepare is not None:
        prepare(table)
    for chain in chains:
        kind = EQ if measure == "presence" and RUNG_SEP not in chain.levels[0] else UNION
        for depth in range(len(chain.levels) - 1):
            _relate_level(table, chain, depth, kind, zeros_by_level.get(chain.levels[depth], set()))
    return table


def _add_counts(table: Table, counts: pd.DataFrame, k: int) -> None:
    """Every row of `counts` (level, area_id, bucket_start, n) as a node, in row order: a primary where below k."""
    if counts.empty:
        return
    n = counts["n"].to_numpy()
    statuses = np.where(below_k(n, k), PRIMARY, PUBLISHED).tolist()
    levels, areas = counts["level"].tolist(), counts["area_id"].tolist()
    buckets, values = _bucket_objects(counts["bucket_start"]), n.tolist()
    start = 0
    for end in [
        *np.flatnonzero(np.asarray(levels[1:], dtype=object) != np.asarray(levels[:-1], dtype=object)) + 1,
        len(levels),
    ]:  # one add_many per run of one level
        table.add_many(levels[start], areas[start:end], buckets[start:end], values[start:end], statuses[start:end])
        start = end


def _bucket_objects(column: pd.Series) -> list:
    """The buckets of a count column as Python objects. Datetimes become stdlib `datetime`s: equal to, and
    hashing like, the pandas Timestamps every caller looks them up with, but their hash is cached, and the
    system's index hashes each bucket several times. Each distinct
    bucket is converted once and shared by its rows (a few thousand buckets for hundreds of thousands of rows),
    so its hash is computed once too."""
    if pd.api.types.is_datetime64_any_dtype(column):
        codes, distinct = pd.factorize(column, use_na_sentinel=False)
        objects = np.empty(len(distinct), dtype=object)
        objects[:] = list(pd.DatetimeIndex(distinct).to_pydatetime())
        return objects[codes].tolist()
    return list(column)


def _relate_level(table: Table, chain: Chain, depth: int, kind: str, zero_leaves: set) -> None:
    child_level, parent_level = chain.levels[depth], chain.levels[depth + 1]
    parent_of, count_of = chain.parent_of[depth], chain.children_count[depth]
    zeros_in: dict[tuple[str, object], int] = {}
    if depth == 0:
        for cell, bucket in zero_leaves:
            if (child_level, cell, bucket) not in table.index:
                key = (parent_of(cell), bucket)
                zeros_in[key] = zeros_in.get(key, 0) + 1
    for parent_area, bucket, children in _sibling_groups(table, child_level, parent_of):
        parent = table.index.get((parent_level, parent_area, bucket))
        if parent is None and all(table.status[c] == EMPTY for c in children):
            parent = table.add(parent_level, parent_area, bucket, 0, EMPTY)  # empty too, and as unknown
        if parent is None:
            raise ValueError(
                f"no count for {parent_level} {parent_area} at {bucket}, parent of observed "
                f"{child_level} areas: the margins do not cover the hierarchy"
            )
        structural = count_of(parent_area)
        absent = None if structural is None else structural - len(children) - zeros_in.get((parent_area, bucket), 0)
        if absent is not None and absent < 0:
            raise ValueError(f"{parent_level} {parent_area} has more observed children than the structure allows")
        rest = None
        if absent is None or absent > 0:
            rest = table.add(f"{child_level}:rest", f"{parent_level}:{parent_area}", bucket, 0, REST)
        table.relations.append(Relation(kind, parent, tuple(sorted(children)), rest, absent, parent_level))


def _sibling_groups(
    table: Table, child_level: str, parent_of: Callable[[str], str]
) -> Iterator[tuple[str, object, tuple[int, ...]]]:
    """The figures of `child_level` grouped by (parent area, bucket): each group's parent area, bucket and
    children (ascending), the groups ordered by the bucket's text, then the parent area, then first
    appearance. Grouped in arrays, not a Python pass per figure and level: every release builds its system at
    least twice (protection and the audit check)."""
    nodes = np.flatnonzero(np.asarray(table.level, dtype=object) == child_level)
    if not len(nodes):
        return
    area_codes, areas = _factorized([table.area[i] for i in nodes])
    bucket_codes, buckets = _factorized([table.bucket[i] for i in nodes])
    # an area recurs in every bucket: its parent is worked out once
    parent_codes, parents = _factorized([parent_of(a) for a in areas])
    group_codes, first_seen = _factorized_ints(parent_codes[area_codes] * len(buckets) + bucket_codes)
    group_parent, group_bucket = first_seen // len(buckets), first_seen % len(buckets)
    bucket_rank = _ranks([str(b) for b in buckets])
    parent_rank = _ranks(parents)
    order = np.lexsort((np.arange(len(first_seen)), parent_rank[group_parent], bucket_rank[group_bucket]))
    by_group = np.argsort(group_codes, kind="stable")  # nodes ascending inside each group
    bounds = np.concatenate([[0], np.cumsum(np.bincount(group_codes, minlength=len(first_seen)))]).tolist()
    members = nodes[by_group].tolist()
    for g in order.tolist():
        yield parents[group_parent[g]], buckets[group_bucket[g]], tuple(members[bounds[g] : bounds[g + 1]])


def _factorized(values: list) -> tuple[np.ndarray, list]:
    """(codes, distinct values in order of first appearance), equal values one code, as dict keys are."""
    first: dict = {}
    codes = np.array([first.setdefault(v, len(first)) for v in values], dtype=np.int64)
    return codes, list(first)


def _factorized_ints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes in order of first appearance, the distinct values in that order) of integers."""
    codes, distinct = pd.factorize(values)
    return codes.astype(np.int64), np.asarray(distinct, dtype=np.int64)


def _ranks(values: list) -> np.ndarray:
    """Each value's rank in sorted order, equal values one rank (as a sort key compares them)."""
    holder = np.empty(len(values), dtype=object)
    holder[:] = values
    return np.unique(holder, return_inverse=True)[1].reshape(-1).astype(np.int64)


def grid_chain(size_m: int, parents_m: Sequence[int], level_names: Sequence[str]) -> Chain:
    """The chain of a grid: leaf cells, each parent level, then the total (unbounded: the grid is infinite)."""
    sizes = [size_m, *parents_m]

    def parent_fn(child_size: int, parent_size: int) -> Callable[[str], str]:
        def parent_of(area: str) -> str:
            east, north = area.removeprefix(f"{child_size}m").removeprefix("E").split("N")
            return f"{parent_size}mE{int(east) // parent_size * parent_size}N{int(north) // parent_size * parent_size}"

        return parent_of

    parents = [parent_fn(a, b) for a, b in zip(sizes, sizes[1:])]
    counts = [(lambda ratio: lambda _area: ratio)((b // a) ** 2) for a, b in zip(sizes, sizes[1:])]
    return Chain(
        levels=(LEAF, *level_names, TOTAL),
        parent_of=(*parents, lambda _area: TOTAL),
        children_count=(*counts, lambda _area: None),
    )


def zones_chain(leaf_level: str, hierarchy: pd.DataFrame, parent_levels: Sequence[str], total_level: str = TOTAL) -> Chain:
    """The chain of a zoning from its full zone list (every zone, observed or not): `hierarchy` has
    `cell_id` and one column per parent level."""
    levels = [leaf_level, *parent_levels]
    columns = ["cell_id", *parent_levels]
    parent_maps = []
    count_maps = []
    for child_col, parent_col in zip(columns, columns[1:]):
        pairs = hierarchy[[child_col, parent_col]].drop_duplicates()
        if pairs[child_col].duplicated().any():
            bad = pairs[pairs[child_col].duplicated()][child_col].iloc[0]
            raise ValueError(f"area {bad!r} of level {child_col!r} has more than one {parent_col!r} parent")
        parent_maps.append(dict(zip(pairs[child_col], pairs[parent_col])).__getitem__)
        count_maps.append(pairs.groupby(parent_col)[child_col].count().to_dict().__getitem__)
    top = hierarchy[columns[-1]].nunique()
    return Chain(
        levels=(*levels, total_level),
        parent_of=(*parent_maps, lambda _area: total_level),
        children_count=(*count_maps, lambda _area: int(top)),
    )


def cross_classified_table(
    leaf_counts: dict[tuple[str, str], int],
    space_parent: dict[str, str],
    time_parent: dict[str, str],
    space_level: dict[str, str],
    time_level: dict[str, str],
    k: int,
    zeros_published: bool,
) -> Table:
    """A complete two-dimensional table (space hierarchy x time hierarchy) with every relation of both.

    `leaf_counts` maps (space leaf, time leaf) to its count; `space_parent` / `time_parent` map each
    code to its parent code (the roots map to nothing). Every combination of a space node and a time
    node is a figure; those that hold no unit are explicit nodes of value 0: published (known zeros, as
    in tau-Argus) when `zeros_published`, else withheld at no cost (our releases leave empty cells out,
    and an empty cell here sits in two relations, so it cannot be folded into a rest variable).
    Every count is a sum of leaf counts, so all relations are EQ. A node's level is
    "<space level>x<time level>" and its key (level, space code, time code).
    """

    def node(s: str, t: str) -> int:
        return table.index[(f"{space_level[s]}x{time_level[t]}", s, t)]

    def ancestors(code: str, parent: dict[str, str]) -> list[str]:
        chain = [code]
        while chain[-1] in parent:
            chain.append(parent[chain[-1]])
        return chain

    space_nodes = sorted(set(space_parent) | set(space_parent.values()))
    time_nodes = sorted(set(time_parent) | set(time_parent.values()))
    totals: dict[tuple[str, str], int] = {}
    for (s, t), n in leaf_counts.items():
        for sa in ancestors(s, space_parent):
            for ta in ancestors(t, time_parent):
                totals[(sa, ta)] = totals.get((sa, ta), 0) + n
    table = Table()
    for s in space_nodes:
        for t in time_nodes:
            n = totals.get((s, t), 0)
            status = PRIMARY if n > 0 and below_k(n, k) else PUBLISHED if n > 0 or zeros_published else SECONDARY
            table.add(f"{space_level[s]}x{time_level[t]}", s, t, n, status)
    space_children: dict[str, list[str]] = {}
    for child, parent in space_parent.items():
        space_children.setdefault(parent, []).append(child)
    time_children: dict[str, list[str]] = {}
    for child, parent in time_parent.items():
        time_children.setdefault(parent, []).append(child)
    for parent, children in sorted(space_children.items()):
        for t in time_nodes:
            table.relations.append(
                Relation(EQ, node(parent, t), tuple(node(c, t) for c in sorted(children)), level=space_level[parent])
            )
    for parent, children in sorted(time_children.items()):
        for s in space_nodes:
            table.relations.append(
                Relation(EQ, node(s, parent), tuple(node(s, c) for c in sorted(children)), level=time_level[parent])
            )
    return table
