"""`protect`: complementary suppression of a table, whole (`complementary.protect_whole`) or, when the table is
big and falls apart into independent blocks, block by block in worker processes (`blocks.protect_blocks`);
the pattern is the same either way. The dispatcher sits above both so that the imports run one way:
protection -> blocks -> complementary."""

from __future__ import annotations

from collections.abc import Mapping

from spatial_release.progress import Progress, silent
from spatial_release.suppression import blocks
from spatial_release.suppression.complementary import ProtectionLog, protect_whole
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.table import Table
from spatial_release.suppression.verdicts import Criterion


def protect(
    table: Table,
    k: int,
    level_depth: dict[str, int],
    method: ProtectionMethod = ProtectionMethod(),
    *,
    criterion: Criterion | None = None,
    options: Mapping | None = None,
    progress: Progress = silent,
) -> ProtectionLog:
    """Withhold secondaries in `table` (statuses change in place) until the audit passes.

    `table` holds every figure with its status (primaries already marked), `k` the threshold, `level_depth`
    each level's depth in its chain (for the cost weights), `method` how the pattern is chosen (default: the
    release method, `ProtectionMethod`), `criterion` the protection levels (default `Criterion(k)`),
    `options` HiGHS options for the audits. Returns the `ProtectionLog` with the audit of the final pattern
    and the method that ran."""
    if blocks.worth_splitting(table, method):
        return blocks.protect_blocks(table, k, level_depth, method, criterion=criterion, options=options, progress=progress)
    return protect_whole(table, k, level_depth, method, criterion=criterion, options=options, progress=progress)


__all__ = ["protect"]
