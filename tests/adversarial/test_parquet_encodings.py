"""Attacks through Parquet trace files: every timestamp encoding, dictionary-encoded ids, nested
columns and zero-row row groups. Each file is either read as its CSV equivalent is (the same pings and the
same quarantine, compared here row by row) or refused with an error naming the file and the column."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from support.fixture import policy_dict, write_policy

from spatial_release.period import Period
from spatial_release.policy import Policy, load_policy
from spatial_release.traces.ingest import IngestError, check_trace_files, ingest_traces

Q1 = Period.parse("2018-Q1")
# Wall-clock times in New York; the last is outside the quarter (quarantined either way).
WALL = [dt.datetime(2018, 1, 10, 8, 0, 0), dt.datetime(2018, 3, 11, 12, 30, 15), dt.datetime(2018, 4, 2, 9, 0, 0)]
UTC = [t.replace(tzinfo=dt.UTC) for t in WALL]  # the same clock readings as UTC instants
IDS = ["u1", "u2", "u1"]
LON, LAT = [-74.05, -74.04, -74.03], [40.72, 40.73, 40.74]
FORMATS = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S%z", "%Y-%m-%d"]


def _table(**columns: pa.Array) -> pa.Table:
    base = {
        "device": pa.array(IDS),
        "when": pa.array(WALL, pa.timestamp("s")),
        "lon": pa.array(LON),
        "lat": pa.array(LAT),
    }
    return pa.table({**base, **columns})


def _ingest(folder: Path, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(valid pings, quarantine) of one trace file, each sorted, without the file's own name."""
    data = policy_dict(str(folder / name))
    data["source"].update(max_rejected_share=1.0, time_formats=FORMATS)
    policy = load_policy(write_policy(folder, data))
    result = ingest_traces(policy, Q1, check_trace_files(policy, Q1), folder / f"out-{name}")
    pings = pd.read_parquet(result.pings_path)[["unit", "ts", "lon", "lat"]]
    # an integer column's unit is the integer, the same unit as its text in another file (ingest's union)
    pings = pings.assign(unit=pings["unit"].astype(str)).sort_values(["ts", "unit"])
    quarantine = pd.read_parquet(result.quarantine_path)[["row", "reason"]]
    return pings.reset_index(drop=True), quarantine


def _same_as_csv(tmp_path: Path, table: pa.Table, texts: Sequence[str | None], **write) -> pd.DataFrame:
    """Ingest `table` as Parquet and, as CSV, the same rows with the time column written as `texts`; assert
    the two give the same pings and the same quarantine; return the pings."""
    pq.write_table(table, tmp_path / "t.parquet", **write)
    csv = table.to_pandas().assign(when=texts)
    csv["device"] = [None if v is None else str(v) for v in table.column("device").to_pylist()]
    csv.to_csv(tmp_path / "t.csv", index=False)
    parquet_pings, parquet_quarantine = _ingest(tmp_path, "t.parquet")
    csv_pings, csv_quarantine = _ingest(tmp_path, "t.csv")
    pd.testing.assert_frame_equal(parquet_pings, csv_pings, check_dtype=False)
    pd.testing.assert_frame_equal(parquet_quarantine, csv_quarantine)
    return parquet_pings


WALL_TEXT = [t.strftime("%Y-%m-%d %H:%M:%S") for t in WALL]
UTC_TEXT = [t.strftime("%Y-%m-%d %H:%M:%S+00:00") for t in UTC]
DATE_TEXT = [t.strftime("%Y-%m-%d") for t in WALL]


@pytest.mark.parametrize(
    "when, texts, write",
    [
        *[(pa.array(WALL, pa.timestamp(unit)), WALL_TEXT, {}) for unit in ("s", "ms", "us", "ns")],
        *[
            (pa.array(UTC, pa.timestamp(unit, tz=zone)), UTC_TEXT, {})
            for unit, zone in (("s", "UTC"), ("ms", "America/New_York"), ("us", "+05:30"), ("ns", "Asia/Tokyo"))
        ],
        (pa.array(UTC, pa.timestamp("ns")), UTC_TEXT, {"use_deprecated_int96_timestamps": True}),
        (pa.array([t.date() for t in WALL], pa.date32()), DATE_TEXT, {}),
        (pa.array([t.date() for t in WALL], pa.date64()), DATE_TEXT, {}),
        (pa.array(WALL_TEXT), WALL_TEXT, {}),
        (pa.array(UTC_TEXT, pa.large_string()), UTC_TEXT, {}),
        (pa.array(WALL_TEXT).dictionary_encode(), WALL_TEXT, {}),
        (pa.array(WALL, pa.timestamp("us")).dictionary_encode(), WALL_TEXT, {}),
    ],
    ids=lambda v: str(v.type) if isinstance(v, pa.Array) else "",
)
def test_every_timestamp_encoding_reads_as_its_csv_text(tmp_path, when, texts, write):
    """A typed timestamp without a zone is a wall-clock time in the policy's zone, as its text is; one with a
    zone (any, or INT96, which holds UTC) is the instant, as its text with an offset is; a date is its
    text, which the policy's `%Y-%m-%d` reads as local midnight."""
    pings = _same_as_csv(tmp_path, _table(when=when), texts, **write)
    assert len(pings) == 2  # the third is outside the quarter: quarantined in both


@pytest.mark.parametrize(
    "device",
    [
        pa.array(["u1", None, "u1"]).dictionary_encode(),
        pa.array(["u1", "u2", "u1"], pa.large_string()).dictionary_encode(),
        pa.array([7, None, 7], pa.int32()).dictionary_encode(),
        pa.array(["ｕ１", "u2", "U1"]).dictionary_encode(),
    ],
    ids=["text-with-null", "large-text", "int-with-null", "fullwidth-and-case"],
)
def test_dictionary_encoded_ids_read_as_their_csv_text(tmp_path, device):
    _same_as_csv(tmp_path, _table(device=device), WALL_TEXT)


def test_a_dictionary_that_falls_back_to_plain_pages_mid_column_keeps_every_unit(tmp_path):
    """A writer whose dictionary page fills up writes the rest of the column plain: both halves are read."""
    n = 6_000
    table = pa.table(
        {
            "device": pa.array([f"dev-{i % 2_500}" for i in range(n)]),
            "when": pa.array([WALL[0]] * n, pa.timestamp("s")),
            "lon": pa.array([LON[0]] * n),
            "lat": pa.array([LAT[0]] * n),
        }
    )
    pings = _same_as_csv(tmp_path, table, [WALL_TEXT[0]] * n, dictionary_pagesize_limit=2_000, row_group_size=1_500)
    metadata = pq.read_metadata(tmp_path / "t.parquet")
    encodings = {e for g in range(metadata.num_row_groups) for e in metadata.row_group(g).column(0).encodings}
    assert "PLAIN" in encodings and ("RLE_DICTIONARY" in encodings or "PLAIN_DICTIONARY" in encodings)
    assert len(pings) == n and pings["unit"].nunique() == 2_500


def test_zero_row_row_groups_keep_counts_and_row_numbers(tmp_path):
    """Empty row groups before, between and after the data: the same pings, and the quarantined rows (a
    missing coordinate in each non-empty group) keep the row numbers of the CSV equivalent."""
    bad = _table(lon=pa.array([LON[0], None, LON[2]]))
    with pq.ParquetWriter(tmp_path / "t.parquet", bad.schema) as writer:
        for part in (bad.slice(0, 0), bad, bad.slice(0, 0), bad.slice(0, 0), bad, bad.slice(0, 0)):
            writer.write_table(part)
    sizes = [g.num_rows for g in map(pq.read_metadata(tmp_path / "t.parquet").row_group, range(6))]
    assert sizes == [0, 3, 0, 0, 3, 0]
    doubled = pa.concat_tables([bad, bad])
    doubled.to_pandas().assign(when=WALL_TEXT * 2).to_csv(tmp_path / "t.csv", index=False)
    parquet_pings, parquet_quarantine = _ingest(tmp_path, "t.parquet")
    csv_pings, csv_quarantine = _ingest(tmp_path, "t.csv")
    pd.testing.assert_frame_equal(parquet_pings, csv_pings, check_dtype=False)
    assert parquet_quarantine.values.tolist() == csv_quarantine.values.tolist()
    assert sorted(parquet_quarantine["row"]) == [2, 3, 5, 6]  # rows 2 and 5 no lon; 3 and 6 after the quarter


def _policy_of(folder: Path) -> Policy:
    data = policy_dict(str(folder / "t.parquet"))
    data["source"].update(max_rejected_share=1.0)
    return load_policy(write_policy(folder, data))


@pytest.mark.parametrize(
    "column, field, values",
    [
        ("device", "source.unit", pa.array([{"id": "u1"}, {"id": "u2"}, {"id": "u1"}])),
        ("device", "source.unit", pa.array([["u1"], ["u2"], ["u1"]])),
        ("device", "source.unit", pa.array([["u1"], ["u2"], ["u1"]], pa.large_list(pa.string()))),
        (
            "device",
            "source.unit",
            pa.array([[("k", "u1")], [("k", "u2")], [("k", "u1")]], pa.map_(pa.string(), pa.string())),
        ),
        ("when", "source.time", pa.array([[t] for t in WALL], pa.list_(pa.timestamp("s")))),
        ("when", "source.time", pa.array([{"t": t} for t in WALL])),
        ("lon", "source.lon", pa.array([{"x": v} for v in LON])),
        ("lat", "source.lat", pa.array([[v] for v in LAT], pa.list_(pa.float64(), 1))),
    ],
    ids=["struct-id", "list-id", "large-list-id", "map-id", "list-time", "struct-time", "struct-lon", "array-lat"],
)
def test_a_nested_mapped_column_is_refused_naming_file_and_column(tmp_path, column, field, values):
    """Before, a struct or list id was read as its text (`{'id': u1}`: a struct of an id and anything else
    counted one device as several), a nested coordinate quarantined every row, and a list of timestamps
    failed in a cast that named no file. Refused before any work (check_trace_files) and at ingest."""
    pq.write_table(_table(**{column: values}), tmp_path / "t.parquet")
    policy = _policy_of(tmp_path)
    expected = rf"t\.parquet: column '{column}' \(field {field}\) is a (LIST|ARRAY|STRUCT|MAP)"
    with pytest.raises(IngestError, match=expected):
        check_trace_files(policy, Q1)
    with pytest.raises(IngestError, match=expected):
        ingest_traces(policy, Q1, [tmp_path / "t.parquet"], tmp_path / "out")


def test_a_nested_column_the_policy_does_not_map_is_no_problem(tmp_path):
    """The control: a nested column beside the mapped ones is not read."""
    pq.write_table(_table(extra=pa.array([{"a": 1}, {"a": 2}, {"a": 3}])), tmp_path / "t.parquet")
    pings, quarantine = _ingest(tmp_path, "t.parquet")
    assert len(pings) == 2 and quarantine["reason"].tolist() == ["outside_period"]


@pytest.mark.parametrize("column, mapped", [("when", "field source.time"), ("extra", "not mapped by the policy")])
def test_a_timestamp_past_the_readers_range_is_refused_naming_file_and_column(tmp_path, column, mapped):
    """A Parquet TIMESTAMP(MILLIS) beyond the microsecond range (2^62 ms, about 146 million years) fails in
    DuckDB's reader, whichever column holds it: before, a ConversionException named no file."""
    far = pa.array([2**62, 1_515_571_200_000, -(2**62)], pa.timestamp("ms", tz="UTC"))
    pq.write_table(_table(**{column: far}), tmp_path / "t.parquet")
    policy = _policy_of(tmp_path)
    files = check_trace_files(policy, Q1)  # the footer reads: only the data cannot
    with pytest.raises(IngestError, match=rf"t\.parquet: cannot read as parquet: column '{column}' \({mapped}\)"):
        ingest_traces(policy, Q1, files, tmp_path / "out")


@pytest.mark.parametrize("file_format", ["parquet", "csv"])
@pytest.mark.parametrize("names", [["device", "device"], ["DEVICE", "device"], ["device", "Device"]])
def test_two_columns_named_as_the_mapped_one_are_refused(tmp_path, names, file_format):
    """DuckDB renames a repeated name (`device_1`): the policy's `device` read whichever came first (another
    column's values, here), silently, or was reported missing beside `DEVICE`. Refused, naming the file
    and the column, in a Parquet file and in a CSV file."""
    others = _table().drop_columns(["device"])
    arrays = [pa.array(["x1", "x2", "x3"]), pa.array(IDS), *others.columns]
    table = pa.Table.from_arrays(arrays, names=[*names, *others.column_names])
    path = tmp_path / f"t.{file_format}"
    (pq.write_table if file_format == "parquet" else pa_csv.write_csv)(table, path)
    policy = load_policy(write_policy(tmp_path, policy_dict(str(path))))
    with pytest.raises(IngestError, match=rf"t\.{file_format}: 2 columns are named 'device' \(ignoring case\)"):
        check_trace_files(policy, Q1)


def test_a_column_named_like_duckdbs_renaming_is_no_problem(tmp_path):
    """The control: `device` beside a column literally named `device_1` is the policy's `device`."""
    pq.write_table(_table(device_1=pa.array(["x1", "x2", "x3"])), tmp_path / "t.parquet")
    pings, quarantine = _ingest(tmp_path, "t.parquet")
    assert sorted(pings["unit"]) == ["u1", "u2"] and quarantine["reason"].tolist() == ["outside_period"]
