"""How complementary suppression chooses its pattern: one frozen value, `ProtectionMethod`, that `protect`,
`protect_whole`, `blocks.protect_blocks` and `DisclosureSpec` carry, and that the protection log records as
what ran (its `describe()` is the method sentence of a release's public record).

The default is the release method: Gaussian elimination for the first pattern, the attacker-LP audit and
repair, then pruning every secondary the audit lets go. Elimination withholds fewer figures than the
constraint sweep on the benchmark tables (bench/suppression_bench.py records the numbers), and pruning
never weakens the guarantee (a secondary is given back only when every primary it may affect still
passes, and the blocking check audits the published files again) while giving back what the repair
over-withheld. A release with a time ladder is not pruned: its system is one
large linked component, where each pruning try is an audit of that whole component.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spatial_release.suppression.table import Table

GAUSS, SWEEP = "gauss", "sweep"
UNIT_VALUE, CELLS = "unit_value", "cells"
# What a withheld figure costs: "unit_value", "cells", a callable cost(table, node) or one weight per node
# (see `costs.costs_for`).
Cost = str | Callable[["Table", int], float] | Sequence[float]

SCOPE = "applied on the full linear system of the release (every level of every zoning and the bucket totals)"


@dataclass(frozen=True)
class ProtectionMethod:
    """How the pattern is chosen; the stage-2 audit and repair, which keeps the guarantee, is the same
    whatever is chosen here.

    - `stage1`: the first pattern: "gauss" (Gaussian elimination on the EQ relations, `suppression.elimination`,
      then the constraint sweep on the UNION relations only, which are no linear identities) or "sweep" (the
      constraint sweep on every relation);
    - `prune_tries`: how many secondaries the pruning pass tries to give back, costliest first (None: every
      non-empty secondary; 0: no pruning);
    - `cost`: what a withheld figure costs (`costs.costs_for`);
    - `max_rounds`: the repair cap (reaching it is a `SuppressionError`, never a pass);
    - `workers`: processes for the audit and for independent blocks (`suppression.blocks`; the pattern is the
      same whatever the number); None: `audit.default_workers()`;
    - `cap`: the bulk witness LPs' cap on every variable (None: the table's own, `audit.table_cap`; each
      block is given its whole table's).
    """

    stage1: str = GAUSS
    prune_tries: int | None = None
    cost: Cost = UNIT_VALUE
    max_rounds: int = 200
    workers: int | None = None
    cap: float | None = None

    def __post_init__(self) -> None:
        if self.stage1 not in (GAUSS, SWEEP):
            raise ValueError(f"unknown method {self.stage1!r}: give 'sweep' or 'gauss'")
        if self.prune_tries is not None and self.prune_tries < 0:
            raise ValueError(f"prune_tries {self.prune_tries} is negative: give None (every secondary) or a count")

    @classmethod
    def release(cls, **changes) -> ProtectionMethod:
        """The release method (the default): elimination, audit and repair, pruning every secondary."""
        return cls(**changes)

    @classmethod
    def sweep(cls, **changes) -> ProtectionMethod:
        """The constraint sweep on every relation, audit and repair, no pruning (the method before
        elimination; kept to compare patterns)."""
        return cls(**{"stage1": SWEEP, "prune_tries": 0, **changes})

    def with_prune_tries(self, prune_tries: int | None) -> ProtectionMethod:
        return replace(self, prune_tries=prune_tries)

    @property
    def prunes(self) -> bool:
        return self.prune_tries is None or self.prune_tries > 0

    def describe(self) -> str:
        """The method as a release's public record states it: what this method runs, in order."""
        if self.stage1 == GAUSS:
            first = "Gaussian elimination on the additive identities and a constraint sweep on the other relations"
        else:
            first = "constraint sweep on every relation"
        steps = [first, "the attacker-LP audit and repair"]
        if self.prune_tries is None:
            steps.append("pruning")
        elif self.prune_tries > 0:
            steps.append(f"pruning (the {self.prune_tries} costliest secondaries tried)")
        return f"{SCOPE}: {', then '.join(steps)}"


__all__ = ["CELLS", "GAUSS", "SWEEP", "UNIT_VALUE", "Cost", "ProtectionMethod"]
