"""The candidate's released key sets, from the work area: every published key (a cell, a parent area, a linked
zoning's area, a coarser rung of the time ladder, each at its bucket) a unit was counted in. The protection
loop and the risk step both read them; `keep_released_keys` keeps this release's for later releases and
reviews."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from spatial_release.fileio import atomic_path, scratch_folder, sha256_file
from spatial_release.levels import LEAF
from spatial_release.policy import Policy
from spatial_release.risk import keysets
from spatial_release.risk.estimator import KeySets
from spatial_release.stages import reuse
from spatial_release.stages.attack import _linked_membership, linked_areas_of_main
from spatial_release.stages.context import LADDER_BUCKETS, CandidateTables, ReleaseContext, WorkArea
from spatial_release.stages.count import sql_path
from spatial_release.suppression.ladder import buckets_at_rungs

KEY_FORMAT = "%Y-%m-%dT%H:%MZ"  # a key is "<cell id>@<UTC start of its bucket>"


def parquet_scan(path: Path) -> str:
    """DuckDB's relation of a Parquet file."""
    return f"read_parquet('{sql_path(path)}')"


def write_ladder_buckets(ctx: ReleaseContext) -> Path | None:
    """The coarse bucket of each policy bucket at every rung of the policy's time ladder (public structure,
    no unit in it), for the risk stage's keys; None without a ladder."""
    links = ctx.structure.time_links if ctx.policy.time.ladder else ()
    if not links:
        return None
    rows = [(rung, fine, coarse) for rung, parent in buckets_at_rungs(links).items() for fine, coarse in parent.items()]
    frame = pd.DataFrame(rows, columns=["rung", "fine", "coarse"])
    path = ctx.area.counts / LADDER_BUCKETS
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)
    return path


AREAS = "risk_areas.parquet"  # counts/: every published area level each leaf belongs to (public structure)


LINKED_MEMBERSHIP = "linked_membership.internal.parquet"  # counts/: per unit, its areas of the linked zonings


def membership_cells(area: WorkArea) -> pd.Series:
    """The distinct cells of the membership, in order, read in DuckDB within its memory limit. The membership
    has a row per (unit, cell, bucket): its cell column alone would not fit in memory read into pandas."""
    with scratch_folder(area.risk, "risk-cells") as spill:
        con = keysets.connect(spill)
        try:
            query = (
                f"SELECT DISTINCT cell_id FROM {parquet_scan(area.counts / 'membership.internal.parquet')} ORDER BY cell_id"
            )
            return con.sql(query).to_arrow_table().column(0).to_pandas()
        finally:
            con.close()


def write_risk_areas(ctx: ReleaseContext) -> Path | None:
    """For the uniqueness keys of every zoning (`released_keys_sql`): the areas each leaf is in at the main
    geometry's parent levels and, for the linked zonings, the leaf itself and its parents, with the main
    geometry's cell holding it (whose risk zone the key takes), and each unit's linked areas per bucket
    (from the validated pings, as the attacks count them). None when the geometry has neither."""
    geometry = ctx.policy.geometry
    if ctx.policy.risk is None:  # no risk zones: assess_risk refuses the release, saying so
        return None
    rows = []
    levels = geometry.level_names()
    if levels:
        hierarchy = ctx.locator.hierarchy(membership_cells(ctx.area))
        for level in levels:
            rows.append(
                pd.DataFrame(
                    {
                        "zoning": LEAF,
                        "leaf": hierarchy["cell_id"],
                        "level": level,
                        "area_id": hierarchy[level],
                        "main_cell": hierarchy["cell_id"],
                    }
                )
            )
    linked = []
    for spec in geometry.linked:
        membership = _linked_membership(ctx, spec.name).assign(zoning=spec.name)
        linked.append(membership)
        leaves = membership["cell_id"].drop_duplicates()
        parents = ctx.layers.linked[spec.name].parent_table().set_index("cell_id").reindex(leaves.to_numpy())
        main = linked_areas_of_main(ctx, spec.name, leaves.to_numpy())
        for level in [spec.name, *(p.level for p in spec.parents)]:
            area = leaves.to_numpy() if level == spec.name else parents[level].to_numpy()
            rows.append(
                pd.DataFrame(
                    {"zoning": spec.name, "leaf": leaves.to_numpy(), "level": level, "area_id": area, "main_cell": main}
                )
            )
    if not rows:
        return None
    areas = pd.concat(rows, ignore_index=True).dropna()
    # A key belongs to one risk zone (the anchor of "I know she was in z"): an area over several risk zones
    # (a 2 km parent over four 1 km zones, a tract across two wards) is left out of the keys; the attacks
    # still read it (stages.attack views every zoning).
    areas["zone"] = ctx.risk_zones(areas["main_cell"]).reindex(areas["main_cell"]).to_numpy() if len(areas) else []
    spread = areas.groupby(["zoning", "level", "area_id"])["zone"].transform("nunique")
    path = ctx.area.counts / AREAS
    with atomic_path(path) as tmp:
        areas[spread == 1].drop(columns="zone").to_parquet(tmp, index=False)
    if linked:
        with atomic_path(ctx.area.counts / LINKED_MEMBERSHIP) as tmp:
            pd.concat(linked, ignore_index=True).to_parquet(tmp, index=False)
    return path


@dataclass(frozen=True)
class _KeyPart:
    """Published keys joined to the memberships counted in them. `members`: rows unit, cell_id, bucket_start
    (and zoning, for the linked zonings' areas); `published`: relations of each published key once per leaf
    area it covers (leaf, bucket_start, key, cell_id: the main geometry's cell whose risk zone the key takes),
    formatted on the published side (a few hundred thousand rows), not per membership row."""

    members: str
    published: tuple[str, ...]
    zoned: bool = False

    @property
    def on(self) -> str:
        same_zoning = " AND p.zoning = m.zoning" if self.zoned else ""
        return f"p.leaf = m.cell_id AND p.bucket_start = m.bucket_start{same_zoning}"

    def rows(self) -> str:
        """One join per published relation: the key set file's rows come grouped by kind of key, which
        compresses a third smaller than one join over all of them."""
        return " UNION ALL ".join(
            f"SELECT m.unit, p.key, p.cell_id FROM {self.members} m JOIN ({published}) p ON {self.on}"
            for published in self.published
        )

    def keys(self) -> str:
        return " UNION ALL ".join(f"SELECT key, cell_id FROM ({published})" for published in self.published)

    def coded(self) -> str:
        """The rows coded through risk_units and risk_keys (`keysets.KeySource`) in one join of the members
        with every published relation: only the published side's keys are looked up by name."""
        zoning = "q.zoning, " if self.zoned else ""
        published = " UNION ALL ".join(
            f"SELECT {zoning}q.leaf, q.bucket_start, rk.k FROM ({p}) q JOIN risk_keys rk ON rk.key = q.key"
            for p in self.published
        )
        return (
            f"SELECT ru.u, p.k FROM {self.members} m JOIN risk_units ru ON ru.unit = m.unit "
            f"JOIN ({published}) p ON {self.on}"
        )


def _margin_keys(margins: str) -> str:
    """The candidate's published margins (level, area_id, bucket_start, key "<level>:<area>@<start>") from the
    relation `margins`."""
    return (
        f"(SELECT level, area_id, bucket_start, level || ':' || area_id || '@' || strftime(bucket_start, "
        f"'{KEY_FORMAT}') AS key FROM (SELECT DISTINCT level, area_id, bucket_start FROM {margins}))"
    )


def _rung_keys(margins: str) -> str:
    """The candidate's published cell figures at the rungs of its time ladder (rung, area_id, bucket_start,
    key "<cell>@<rung>@<start>") from the relation `margins`."""
    rung = f"substr(level, {len(LEAF) + 2})"
    return (
        f"(SELECT {rung} AS rung, area_id, bucket_start, area_id || '@' || {rung} || '@' || strftime(bucket_start, "
        f"'{KEY_FORMAT}') AS key FROM (SELECT DISTINCT level, area_id, bucket_start "
        f"FROM {margins} WHERE starts_with(level, '{LEAF}@')))"
    )


HELD_CELLS, HELD_MARGINS = "candidate_cells", "candidate_margins"  # a held candidate's relations in DuckDB


def _candidate_relations(area: WorkArea, held: CandidateTables | None) -> tuple[str, str, dict[str, pd.DataFrame]]:
    """The relations of the candidate's cells and margins: the files, or the frames of the candidate the
    protection loop holds (to register on the connection)."""
    if held is None:
        return parquet_scan(area.candidate / "cells.parquet"), parquet_scan(area.candidate / "margins.parquet"), {}
    return HELD_CELLS, HELD_MARGINS, {HELD_CELLS: held.cells, HELD_MARGINS: held.margins}


def _key_parts(area: WorkArea, ladder: Path | None = None, held: CandidateTables | None = None) -> list[_KeyPart]:
    """Every published key a unit is counted in (see `released_keys_sql`): one part for the membership (its
    cells, the parent areas of the main geometry and the cells at each rung of the time ladder: one join per
    membership row, not one per kind of key) and one for the linked zonings' memberships."""
    membership = parquet_scan(area.counts / "membership.internal.parquet")
    cells, margins, _ = _candidate_relations(area, held)
    published = [
        f"SELECT cell_id AS leaf, bucket_start, cell_id || '@' || strftime(bucket_start, '{KEY_FORMAT}') AS key, "
        f"cell_id FROM (SELECT DISTINCT cell_id, bucket_start FROM {cells})"
    ]
    linked_part = []
    areas = area.counts / AREAS
    if areas.exists():
        zoned = (
            "SELECT a.zoning, a.leaf, g.bucket_start, g.key, a.main_cell AS cell_id "
            f"FROM {parquet_scan(areas)} a JOIN {_margin_keys(margins)} g ON g.level = a.level AND g.area_id = a.area_id"
        )
        published.append(f"SELECT leaf, bucket_start, key, cell_id FROM ({zoned}) WHERE zoning = '{LEAF}'")
        linked = area.counts / LINKED_MEMBERSHIP
        if linked.exists():
            linked_part.append(_KeyPart(parquet_scan(linked), (zoned,), zoned=True))
    if ladder is not None:
        published.append(
            "SELECT c.area_id AS leaf, r.fine AS bucket_start, c.key, c.area_id AS cell_id "
            f"FROM {_rung_keys(margins)} c JOIN {parquet_scan(ladder)} r ON r.rung = c.rung AND r.coarse = c.bucket_start"
        )
    return [_KeyPart(membership, tuple(published)), *linked_part]


def released_keys_sql(area: WorkArea, ladder: Path | None = None, held: CandidateTables | None = None) -> str:
    """A DuckDB query of unit, key, cell_id for every published (cell, bucket) each unit was counted in,
    joining the membership to the candidate's cells in DuckDB (UTC session: keys name UTC instants). A
    streaming join, no DISTINCT: the membership has one row per (unit, cell, bucket), and the key sets
    count a repeated (unit, key) once anyway (risk.keysets). With a time ladder (`ladder`, see
    `write_ladder_buckets`) every published coarser cell figure is a key too ("<cell>@<rung>@<start>") of the
    units counted in that cell in one of its buckets: what an outsider learns from the week's figure. Every
    published area of the main geometry's parent levels and of the linked zonings a unit is counted in is a key
    too (`write_risk_areas`: "<level>:<area>@<start>"), so the bound counts every zoning."""
    return " UNION ALL ".join(part.rows() for part in _key_parts(area, ladder, held))


def released_key_source(
    area: WorkArea, ladder: Path | None = None, held: CandidateTables | None = None
) -> keysets.KeySource:
    """The same key sets as `released_keys_sql`, for `keysets.load_key_sets` to code straight from the work
    area: the units of the memberships, the published keys, and the memberships joined to the published keys
    by code. No key is named per membership row, and no key set file is read back (coding one scans its key
    strings four times)."""
    parts = _key_parts(area, ladder, held)
    members = list(dict.fromkeys(part.members for part in parts))
    return keysets.KeySource(
        units=" UNION ALL ".join(f"SELECT unit FROM {m}" for m in members),
        keys=" UNION ALL ".join(part.keys() for part in parts),
        pairs=" UNION ALL ".join(part.coded() for part in parts),
        exact=False,
        frames=_candidate_relations(area, held)[2],
    )


def write_released_keys(area: WorkArea, path: Path, ladder: Path | None = None, held: CandidateTables | None = None) -> None:
    """Write the candidate's per-unit key sets (unit, key, cell_id) to `path`, in DuckDB: nothing per
    membership row is held in Python."""
    with scratch_folder(area.risk, "risk-keys") as spill, atomic_path(path) as tmp:
        con = keysets.connect(spill)
        try:
            for name, frame in _candidate_relations(area, held)[2].items():
                con.register(name, frame)
            con.execute(f"COPY ({released_keys_sql(area, ladder, held)}) TO '{sql_path(tmp)}' (FORMAT parquet)")
        finally:
            con.close()


def key_set_path(work_root: Path, policy: Policy, period_label: str) -> Path:
    return WorkArea(work_root / policy.name / period_label).unit_keys


def key_set_rows(path: Path) -> pd.DataFrame:
    """The (unit, key, cell_id) rows of a key set file of either kind, for a notebook or a test (whole in
    memory: small releases only)."""
    con = duckdb.connect()
    try:
        return con.sql(keysets.file_rows_query(path)).df()
    finally:
        con.close()


# Up to this many rows this release's key sets are coded straight from the work area (`released_key_source`);
# above, from a key set file, whose road holds at any size; the coded join runs out of DuckDB's memory limit
# somewhere between (bench/RESULTS.md).
CODED_UP_TO = 150_000_000


def coarser_keys_sql(area: WorkArea, ladder: Path, rung: str, k: int) -> str:
    """The key sets of a release that would show the cells at `rung` only: every cell figure of that rung that
    passes k (true counts: no complementary suppression, so at least as many keys as such a release would
    show) as a key of each unit counted in it."""
    level = f"{LEAF}@{rung}"
    return (
        "SELECT m.unit, c.key, m.cell_id "
        f"FROM {parquet_scan(area.counts / 'membership.internal.parquet')} m "
        f"JOIN {parquet_scan(ladder)} r ON r.fine = m.bucket_start AND r.rung = '{rung}' "
        f"JOIN (SELECT area_id, bucket_start, area_id || '@{rung}@' || strftime(bucket_start, '{KEY_FORMAT}') AS key "
        f"FROM {parquet_scan(area.counts / 'margin_counts.parquet')} WHERE level = '{level}' AND n >= {int(k)}) c "
        "ON c.area_id = m.cell_id AND c.bucket_start = r.coarse"
    )


@dataclass(frozen=True)
class KeptKeys:
    """This release's key sets as `keep_released_keys` coded and kept them, with the file it wrote and that
    file's sha256 as written: a reader that finds the file with that digest may take these arrays for what
    reading it back would give (`stages.advantage.read_key_sets`), without reading it."""

    coded: keysets.CodedKeySets
    file: Path
    sha256: str
    zones: Callable[[pd.Series], pd.Series]  # what the keys' risk zones were read with
    source: str | None = None  # `_key_source_digest` of what they were coded from (`take_handed_over`)
    candidate: str | None = None  # the digest of the candidate they were coded from (`CandidateTables.digest`)

    @property
    def sets(self) -> KeySets:
        return self.coded.sets

    def serves(self, path: Path, sha256: str, zones: Callable[[pd.Series], pd.Series]) -> bool:
        """Whether these arrays are what reading `path`, whose digest is now `sha256`, with risk zones `zones`
        would give: the very file written, unchanged since, its keys' zones read the same way. Reading back a
        file just coded costs 3 s at 10 M pings and 21-28 s at 50 M (bench/RESULTS.md)."""
        return path == self.file and sha256 == self.sha256 and zones == self.zones

    def arrays(self) -> tuple[KeySets, np.ndarray, np.ndarray]:
        """The key sets, their key names and unit names by code (object arrays of str), as
        `stages.advantage.read_key_sets` gives them."""
        names, units = (a.to_numpy(zero_copy_only=False) for a in (self.coded.key_names, self.coded.unit_names))
        return self.sets, names.astype(object, copy=False), units.astype(object, copy=False)


def keep_released_keys(ctx: ReleaseContext, ladder: Path | None) -> KeptKeys | None:
    """Code this release's key sets straight from the work area and keep them as its coded key set file
    (`keysets.write_coded`), returning them; over `CODED_UP_TO` rows keep them as (unit, key, cell_id) rows
    instead (written by DuckDB, for the ranged road) and return None. The memo records what the kept file was
    coded from (`kept_keys_current`)."""
    memo = ctx.memo()
    memo.save(KEPT_KEYS, None, {})  # never a record of the file being replaced
    held = ctx.held_candidate()
    source = released_key_source(ctx.area, ladder, held)
    coded = keysets.code_and_keep(source, ctx.risk_zones, CODED_UP_TO, ctx.area.risk, ctx.area.unit_keys)
    if coded is None:
        write_released_keys(ctx.area, ctx.area.unit_keys, ladder, held)
    digest = sha256_file(ctx.area.unit_keys)
    coded_from = _key_source_digest(ctx)
    memo.save(KEPT_KEYS, coded_from, {"unit_keys": digest})
    candidate = (held or ctx.candidate_tables()).digest()
    kept = None if coded is None else KeptKeys(coded, ctx.area.unit_keys, digest, ctx.risk_zones, coded_from, candidate)
    _hand_over(kept)
    return kept


# The last key sets this process coded (`keep_released_keys`), for the risk step that follows the protection
# step in the same process (a run executed in process, the command line, the benchmark): it reads them back
# from the file otherwise, 9 s at 50 M pings (bench/RESULTS.md). At most one is held, and the first reader
# takes it: 1 GB at 50 M pings is not kept for a step that never comes.
_handed: list[KeptKeys] = []
_handed_lock = threading.Lock()


def _hand_over(kept: KeptKeys | None) -> None:
    with _handed_lock:
        _handed[:] = [] if kept is None else [kept]


def take_handed_over(ctx: ReleaseContext) -> KeySets | None:
    """The key sets this process last coded (`keep_released_keys`), taken, when they are what reading the
    context's kept key set file gives now: the same file, unchanged since it was written (its sha256), coded
    from the same work-area files by the same code and policy (`_key_source_digest`, which covers the risk
    areas the keys' zones come from), for the candidate the context holds or reads now (its digest). None
    otherwise, and the file is read. The slot is emptied either way."""
    with _handed_lock:
        kept = _handed.pop() if _handed else None
    return _current_sets(ctx, kept)


def holds_handed_over() -> bool:
    """Whether some key sets are held for the risk step (not checked against the files: `peek_handed_over`)."""
    with _handed_lock:
        return bool(_handed)


def peek_handed_over(ctx: ReleaseContext) -> KeySets | None:
    """`take_handed_over`'s key sets, left in the slot for the risk step."""
    with _handed_lock:
        kept = _handed[-1] if _handed else None
    return _current_sets(ctx, kept)


def _current_sets(ctx: ReleaseContext, kept: KeptKeys | None) -> KeySets | None:
    path = ctx.area.unit_keys
    if kept is None or kept.file != path or not path.exists():
        return None
    # the candidate too: a later protection in this process may write another candidate and keep no key sets (no
    # climbing), leaving these, the kept file and what it was coded from all unchanged
    if kept.candidate is None or kept.candidate != ctx.candidate_tables().digest():
        return None
    source = _key_source_digest(ctx)  # None when the code is not known (changed on disk): then, as the memo, never
    if source is None or kept.source != source or sha256_file(path) != kept.sha256:
        return None
    return kept.sets


KEPT_KEYS = "kept_keys"  # the memo's record of the kept key set file


def kept_keys_current(ctx: ReleaseContext) -> bool:
    """Whether the kept key set file was coded, by this code, from the work area's files as they are now: the
    candidate (the memo's key), the memberships, the risk areas and the ladder buckets (written again by the
    caller first: they follow the policy's zone files, which no other digest covers). Then the risk step reads
    it instead of coding the same key sets again from what the protection loop coded them from. Any changed
    byte, in the kept file or in what it was coded from, and it is coded again."""
    path = ctx.area.unit_keys
    saved = ctx.memo().load(KEPT_KEYS, _key_source_digest(ctx)) if path.exists() else None
    return saved is not None and saved.get("unit_keys") == sha256_file(path)


def _key_source_digest(ctx: ReleaseContext) -> str | None:
    """The digest of everything `released_key_source` codes the key sets from besides the candidate, and of
    the code."""
    area = ctx.area
    sources = [
        area.counts / "membership.internal.parquet",
        area.counts / LINKED_MEMBERSHIP,
        area.counts / AREAS,
        area.counts / LADDER_BUCKETS,
    ]
    files = {path.name: sha256_file(path) if path.exists() else None for path in sources}
    return reuse.digest_of({"kept_keys": files, "policy": ctx.policy.sha256, "coded_up_to": CODED_UP_TO})
