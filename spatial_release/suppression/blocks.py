"""Independent blocks of a release's linear system, protected chunk by chunk in worker processes.

Two figures are in one block when a chain of relations links them (through any figure, published or not).
No relation spans two blocks: an hourly release without a time ladder has one block per hour (1,080 in a
quarter), a release with a ladder usually one block in all. Every stage of `complementary.protect_whole`
decides a block's figures from that block alone:
- the elimination visits candidates by cost and key (never by node number), and a block's columns touch
  only its own inner figures, so the echelon rows of other blocks never meet them;
- the UNION sweep works relation by relation;
- the audit works on components of withheld figures, each inside one block, and a repair picks the
  published figure that binds a failing bound, in the failing primary's own relations;
- pruning (every secondary tried: `ProtectionMethod.prune_tries` None or 0) gives a secondary back when every primary of its
  component still passes, which its block alone decides.
So each block protected on its own sub-table (`Table.subtable`, the same figures, relations and orders) gets
the pattern the whole table gives it. One caveat, which tests/test_blocks.py watches on its tables: where a
failing bound is degenerate (several published figures bind it), the figure the simplex names, and hence
the repair's choice, may depend on what else shares the LP model; the audit packs small components into one
model (`audit.PACK_NODES`), and a block's neighbours in its pack differ between the whole table and its
chunk. The guarantee is untouched either way: every pattern passes the same audit.

Blocks are grouped into chunks of at least CHUNK_NODES figures, in block order, from the table alone and
never from the number of workers, and each chunk is protected serially (`protect_whole` with one audit
worker), so the pattern, the verdicts and the witness points are the same with 1 and N workers.

Why: the elimination is pure Python, and the audit's job building would run in the calling process, on one
core, while the others wait; protecting whole blocks in the workers puts every stage on every core.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np

from spatial_release import tasks
from spatial_release.memory import collector_paused
from spatial_release.progress import Progress, ProgressEvent, silent
from spatial_release.suppression.audit import (
    default_workers,
    inconsistent_relations,
    linked_groups,
    renumbered,
    table_cap,
)
from spatial_release.suppression.complementary import ProtectionLog, SuppressionError, protect_whole
from spatial_release.suppression.costs import costs_for
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.table import PRIMARY, SECONDARY, PackedTable, Table, TablePack, as_table
from spatial_release.suppression.verdicts import AuditResult, Criterion

# Tables below this many figures are protected whole: splitting saves nothing there, and small tables keep
# exactly the pattern they always had (tests/test_golden_pattern.py).
BLOCKS_MIN_NODES = 20_000
# Figures per chunk (a worker's job). Big enough that a job's fixed costs (the sub-table, its pickling, the
# audit's setup) stay small beside its work; small enough for tens of jobs per worker on a large release,
# so that the last job does not leave the other core idle for long.
CHUNK_NODES = 10_000


def worth_splitting(table: Table, method: ProtectionMethod) -> bool:
    """Big enough to split, and no cap on the pruning tries (a cap picks the costliest secondaries of the
    whole table, which no block can know)."""
    return len(table) >= BLOCKS_MIN_NODES and method.prune_tries in (None, 0)


def independent_blocks(table: Table) -> list[np.ndarray]:
    """The blocks of figures linked by relations, each one's nodes ascending, in the order of their
    smallest node; a figure in no relation is a block of its own."""
    return linked_groups(table, np.ones(len(table), dtype=bool))


@dataclass
class _Chunk:
    """A worker's job: some blocks as one sub-table, and what `protect_whole` needs besides."""

    table: PackedTable  # unpickles as the sub-table itself
    members: np.ndarray  # sub-table node -> node of the whole table
    k: int
    level_depth: dict[str, int]
    # the caller's method with the whole table's costs of `members` (a caller's callable sees the whole
    # table), its cap, and one audit worker
    method: ProtectionMethod
    criterion: Criterion
    options: Mapping | None


@dataclass
class _Protected:
    members: np.ndarray
    status: list[str]
    log: ProtectionLog  # its audit in the whole table's numbering


@collector_paused()
def _protect_chunk(chunk: _Chunk) -> _Protected:
    """Protect one chunk (in this process or a worker), serially, and number its audit as the whole table."""
    table = as_table(chunk.table)
    log = protect_whole(
        table,
        chunk.k,
        chunk.level_depth,
        chunk.method,
        criterion=chunk.criterion,
        options=chunk.options,
        progress=silent,
    )
    if log.audit is not None:
        log.audit.intervals, log.audit.witnesses = renumbered(
            log.audit.intervals, log.audit.witnesses, chunk.members.tolist()
        )
    return _Protected(chunk.members, table.status, log)


def _chunks(table: Table, blocks: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(figures, relation ids) of each chunk: the blocks holding a withheld figure (the others have nothing
    to protect), CHUNK_NODES figures or more to a chunk, in block order."""
    status = np.array(table.status, dtype=object)
    withheld = (status == PRIMARY) | (status == SECONDARY)
    block_of = np.empty(len(table), dtype=np.int64)
    for b, nodes in enumerate(blocks):
        block_of[nodes] = b
    parents = np.fromiter((r.parent for r in table.relations), dtype=np.int64, count=len(table.relations))
    relation_block = block_of[parents]
    order = np.argsort(relation_block, kind="stable")
    starts = np.searchsorted(relation_block[order], np.arange(len(blocks) + 1))
    out: list[tuple[np.ndarray, np.ndarray]] = []
    nodes_in: list[np.ndarray] = []
    relations_in: list[np.ndarray] = []
    size = 0

    def close() -> None:
        out.append((np.sort(np.concatenate(nodes_in)), np.sort(np.concatenate(relations_in))))

    for b, nodes in enumerate(blocks):
        if not withheld[nodes].any():
            continue
        nodes_in.append(nodes)
        relations_in.append(order[starts[b] : starts[b + 1]])
        size += len(nodes)
        if size >= CHUNK_NODES:
            close()
            nodes_in, relations_in, size = [], [], 0
    if nodes_in:
        close()
    return out


def _merge(table: Table, done: _Protected, log: ProtectionLog, audit: AuditResult) -> None:
    for node, status in zip(done.members.tolist(), done.status):
        table.status[node] = status
    part = done.log
    log.sweep_secondaries += part.sweep_secondaries
    log.repair_secondaries += part.repair_secondaries
    log.pruned += part.pruned
    log.rounds = max(log.rounds, part.rounds)
    if part.audit is None:
        return
    audit.intervals.extend(part.audit.intervals)
    audit.errors.extend(part.audit.errors)
    audit.witnesses.update(part.audit.witnesses)
    # summed over chunks: `seconds` is the audit's time over all workers, not wall time, and `components` the
    # components each chunk audited (a whole-table run reports its largest round's)
    for name in ("components", "lps_solved", "bulk_lps", "mips_solved", "witness_lps", "seconds"):
        setattr(audit, name, getattr(audit, name) + getattr(part.audit, name))


def _in_order(jobs: Iterator[_Chunk], runner: tasks.Runner | None) -> Iterator[_Protected]:
    """Each chunk protected, in chunk order, by `runner` (local processes, or Spark tasks; None: here); at
    most 2 x its slots chunks pending, so only a few sub-tables exist at once besides the whole table."""
    if runner is None:
        for job in jobs:
            yield _protect_chunk(job)
        return
    yield from runner.map(_protect_chunk, jobs)


def protect_blocks(
    table: Table,
    k: int,
    level_depth: dict[str, int],
    method: ProtectionMethod = ProtectionMethod(),
    *,
    criterion: Criterion | None = None,
    options: Mapping | None = None,
    progress: Progress = silent,
    every_s: float = 5.0,
) -> ProtectionLog:
    """`protection.protect` block by block (see the module docstring): the statuses of `table` change in
    place, and the returned log holds the audit of the final pattern in `table`'s numbering. Falls back to
    `protect_whole` when fewer than two blocks hold a withheld figure."""
    started = time.perf_counter()
    criterion = criterion or Criterion(k)
    workers = tasks.slots(default_workers()) if method.workers is None else max(1, int(method.workers))
    # Blocks without a withheld figure go to no chunk, so no chunk's audit would see a contradiction among
    # their published figures, which the whole table's audit reports: look for them here, on every block.
    contradictions = inconsistent_relations(table)
    if contradictions:
        raise SuppressionError("; ".join(contradictions[:5]))
    chunks = _chunks(table, independent_blocks(table))
    if len(chunks) < 2:
        return protect_whole(table, k, level_depth, method, criterion=criterion, options=options, progress=progress)
    costs = costs_for(table, level_depth, method.cost)
    cap = table_cap(table, criterion) if method.cap is None else method.cap  # as the whole table's audit caps
    pack = TablePack.of(table)
    jobs = (
        _Chunk(
            pack.subtable(nodes, relations),
            nodes,
            k,
            level_depth,
            replace(method, cost=[costs[n] for n in nodes.tolist()], workers=1, cap=cap),
            criterion,
            options,
        )
        for nodes, relations in chunks
    )
    audit = AuditResult(k=k, criterion=criterion)  # the log's audit, merged over the chunks
    log = ProtectionLog(audit=audit, method=method)
    reported = time.perf_counter()
    runner = tasks.runner_for(min(workers, len(chunks)))
    for n, done in enumerate(_in_order(jobs, runner), start=1):
        _merge(table, done, log, audit)
        if time.perf_counter() - reported >= every_s:
            reported = time.perf_counter()
            progress(
                ProgressEvent(
                    "suppression",
                    f"suppression: {n / len(chunks):.0%} of the table protected, {reported - started:.0f} s",
                    share=n / len(chunks),
                    seconds=reported - started,
                )
            )
    audit.intervals.sort(key=lambda interval: interval.node)
    audit.workers = runner.slots if runner is not None else 1
    seconds = time.perf_counter() - started
    progress(
        ProgressEvent(
            "suppression",
            f"suppression: every block protected in {seconds:.1f} s ("
            f"{'every withheld primary protected' if audit.passed else 'some primaries NOT protected'})",
            share=1.0,
            seconds=seconds,
            done=True,
        )
    )
    return log


__all__ = ["BLOCKS_MIN_NODES", "CHUNK_NODES", "independent_blocks", "protect_blocks", "worth_splitting"]
