"""SQL text for DuckDB: quoted literals and identifiers, and DuckDB's errors without what would quote a
file (a raw row is a person's id and whereabouts)."""

from __future__ import annotations

import duckdb


def sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def ident(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def duckdb_problem(exc: duckdb.Error) -> str:
    """DuckDB's complaint in two lines at most, without what would quote the file: a CSV error's 'Original
    Line' is a raw row; the SQL excerpt and the sniffer's search space say nothing to a user."""
    kept = []
    for line in str(exc).splitlines():
        if not line.strip() or line.startswith("The search space"):
            break
        if not line.lstrip().startswith(("Original Line", "LINE ")):
            kept.append(line.strip().removeprefix("Invalid Input Error: "))
    return " ".join(kept[:2])
