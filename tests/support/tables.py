"""Small suppression tables the audit, certificate, block and memory tests build by hand, and the comparison of
protected tables' patterns and certificates."""

from __future__ import annotations

import pandas as pd

from spatial_release.suppression.certificate import Certificate
from spatial_release.suppression.complementary import ProtectionLog
from spatial_release.suppression.table import EQ, PRIMARY, PUBLISHED, Relation, Table

INPUTS = {"counts": "c0ffee", "candidate": "beef"}  # the input digests a test certificate is built for


def table_of(nodes: dict, relations: list, kind: str = EQ) -> Table:
    """nodes: name -> (value, status); relations: (parent, [children]) all explicit (no absent rest)."""
    table = Table()
    for name, (value, status) in nodes.items():
        table.add("x", name, 0, value, status)
    for parent, children in relations:
        table.relations.append(
            Relation(kind, table.index[("x", parent, 0)], tuple(table.index[("x", c, 0)] for c in children))
        )
    return table


def copy_table(table: Table) -> Table:
    """A copy whose lists and maps are the copy's own (protecting it leaves `table` as it was)."""
    return Table(
        list(table.level),
        list(table.area),
        list(table.bucket),
        list(table.value),
        list(table.status),
        list(table.relations),
        dict(table.index),
        dict(table.floor),
    )


def assert_same_pattern_and_certificate(protected: list[tuple[Table, ProtectionLog]]) -> None:
    """The tables' statuses and their certificates' frames (primaries, witness points) are all equal."""
    outcomes = []
    for table, log in protected:
        assert log.audit is not None
        certificate = Certificate.build(table, log.audit, INPUTS)
        outcomes.append((table.status, certificate.primaries, certificate.points))
    (status_1, primaries_1, points_1), *others = outcomes
    assert others
    for status, primaries, points in others:
        assert status == status_1
        pd.testing.assert_frame_equal(primaries, primaries_1)
        pd.testing.assert_frame_equal(points, points_1)


def one_row_per_bucket(buckets: int = 2) -> Table:
    """Per bucket, a published row = a (5) + b (2, a primary) + d (6): the sweep must withhold the cheapest
    other child, a, which is node 0 of the table (and of every chunk of one bucket)."""
    table = Table()
    for bucket in range(buckets):
        a = table.add("cell", "a", bucket, 5, PUBLISHED)
        b = table.add("cell", "b", bucket, 2, PRIMARY)
        d = table.add("cell", "d", bucket, 6, PUBLISHED)
        row = table.add("row", "p", bucket, 13, PUBLISHED)
        table.relations.append(Relation(EQ, row, (a, b, d)))
    return table
