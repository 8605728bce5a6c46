"""The counting step's internal Parquet outputs: count tables, the membership and the outside pings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spatial_release.counting.buckets import _lit
from spatial_release.counting.decoded import DecodedKeys
from spatial_release.counting.engines import Engine
from spatial_release.fileio import atomic_path


def write_parquet(table: pa.Table, path: Path) -> None:
    """A table with dictionary-coded columns (`DecodedKeys.coded_table`, the packed path's cell counts) is
    written without its Arrow schema, so that readers see plain string columns as from the other paths, and
    like the membership without compression or column statistics (it is read whole)."""
    coded = any(pa.types.is_dictionary(field.type) for field in table.schema)
    with atomic_path(path) as tmp:
        if coded:
            pq.write_table(table, tmp, store_schema=False, compression="none", write_statistics=False)
        else:
            pq.write_table(table, tmp)


def write_membership(engine: Engine, main: DecodedKeys, out_dir: Path) -> Path:
    """unit, bucket_start, cell_id for the main geometry: who was counted where (internal, never published).
    The cell ids join as an ENUM of the ids counted, so the Parquet writer gets dictionary codes instead of
    a string per row (half the cost; the file's column is a plain string column all the same, nullable as
    before: hence the LEFT JOIN, though every rank is in the dictionary)."""
    source = engine.export("membership", "SELECT unit, b, rank FROM member_0")
    con = engine.finisher()
    con.register("dict_ids", pa.table({"rank": pa.array(np.asarray(main.ranks, dtype=np.int64)), "cell_id": main.id_array}))
    con.register(
        "bucket_ids",
        pa.table({"b": pa.array(np.arange(len(main.buckets), dtype=np.int64)), "bucket_start": main.bucket_array}),
    )
    con.execute("DROP TABLE IF EXISTS membership_ids")
    con.execute("DROP TYPE IF EXISTS membership_cell_id")
    con.execute("CREATE TYPE membership_cell_id AS ENUM (SELECT cell_id FROM dict_ids)")
    con.execute(
        "CREATE TEMP TABLE membership_ids AS SELECT rank, CAST(cell_id AS membership_cell_id) AS cell_id FROM dict_ids"
    )
    path = out_dir / "membership.internal.parquet"
    try:
        with atomic_path(path) as tmp:
            con.execute(
                f"COPY (SELECT m.unit, k.bucket_start, d.cell_id FROM {source} m "
                "LEFT JOIN membership_ids d ON d.rank = m.rank JOIN bucket_ids k ON k.b = m.b) "
                f"TO {_lit(str(tmp))} (FORMAT parquet, COMPRESSION zstd)"
            )  # zstd: smaller, and cheaper here
    finally:
        con.execute("DROP TABLE IF EXISTS membership_ids")
        con.execute("DROP TYPE IF EXISTS membership_cell_id")
    return path


def write_membership_arrays(main: DecodedKeys, member: pa.Table, out_dir: Path) -> Path:
    """The packed path's membership (`counting.packed`: unit, b, rank as Arrow arrays) written by pyarrow
    straight from the arrays, with the same columns and rows as `write_membership`: the cell ids go in as
    dictionary codes into the ids counted (written as Parquet dictionary pages, no string per row), and the
    file keeps no Arrow schema, so readers see a plain string column as before. Safe to run on a thread
    beside the engine's work: it touches no engine."""
    positions = pa.chunked_array(
        [pa.array(main.positions(chunk.to_numpy()).astype(np.int32)) for chunk in member.column("rank").chunks],
        pa.int32(),
    )
    buckets = member.column("b")
    table = pa.table(
        {
            "unit": member.column("unit"),
            "bucket_start": pa.chunked_array(
                [main.bucket_array.take(chunk) for chunk in buckets.chunks], main.bucket_array.type
            ),
            "cell_id": pa.chunked_array(
                [pa.DictionaryArray.from_arrays(chunk, main.id_array) for chunk in positions.chunks],
                pa.dictionary(pa.int32(), pa.string()),
            ),
        }
    )
    path = out_dir / "membership.internal.parquet"
    with atomic_path(path) as tmp:
        # dictionary pages and runs already make it small (26 MB at 8 M rows, 22 MB with zstd): no compression and
        # no column statistics, which took half the writer's time; the file is read whole, never filtered
        pq.write_table(table, tmp, compression="none", write_statistics=False, store_schema=False)
    return path


def write_outside(engine: Engine, out_dir: Path, pings_outside: int, coordinates_sql: str) -> Path:
    """The pings in no area of the main geometry, as they came in, kept for review. coordinates_sql: the
    distinct (ulon, ulat) of those pings."""
    path = out_dir / "outside.parquet"
    where = "" if pings_outside else " WHERE FALSE"
    # p.* keeps the ingest's `src` (the input file of each ping) when the pings carry it
    source = engine.export(
        "outside",
        "SELECT p.* FROM pings p JOIN "
        f"({coordinates_sql}) o "
        f"ON p.lon = o.ulon AND p.lat = o.ulat{where} "
        "UNION ALL SELECT * FROM pings_beyond",
    )
    with atomic_path(path) as tmp:
        engine.finisher().execute(f"COPY (SELECT * FROM {source}) TO {_lit(str(tmp))} (FORMAT parquet)")
    return path
