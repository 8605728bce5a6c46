"""What withholding each figure costs, and the deterministic order it gives the figures.

Cost of withholding a figure (`ProtectionMethod.cost`, see `costs_for`): by default (value + 1) x a level
weight (leaves 1, each level above x4, totals 1000), so small cells are preferred over large ones and over
totals; "cells" counts figures instead; or the caller's own weights. Ties break on the unit-value cost,
then the node key, so the same input gives the same pattern (tests/test_golden_pattern.py pins one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spatial_release.levels import is_total
from spatial_release.suppression.method import CELLS, UNIT_VALUE, Cost
from spatial_release.suppression.table import Table


def unit_value_costs(table: Table, level_depth: dict[str, int]) -> list[float]:
    """The "unit_value" cost: (value + 1) x the level weight (leaves 1, each level above x4, totals 1000)."""
    out = []
    for i in range(len(table)):
        level = table.level[i]
        weight = 1000.0 if is_total(level) else float(4 ** level_depth.get(level, 0))
        out.append((table.value[i] + 1) * weight)
    return out


def costs_for(table: Table, level_depth: dict[str, int], cost: Cost = UNIT_VALUE) -> list[float]:
    """The information lost by withholding each figure, as the caller chooses:
    - "unit_value" (default): (value + 1) x level weight, so small cells go before large ones and totals;
    - "cells": every non-empty figure costs 1, empty ones 0 (minimise the number of figures withheld);
    - a callable `cost(table, node) -> float`, or a sequence of one non-negative weight per node.
    Ties (and, under "cells", the order among equal costs) fall back to the unit-value cost, then the key."""
    if isinstance(cost, str):
        if cost == UNIT_VALUE:
            return unit_value_costs(table, level_depth)
        if cost == CELLS:
            return [1.0 if v > 0 else 0.0 for v in table.value]
        raise ValueError(f"unknown cost {cost!r}: give 'unit_value', 'cells', a callable or one weight per node")
    if callable(cost):
        out = [float(cost(table, i)) for i in range(len(table))]
    else:
        out = [float(c) for c in cost]
        if len(out) != len(table):
            raise ValueError(f"{len(out)} cost weights for {len(table)} figures")
    if any(not (c >= 0) for c in out):  # also catches NaN
        raise ValueError("costs must be non-negative numbers")
    return out


@dataclass(frozen=True)
class Costs:
    """Per-node costs of withholding (`cost`), with the unit-value cost (`unit`) as the first tie-break."""

    table: Table
    cost: list[float]
    unit: list[float]

    @classmethod
    def of(cls, table: Table, level_depth: dict[str, int], cost: Cost = UNIT_VALUE) -> Costs:
        return cls(table, costs_for(table, level_depth, cost), unit_value_costs(table, level_depth))

    def __getitem__(self, node: int) -> float:
        return self.cost[node]

    def __len__(self) -> int:
        return len(self.cost)

    def key(self, node: int) -> tuple:
        """The order of figures by cost: the cost, the unit-value cost, then the node's key."""
        table = self.table
        return (self.cost[node], self.unit[node], table.level[node], table.area[node], str(table.bucket[node]))

    def cheapest(self, nodes: Sequence[int]) -> int:
        return min(nodes, key=self.key)


__all__ = ["Costs", "costs_for", "unit_value_costs"]
