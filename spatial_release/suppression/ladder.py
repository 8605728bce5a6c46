"""Time generalisation ladders: where a figure fails k at the policy's bucket, the release shows the same area
at the finest coarser time rung that passes (a day -> its week -> the whole period), inside the one
suppression system and its audit.

Every rung is counted on its own: a coarser figure is the number of distinct units counted in the area in
at least one of the policy's buckets inside the coarser bucket (one bike on seven days is one unit of the
week, never seven; for `visitors` this is exactly the visitors of the week). So, at every level and for
both measures, max(days) <= week <= sum(days): a UNION relation between rungs. Across space, a coarser
rung is a union too (a bike counted in block A on Monday and in block B on Tuesday is in both weeks):
UNION, even under `presence`, whose identities hold at the policy's bucket only. The audit models exactly
these. Empty figures that sit in relations of two rungs are explicit variables (`add_absent_fine`), so the
attacker the audit models knows no less than a real one.

Which coarser figures are offered: a coarser figure is published only where it is needed, that is where one
of the finer figures it covers is a primary (below k) at the rung below; elsewhere it is withheld at no cost
(`UNOFFERED`), like an empty cell, and is a free complement. So each withheld figure climbs, locally, to the
finest rung above it that passes k, and no cut line is ever drawn from the data: rung boundaries are the
policy's buckets only. Coarser figures below k are primaries like any other, whether offered or not: an
outsider who could derive one from the published figures learns a count below k.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from spatial_release.levels import LEAF, at_rung, rung_of, space_level
from spatial_release.progress import Progress, ProgressEvent
from spatial_release.suppression.table import EMPTY, PRIMARY, PUBLISHED, REST, UNION, Relation, Table

UNOFFERED = "unoffered"  # a coarser-rung figure nobody needs: withheld at no cost, never published


@dataclass(frozen=True)
class TimeLink:
    """Rung `fine` (None: the policy's bucket) under rung `coarse`: which coarse bucket holds each fine one."""

    fine: str | None
    coarse: str
    parents: tuple[tuple[pd.Timestamp, pd.Timestamp], ...]  # (fine bucket start, coarse bucket start), UTC
    # Coarse buckets cut by the period's edge (the week across the end of a quarter): counted, so that the
    # relations between rungs stay exact, but never published: a key (area, bucket start) means one figure,
    # and a later release of the population publishes the whole bucket under that key.
    cut: tuple[pd.Timestamp, ...] = ()

    def parent_map(self) -> dict[pd.Timestamp, pd.Timestamp]:
        return {pd.Timestamp(a): pd.Timestamp(b) for a, b in self.parents}

    def coarse_buckets(self) -> list[pd.Timestamp]:
        return sorted({pd.Timestamp(b) for _, b in self.parents})

    def digest_payload(self) -> list:
        return [self.fine, self.coarse, [[str(pd.Timestamp(a)), str(pd.Timestamp(b))] for a, b in self.parents]]


def time_links(rungs: list[str], parents_of, cut_of=lambda rung: ()) -> tuple[TimeLink, ...]:
    """The links of a ladder (policy bucket, then `rungs`), with `parents_of(fine, coarse)` giving the bucket
    map (`counting.buckets.rung_parents`) and `cut_of(rung)` the rung's buckets cut by the period's edges
    (`counting.buckets.cut_buckets`)."""
    links, fine = [], None
    for rung in rungs:
        mapping = parents_of(fine, rung)
        links.append(
            TimeLink(
                fine,
                rung,
                tuple(sorted((pd.Timestamp(a), pd.Timestamp(b)) for a, b in mapping.items())),
                tuple(sorted(pd.Timestamp(b) for b in cut_of(rung))),
            )
        )
        fine = rung
    return tuple(links)


def buckets_at_rungs(links: tuple[TimeLink, ...]) -> dict[str, dict[pd.Timestamp, pd.Timestamp]]:
    """Per rung of the ladder, the coarse bucket holding each of the policy's buckets (the links composed)."""
    if not links:
        return {}
    out, current = {}, {pd.Timestamp(a): pd.Timestamp(a) for a, _ in links[0].parents}
    for link in links:
        parent = link.parent_map()
        current = {fine: parent[bucket] for fine, bucket in current.items()}
        out[link.coarse] = current
    return out


def _fine_nodes(table: Table, link: TimeLink):
    """(node, coarse key) of every figure at the link's fine rung."""
    parent = link.parent_map()
    for i in range(len(table)):
        if table.status[i] == REST or rung_of(table.level[i]) != link.fine:
            continue
        coarse_level = at_rung(space_level(table.level[i]), link.coarse)
        yield i, (coarse_level, table.area[i], parent[pd.Timestamp(table.bucket[i])])


def add_absent_fine(
    table: Table, links: tuple[TimeLink, ...], known_zeros: Mapping[str, set[tuple[str, pd.Timestamp]]] | None = None
) -> int:
    """Make every empty finer figure under a non-empty (or already explicit) coarser one an explicit `EMPTY`
    node, coarsest link first, so that each empty figure is one variable shared by all its relations (its
    space relation at its rung and its time relations). Folding such figures into per-relation rest variables
    would decouple them, and an attacker who knows the structure would then be stronger than the audit: a
    block absent on a Monday is at most its published week. Listed structural zeros (`known_zeros`, keys by
    leaf level) are known to be 0 and stay out. Returns how many nodes were added."""
    known_zeros = known_zeros or {}
    added = 0
    for link in reversed(links):
        children: dict[pd.Timestamp, list[pd.Timestamp]] = {}
        for fine, coarse in link.parents:
            children.setdefault(pd.Timestamp(coarse), []).append(pd.Timestamp(fine))
        coarse_nodes = [i for i in range(len(table)) if table.status[i] != REST and rung_of(table.level[i]) == link.coarse]
        for i in coarse_nodes:
            level = at_rung(space_level(table.level[i]), link.fine)
            zeros = known_zeros.get(level, set())
            for bucket in children[pd.Timestamp(table.bucket[i])]:
                key = (level, table.area[i], bucket)
                if key not in table.index and (table.area[i], bucket) not in zeros:
                    table.add(level, table.area[i], bucket, 0, EMPTY)
                    added += 1
    return added


def relate_time(table: Table, link: TimeLink) -> int:
    """Add, for every figure of the link's coarse rung, the relation with the figures of the same area at the
    fine rung inside its bucket: max(fine) <= coarse <= sum(fine) (UNION), for both measures, since a coarser
    figure counts the units counted in the area in at least one finer bucket. Empty finer figures are
    explicit nodes (`add_absent_fine`) or listed structural zeros, known to be 0. Returns how many."""
    groups: dict[tuple, list[int]] = {}
    for i, key in _fine_nodes(table, link):
        groups.setdefault(key, []).append(i)
    for key, children in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1], str(item[0][2]))):
        parent = table.index.get(key)
        if parent is None:
            raise ValueError(
                f"no count for {key[0]} {key[1]} at {key[2]}, the {link.coarse} bucket of observed "
                f"{link.fine or 'finest'} figures: the counts do not cover the time ladder"
            )
        table.relations.append(Relation(UNION, parent, tuple(sorted(children)), None, None, key[0]))
    return len(groups)


def offer_needed(table: Table, links: tuple[TimeLink, ...], climb: frozenset[int] = frozenset()) -> dict[str, int]:
    """Withhold, as `UNOFFERED`, every coarser-rung figure that passes k but covers no primary at the rung
    below (rung by rung, finest first, so a week that is itself a primary makes its period needed). Figures
    of `climb` (withheld before protection: by an earlier release of the population, or to coarsen a risk
    zone) need their coarser figure as a primary does. Returns how many figures each rung offers."""
    offered: dict[str, int] = {}
    for link in links:
        needed = {key for i, key in _fine_nodes(table, link) if table.status[i] == PRIMARY or i in climb}
        count = 0
        for i in range(len(table)):
            if rung_of(table.level[i]) != link.coarse or table.status[i] != PUBLISHED:
                continue
            if (table.level[i], table.area[i], pd.Timestamp(table.bucket[i])) in needed:
                count += 1
            else:
                table.status[i] = UNOFFERED
        offered[link.coarse] = count
    return offered


MAX_CLIMBS = 6  # protection rounds of climb_to_budget (each offers more figures and protects again)


def _leaf_ancestors(table: Table, links: tuple[TimeLink, ...]) -> dict[int, list[int]]:
    """For each figure of the main cells at the policy's bucket, its coarser figures of the same cell (the
    nodes that exist), finest rung first."""
    maps = [link.parent_map() for link in links]
    out: dict[int, list[int]] = {}
    for i in range(len(table)):
        if table.level[i] != LEAF or table.status[i] in (REST, EMPTY):
            continue
        bucket, chain = pd.Timestamp(table.bucket[i]), []
        for link, parent in zip(links, maps):
            bucket = parent[bucket]
            j = table.index.get((at_rung(LEAF, link.coarse), table.area[i], bucket))
            if j is not None:
                chain.append(j)
        out[i] = chain
    return out


def unshown_leaf_units(table: Table, ancestors: dict[int, list[int]]) -> tuple[int, int]:
    """(unit counts of the main cells shown at no rung of their own cell, all their unit counts)."""
    unshown = sum(
        table.value[i]
        for i, chain in ancestors.items()
        if table.status[i] != PUBLISHED and all(table.status[j] != PUBLISHED for j in chain)
    )
    return unshown, sum(table.value[i] for i in ancestors)


def cut_figures(table: Table, links: tuple[TimeLink, ...], base_cut: tuple = ()) -> list[int]:
    """The publishable figures whose bucket is cut by the period's edge: at the policy's bucket (`base_cut`,
    e.g. a week across the end of a month) and at each rung (`TimeLink.cut`); those below k stay primaries
    (an outsider who derives one learns a count below k)."""
    cut = {(None, pd.Timestamp(b)) for b in base_cut} | {(link.coarse, pd.Timestamp(b)) for link in links for b in link.cut}
    if not cut:
        return []
    return [
        i
        for i in range(len(table))
        if table.status[i] == PUBLISHED and (rung_of(table.level[i]), pd.Timestamp(table.bucket[i])) in cut
    ]


def _choose_climbs(table: Table, ancestors: dict[int, list[int]], need: int, never: frozenset[int]) -> list[int]:
    """Coarser cell figures to offer, greedily by unit counts they would show per policy bucket they merge
    (the clinical ladders' "most information kept per unit of detail lost"), until they show `need` more
    unit counts (at least one figure). Lazy greedy: a figure's gain only falls as others are chosen."""
    import heapq

    covers: dict[int, list[int]] = {}
    for leaf, chain in ancestors.items():
        for j in chain:
            covers.setdefault(j, []).append(leaf)
    shown = {
        leaf
        for leaf, chain in ancestors.items()
        if table.status[leaf] == PUBLISHED or any(table.status[j] == PUBLISHED for j in chain)
    }

    def gain(j: int) -> float:
        return sum(table.value[leaf] for leaf in covers[j] if leaf not in shown) / len(covers[j])

    heap = [
        (-gain(j), table.level[j], table.area[j], str(table.bucket[j]), j)
        for j in sorted(covers)
        if table.status[j] == UNOFFERED and j not in never
    ]
    heapq.heapify(heap)
    chosen: list[int] = []
    gained = 0
    while heap and (gained < need or not chosen):
        neg, level, area, bucket, j = heapq.heappop(heap)
        current = gain(j)
        if current <= 0:
            continue
        if current < -neg - 1e-12:  # stale: others shown some of its cells since it was queued
            heapq.heappush(heap, (-current, level, area, bucket, j))
            continue
        chosen.append(j)
        newly = [leaf for leaf in covers[j] if leaf not in shown]
        gained += sum(table.value[leaf] for leaf in newly)
        shown.update(newly)
    return chosen


def climb_to_budget(
    table: Table,
    links: tuple[TimeLink, ...],
    budget: float,
    protect_once,
    progress: Progress | None = None,
    never: frozenset[int] = frozenset(),
):
    """Suppression budget as a target: protect with no coarser figure offered; while the main cells' unit
    counts shown at no rung exceed `budget`, offer the coarser cell figures that show the most of them per
    merged bucket (`_choose_climbs`) and protect again. Other levels never climb here (the budget is about
    the cells). Stops when the budget holds, when nothing is left to offer (the budget check then blocks the
    release) or after MAX_CLIMBS rounds. `never`: figures withheld whatever the budget (cut buckets, figures
    an earlier release withheld). Records what it did in `table.ladder`; returns the last protection log."""
    for i in range(len(table)):
        if rung_of(table.level[i]) is not None and table.status[i] == PUBLISHED:
            table.status[i] = UNOFFERED
    ancestors = _leaf_ancestors(table, links)
    log = protect_once()
    unshown, total = unshown_leaf_units(table, ancestors)
    before, offered, rounds = (unshown / total if total else 0.0), {link.coarse: 0 for link in links}, 0
    while total and unshown / total > budget and rounds < MAX_CLIMBS:
        chosen = _choose_climbs(table, ancestors, int(unshown - budget * total) + 1, never)
        if not chosen:
            break
        for j in chosen:
            table.status[j] = PUBLISHED
            rung = rung_of(table.level[j])
            if rung is None:  # _choose_climbs offers coarser figures only
                raise ValueError(f"{table.key(j)} is not a coarser figure and cannot be offered")
            offered[rung] += 1
        rounds += 1
        if progress:
            progress(ProgressEvent("suppression", f"suppression: climbed the time ladder (round {rounds})"))
        log = protect_once()
        unshown, total = unshown_leaf_units(table, ancestors)
    table.ladder = {
        "climb": "to_budget",
        "budget": budget,
        "rounds": rounds,
        "offered": offered,
        "unshown_share_before": before,
        "unshown_share_after": unshown / total if total else 0.0,
        "budget_holds": (unshown / total if total else 0.0) <= budget,
    }
    return log


__all__ = [
    "MAX_CLIMBS",
    "TimeLink",
    "UNOFFERED",
    "add_absent_fine",
    "buckets_at_rungs",
    "climb_to_budget",
    "cut_figures",
    "offer_needed",
    "relate_time",
    "time_links",
    "unshown_leaf_units",
]
