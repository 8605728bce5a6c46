"""Every ingest failure mode is quarantined with its reason, file and row; none vanishes silently."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.fixture import policy_dict, write_policy
from support.paths import PROJECT_ROOT, SHARED_DATA, requires_shared

from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.traces.ingest import IngestError, check_trace_files, ingest_traces, resolve_trace_paths

Q1 = Period.parse("2018-Q1")
GOOD = {"device": "u1", "when": "2018-01-10 08:00:00", "lon": "-74.05", "lat": "40.72", "gender": "f"}


def _ingest(tmp_path: Path, rows: list[dict], **source_overrides):
    traces = tmp_path / "t.csv"
    pd.DataFrame(rows).to_csv(traces, index=False)
    data = policy_dict(str(traces))
    data["source"].update(source_overrides)
    policy = load_policy(write_policy(tmp_path, data))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    return result, pd.read_parquet(result.quarantine_path), pd.read_parquet(result.pings_path)


@pytest.mark.parametrize(
    "bad, reason, detail",
    [
        ({"when": "2018-13-45 99:00:00"}, "unparseable_timestamp", '"2018-13-45 99:00:00" matches none'),
        ({"when": "yesterday"}, "unparseable_timestamp", "matches none of the formats"),
        ({"when": ""}, "missing_timestamp", "empty"),
        ({"device": ""}, "missing_unit_id", "unit id is missing"),
        ({"lon": "abc"}, "coordinate_not_a_number", "is not a number"),
        ({"lat": ""}, "coordinate_not_a_number", "is not a number"),
        ({"lon": "NaN"}, "coordinate_not_a_number", "NaN"),
        ({"lon": "-200.5"}, "coordinate_out_of_range", "outside [-180, 180]"),
        ({"lat": "91"}, "coordinate_out_of_range", "outside [-180, 180] x [-90, 90]"),
        ({"lon": "0", "lat": "0"}, "coordinate_null_island", "0, 0"),
        ({"when": "2018-04-01 00:00:00"}, "outside_period", "outside the period"),
        ({"when": "2017-12-31 23:59:59"}, "outside_period", "outside the period"),
    ],
)
def test_each_failure_mode_is_quarantined_with_reason(tmp_path, bad, reason, detail):
    rows = [GOOD, {**GOOD, **bad}, {**GOOD, "device": "u2"}]
    result, quarantine, pings = _ingest(tmp_path, rows, max_rejected_share=0.5)
    assert result.pings_read == 3 and result.pings_valid == 2 and result.pings_rejected == 1
    assert result.rejected_by_reason == {reason: 1}
    [row] = quarantine.to_dict("records")
    assert row["row"] == 2 and row["reason"] == reason and detail in row["detail"]
    assert row["file"].endswith("t.csv")
    assert len(pings) == 2  # nothing else lost
    assert result.rejected_share_problem(0.5) is None


def test_rejected_share_over_limit_is_explained(tmp_path):
    rows = [GOOD, {**GOOD, "lon": "x"}, {**GOOD, "when": "bad"}]
    result, _, _ = _ingest(tmp_path, rows, max_rejected_share=0.5)
    problem = result.rejected_share_problem(0.5)
    assert problem is not None
    assert "2 of 3 pings rejected" in problem and "input file 1 of 1 row 2" in problem and "quarantine" in problem
    assert "coordinate_not_a_number" in problem and "unparseable_timestamp" in problem
    assert '"bad"' not in problem and '"x"' not in problem  # raw values stay in the internal quarantine


def test_quarter_boundary_is_local_midnight(tmp_path):
    # 2018-03-31 23:59 New York is 2018-04-01 03:59 UTC: inside Q1. 00:00 on 1 January local is inside too.
    rows = [{**GOOD, "when": "2018-03-31 23:59:00"}, {**GOOD, "when": "2018-01-01 00:00:00"}]
    result, _, pings = _ingest(tmp_path, rows)
    assert result.pings_rejected == 0
    assert sorted(pings["ts"].dt.strftime("%Y-%m-%dT%H:%M")) == ["2018-01-01T05:00", "2018-04-01T03:59"]


def test_missing_column_names_file_and_column(tmp_path):
    traces = tmp_path / "t.csv"
    pd.DataFrame([{k: v for k, v in GOOD.items() if k != "lat"}]).to_csv(traces, index=False)
    policy = load_policy(write_policy(tmp_path, policy_dict(str(traces))))
    with pytest.raises(IngestError, match=r"t\.csv: missing column\(s\) \['lat'\]"):
        ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")


def test_missing_file_is_named(tmp_path):
    policy = load_policy(write_policy(tmp_path, policy_dict(str(tmp_path / "nope-*.csv"))))
    with pytest.raises(IngestError, match="nope-\\*.csv: no trace file matches"):
        resolve_trace_paths(policy)


def test_parquet_with_typed_timestamps(tmp_path):
    frame = pd.DataFrame(
        {
            "device": ["u1", "u2"],
            "when": pd.to_datetime(["2018-01-10 08:00", "2018-01-11 09:30"]),
            "lon": [-74.05, -74.06],
            "lat": [40.72, 40.73],
            "gender": ["f", "m"],
        }
    )
    path = tmp_path / "t.parquet"
    frame.to_parquet(path)
    policy = load_policy(write_policy(tmp_path, policy_dict(str(path))))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    pings = pd.read_parquet(result.pings_path)
    assert result.pings_valid == 2
    assert pings["ts"].min().isoformat() == "2018-01-10T13:00:00+00:00"


@requires_shared
def test_citibike_three_timestamp_formats_load_through_policy_alone(tmp_path):
    policy = load_policy(PROJECT_ROOT / "policies/jc-bikes.yaml")
    files = resolve_trace_paths(policy, period=Q1)
    assert [f.name for f in files] == [f"JC-20180{m}-citibike-tripdata.csv" for m in (1, 2, 3)]
    result = ingest_traces(policy, Q1, files, tmp_path)
    raw_rows = sum(len(pd.read_csv(f)) for f in files)
    assert result.rows_read == raw_rows and result.pings_read == 2 * raw_rows
    # no timestamp of any of the three formats fails to parse; the only rejects are trips ending in April
    assert set(result.rejected_by_reason) <= {"outside_period"}
    pings = pd.read_parquet(result.pings_path)
    months = pings["ts"].dt.tz_convert("America/New_York").dt.month.value_counts().to_dict()
    assert set(months) == {1, 2, 3} and min(months.values()) > 20_000
    # the February file's milliseconds survive
    assert (pings["ts"].dt.microsecond > 0).any()
    assert result.pings_valid + result.pings_rejected == result.pings_read
    assert SHARED_DATA.is_dir()


def test_typed_parquet_failures_are_quarantined_with_their_row(tmp_path):
    """Parquet is streamed (no table of raw text): typed values are checked as they are and the quarantine
    still names the 1-based data row of each rejected ping. Integer ids stay integers."""
    frame = pd.DataFrame(
        {
            "device": pd.array([11, None, 13, 14, 15], dtype="Int64"),
            "when": pd.to_datetime(["2018-01-10 08:00", "2018-01-10 09:00", None, "2018-01-10 10:00", "2018-05-01 00:00"]),
            "lon": [-74.05, -74.05, -74.05, float("nan"), -74.05],
            "lat": [40.72] * 5,
            "gender": ["f"] * 5,
        }
    )
    path = tmp_path / "t.parquet"
    frame.to_parquet(path)
    policy = load_policy(write_policy(tmp_path, policy_dict(str(path))))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    quarantine = pd.read_parquet(result.quarantine_path)
    assert dict(zip(quarantine["row"], quarantine["reason"])) == {
        2: "missing_unit_id",
        3: "missing_timestamp",
        4: "coordinate_not_a_number",
        5: "outside_period",
    }
    pings = pd.read_parquet(result.pings_path)
    assert pings["unit"].tolist() == [11] and str(pings["unit"].dtype) == "int64"
    assert result.pings_read == 5 and result.pings_valid + result.pings_rejected == 5


# --- time zones: every timestamp is the instant it names, whatever mix of formats the file uses ---------

NAIVE, OFFSET, ZONE_NAME, LITERAL_Z = (
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M:%S%z",
    "%Y-%m-%d %H:%M:%S %Z",
    "%Y-%m-%dT%H:%M:%SZ",
)


def _utc(pings: pd.DataFrame) -> list[str]:
    return pings.sort_values("unit")["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ").tolist()


@pytest.mark.parametrize(
    "formats", [[NAIVE, OFFSET, ZONE_NAME, LITERAL_Z], [LITERAL_Z, ZONE_NAME, OFFSET, NAIVE], [OFFSET, NAIVE]]
)
def test_naive_and_offset_timestamps_in_one_file_give_their_utc_instant(tmp_path, formats):
    whens = {
        "u1": "2018-03-01 10:00:00",
        "u2": "2018-03-01 15:00:00+00:00",
        "u3": "2018-03-01 10:00:00-05:00",
        "u4": "2018-03-01 20:30:00+05:30",
        "u5": "2018-03-01 15:00:00 UTC",
        "u6": "2018-03-01T15:00:00Z",
        "u7": "2018-07-01 11:00:00",
    }
    if OFFSET not in formats or ZONE_NAME not in formats:
        whens = {u: w for u, w in whens.items() if u in ("u1", "u2", "u3", "u4")}
    rows = [{**GOOD, "device": unit, "when": when} for unit, when in whens.items()]
    result, quarantine, pings = _ingest(tmp_path, rows, time_formats=formats, max_rejected_share=0.5)
    expected = ["2018-03-01T15:00:00Z"] * min(len(whens), 6)
    if "u7" in whens:  # in Q3, outside the period, but its instant is still the local time's (EDT, -4 h)
        assert quarantine["reason"].tolist() == ["outside_period"]
        assert "2018-07-01T15:00:00Z" in quarantine["detail"][0]
    assert _utc(pings) == expected


def test_typed_parquet_timestamps_with_and_without_zone(tmp_path):
    naive = pd.DataFrame(
        {"device": ["u1"], "when": pd.to_datetime(["2018-03-01 10:00"]), "lon": [-74.05], "lat": [40.72], "gender": ["f"]}
    )
    aware = naive.assign(device="u2", when=pd.to_datetime(["2018-03-01 20:30"]).tz_localize("Asia/Kolkata"))
    naive.to_parquet(tmp_path / "a.parquet")
    aware.to_parquet(tmp_path / "b.parquet")
    policy = load_policy(write_policy(tmp_path, policy_dict(str(tmp_path / "*.parquet"))))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    assert _utc(pd.read_parquet(result.pings_path)) == ["2018-03-01T15:00:00Z"] * 2


def test_int96_timestamps_are_utc_instants(tmp_path):
    """Parquet INT96 (Spark, Hive, legacy writers) stores UTC; read as a wall-clock time in New York, 13:00Z
    would become 18:00Z. Beside it, a TIMESTAMP without a zone is still New York's wall clock and one with a
    zone an instant."""
    at = datetime(2018, 3, 1, 13, 0)
    files = {  # name: (unit, Arrow type, value, INT96)
        "a.parquet": ("u1", pa.timestamp("us", tz="UTC"), at.replace(tzinfo=UTC), True),
        "b.parquet": ("u2", pa.timestamp("us"), at, True),
        "c.parquet": ("u3", pa.timestamp("us"), at - timedelta(hours=5), False),  # 08:00 EST
        "d.parquet": ("u4", pa.timestamp("us", tz="Asia/Kolkata"), at.replace(tzinfo=UTC), False),
    }
    for name, (unit, arrow_type, value, int96) in files.items():
        table = pa.table(
            {"device": [unit], "when": pa.array([value], arrow_type), "lon": [-74.05], "lat": [40.72], "gender": ["f"]}
        )
        pq.write_table(table, tmp_path / name, use_deprecated_int96_timestamps=int96)
        physical = pq.read_metadata(tmp_path / name).schema.column(1).physical_type
        assert (physical == "INT96") == int96
    policy = load_policy(write_policy(tmp_path, policy_dict(str(tmp_path / "*.parquet"))))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    assert result.pings_rejected == 0
    assert _utc(pd.read_parquet(result.pings_path)) == ["2018-03-01T13:00:00Z"] * 4


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_parquet_timestamps_of_every_unit_are_microsecond_instants(tmp_path, unit):
    """`pandas.to_parquet` writes TIMESTAMP(NANOS); DuckDB reads it as TIMESTAMP_NS (or TIMESTAMPTZ_NS when
    UTC-adjusted), which neither counting (`epoch_us(TIMESTAMPTZ_NS)`) nor ingest (a CASE mixing TIMESTAMPTZ
    and TIMESTAMP_NS) may be given as it is. Every unit, naive (New York's wall clock),
    UTC-aware and Kolkata-aware, in one union: the same instant, written as microsecond TIMESTAMPTZ."""
    at = datetime(2018, 3, 1, 13, 0, 0, 123456)
    files = {
        "naive": ("u1", None, at - timedelta(hours=5)),
        "utc": ("u2", "UTC", at.replace(tzinfo=UTC)),
        "kolkata": ("u3", "Asia/Kolkata", at.replace(tzinfo=UTC)),
    }
    for name, (device, tz, value) in files.items():
        table = pa.table(
            {
                "device": [device],
                "when": pa.array([value], pa.timestamp(unit, tz=tz)),
                "lon": [-74.05],
                "lat": [40.72],
                "gender": ["f"],
            }
        )
        pq.write_table(table, tmp_path / f"{name}.parquet")
    policy = load_policy(write_policy(tmp_path, policy_dict(str(tmp_path / "*.parquet"))))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    assert result.pings_rejected == 0
    assert pq.read_schema(result.pings_path).field("ts").type == pa.timestamp("us", tz="UTC")
    kept = {"s": at.replace(microsecond=0), "ms": at.replace(microsecond=123000)}.get(unit, at)
    assert pd.read_parquet(result.pings_path).sort_values("unit")["ts"].tolist() == [pd.Timestamp(kept, tz="UTC")] * 3


@pytest.mark.parametrize("offset_format", [OFFSET, "%Y-%m-%dT%H:%M:%S%z", "%z %Y-%m-%d %H:%M:%S"])
def test_utc_offsets_no_place_has_are_quarantined(tmp_path, offset_format):
    """`+25:00`, taken as written, would move the instant by 25 hours. An offset beyond -14:00..+14:00 (or
    with minutes over 59) is quarantined as offset_out_of_range, counted; -14:00 and +14:00 are instants."""
    good = {
        "+14:00": "2018-02-28T20:00:00Z",
        "-14:00": "2018-03-02T00:00:00Z",
        "+05:30": "2018-03-01T04:30:00Z",
        "-0500": "2018-03-01T15:00:00Z",
        "+00": "2018-03-01T10:00:00Z",
    }
    bad = ["+25:00", "+2500", "+15", "-14:30", "+14:01", "+05:75", "-99:59"]
    whens = [datetime(2018, 3, 1, 10).strftime(offset_format.replace("%z", offset)) for offset in [*good, *bad]]
    rows = [{**GOOD, "device": f"u{i}", "when": when} for i, when in enumerate(whens)]
    result, quarantine, pings = _ingest(tmp_path, rows, time_formats=[offset_format, NAIVE], max_rejected_share=1.0)
    assert _utc(pings) == list(good.values())
    assert result.rejected_by_reason == {"offset_out_of_range": len(bad)}
    assert quarantine["row"].tolist() == list(range(len(good) + 1, len(rows) + 1))
    assert all("outside -14:00 to +14:00" in d for d in quarantine["detail"])
    assert result.pings_read == len(rows)


Q4 = Period.parse("2018-Q4")


def _ingest_local_times(tmp_path: Path, whens: list[str], typed: bool, period: Period):
    frame = pd.DataFrame([{**GOOD, "device": f"u{i}", "when": w} for i, w in enumerate(whens)])
    if typed:
        frame = frame.assign(when=pd.to_datetime(frame["when"]))
    path = tmp_path / ("t.parquet" if typed else "t.csv")
    frame.to_parquet(path) if typed else frame.to_csv(path, index=False)
    data = policy_dict(str(path))
    data["source"].update(max_rejected_share=1.0, time_formats=[OFFSET, NAIVE])
    policy = load_policy(write_policy(tmp_path, data))
    result = ingest_traces(policy, period, resolve_trace_paths(policy), tmp_path / "out")
    return pd.read_parquet(result.quarantine_path), pd.read_parquet(result.pings_path)


@pytest.mark.parametrize("typed", [False, True])
def test_local_time_in_the_spring_forward_gap_is_quarantined(tmp_path, typed):
    # 2018-03-11 in New York: clocks jump from 02:00 EST to 03:00 EDT; 02:00-02:59 never happened there.
    whens = ["2018-03-11 01:59:59", "2018-03-11 02:00:00", "2018-03-11 02:30:00", "2018-03-11 03:00:00"]
    quarantine, pings = _ingest_local_times(tmp_path, whens, typed, Q1)
    assert quarantine["row"].tolist() == [2, 3]
    assert set(quarantine["reason"]) == {"nonexistent_local_time"}
    assert "does not exist in America/New_York" in quarantine["detail"][0]
    assert _utc(pings) == ["2018-03-11T06:59:59Z", "2018-03-11T07:00:00Z"]


@pytest.mark.parametrize("formats", [[OFFSET, ZONE_NAME, NAIVE], [ZONE_NAME, NAIVE, OFFSET]])
def test_a_zone_name_does_not_make_a_skipped_local_time_an_instant(tmp_path, formats):
    """`%Z` must not take 02:30 America/New_York on 2018-03-11, which never happened, as 07:30Z, while 02:30
    without a zone is quarantined. Both are nonexistent_local_time, in any zone
    with a gap (Paris's is another day), whatever the name's case; an offset, UTC, a fixed-offset name and
    times beside the gap are instants."""
    whens = {
        "2018-03-11 02:30:00 America/New_York": None,
        "2018-03-11 02:00:00 america/new_york": None,
        "2018-03-25 02:30:00 Europe/Paris": None,
        "2018-03-11 02:30:00": None,
        "2018-03-11 01:59:59 America/New_York": "2018-03-11T06:59:59Z",
        "2018-03-11 03:30:00 America/New_York": "2018-03-11T07:30:00Z",
        "2018-03-11 02:30:00 Europe/Paris": "2018-03-11T01:30:00Z",
        "2018-03-11 02:30:00 UTC": "2018-03-11T02:30:00Z",
        "2018-03-11 02:30:00 GMT+05:30": "2018-03-10T21:00:00Z",
        "2018-03-11 02:30:00-05:00": "2018-03-11T07:30:00Z",
    }
    rows = [{**GOOD, "device": f"u{i}", "when": when} for i, when in enumerate(whens)]
    result, quarantine, pings = _ingest(tmp_path, rows, time_formats=formats, max_rejected_share=1.0)
    assert result.rejected_by_reason == {"nonexistent_local_time": 4}
    assert quarantine["row"].tolist() == [1, 2, 3, 4]
    got = dict(zip(pings["unit"], pings["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")))
    assert got == {f"u{i}": instant for i, instant in enumerate(whens.values()) if instant}


@pytest.mark.parametrize("typed", [False, True])
def test_ambiguous_fall_back_local_time_is_the_earlier_instant(tmp_path, typed):
    # 2018-11-04 in New York: 01:00-01:59 happens twice (EDT, then EST); the rule takes the first (EDT).
    whens = [
        "2018-11-04 00:59:00",
        "2018-11-04 01:00:00",
        "2018-11-04 01:30:00",
        "2018-11-04 01:59:59",
        "2018-11-04 02:00:00",
    ]
    expected = [
        "2018-11-04T04:59:00Z",
        "2018-11-04T05:00:00Z",
        "2018-11-04T05:30:00Z",
        "2018-11-04T05:59:59Z",
        "2018-11-04T07:00:00Z",
    ]
    if not typed:  # text can still name the second occurrence, with its offset
        whens.append("2018-11-04 01:30:00-05:00")
        expected.append("2018-11-04T06:30:00Z")
    quarantine, pings = _ingest_local_times(tmp_path, whens, typed, Q4)
    assert quarantine.empty and _utc(pings) == expected


def test_utc_window_and_local_rule_agree_with_zoneinfo_every_quarter_hour(tmp_path):
    """Every quarter hour of two days around each change of 2018 (and a plain day), as naive text, against
    Python's zoneinfo with fold=0 (the earlier instant) and its round trip (a gap does not round-trip)."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    tz = ZoneInfo("America/New_York")
    for period, day in ((Q1, datetime(2018, 3, 10)), (Q4, datetime(2018, 11, 3)), (Q1, datetime(2018, 2, 1))):
        whens = [day + timedelta(minutes=15 * i) for i in range(4 * 48)]
        expected = {}
        for i, local in enumerate(whens):
            instant = local.replace(tzinfo=tz).astimezone(UTC)
            if instant.astimezone(tz).replace(tzinfo=None) == local:
                expected[f"u{i}"] = instant.strftime("%Y-%m-%dT%H:%M:%SZ")
        folder = tmp_path / period.label / str(day.date())
        folder.mkdir(parents=True)
        quarantine, pings = _ingest_local_times(folder, [str(w) for w in whens], False, period)
        got = dict(zip(pings["unit"], pings["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")))
        assert got == expected
        assert set(quarantine["reason"]) <= {"nonexistent_local_time"}
        assert len(quarantine) == len(whens) - len(expected)


# --- unit ids: a missing id is quarantined in every physical type, never counted as a unit -------------


def _ingest_units(tmp_path: Path, units: list, file_format: str, arrow_type=None, **source_overrides):
    """A file whose `device` column holds `units`; Parquet keeps the Arrow type as given (a NaN stays a NaN:
    pandas would have turned it into a null)."""
    path = tmp_path / f"t.{file_format}"
    other = {"when": "2018-01-10 08:00:00", "lon": -74.05, "lat": 40.72, "gender": "f"}
    if file_format == "parquet":
        columns = {
            "device": pa.array(units, type=arrow_type, from_pandas=False),
            **{name: pa.array([value] * len(units)) for name, value in other.items()},
        }
        pq.write_table(pa.table(columns), path)
    else:
        pd.DataFrame({"device": units, **other}).to_csv(path, index=False)
    data = policy_dict(str(path))
    data["source"].update(max_rejected_share=1.0, **source_overrides)
    policy = load_policy(write_policy(tmp_path, data))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    return pd.read_parquet(result.quarantine_path), pd.read_parquet(result.pings_path)


NAN = float("nan")


@pytest.mark.parametrize("file_format", ["parquet", "csv"])
@pytest.mark.parametrize(
    "units, arrow_type",
    [
        ([1.5, NAN, 3.0], pa.float64()),
        ([1.5, NAN, 3.0], pa.float32()),
        ([1, None, 3], pa.int64()),
        (["a", None, "c"], pa.string()),
        (["a", "", "c"], pa.string()),
        (["a", "  ", "c"], pa.string()),
        (["a", "\t", "c"], pa.string()),
        (["a", "NULL", "c"], pa.string()),
        (["a", "NA", "c"], pa.string()),
        (["a", " n/a ", "c"], pa.string()),
        (["a", "nan", "c"], pa.string()),
        (["a", "None", "c"], pa.string()),
        (["a", "-", "c"], pa.string()),
        # invisible blanks: each alone as a unit would make k - 1 real units plus it publish as k
        (["a", "\u00a0", "c"], pa.string()),
        (["a", "\u200b", "c"], pa.string()),
        (["a", "\u3000", "c"], pa.string()),
        (["a", "\u00a0NA\u00a0", "c"], pa.string()),
        (["a", "\ufeff", "c"], pa.string()),
        (["a", "\x00", "c"], pa.string()),
    ],
    ids=lambda u: repr(u),
)
def test_missing_unit_ids_are_quarantined_in_every_physical_type(tmp_path, units, arrow_type, file_format):
    quarantine, pings = _ingest_units(tmp_path, units, file_format, arrow_type)
    assert quarantine[["row", "reason"]].to_dict("records") == [{"row": 2, "reason": "missing_unit_id"}]
    assert len(pings) == 2 and pings["unit"].notna().all()
    assert not pings["unit"].astype(str).str.lower().isin(["nan", "inf", "none", "null", "na", "<na>"]).any()


def test_infinite_float_id_is_missing(tmp_path):
    quarantine, pings = _ingest_units(tmp_path, [1.5, float("-inf"), 3.0], "parquet", pa.float64())
    assert quarantine["reason"].tolist() == ["missing_unit_id"] and sorted(pings["unit"]) == ["1.5", "3"]


def test_policy_lists_its_own_missing_unit_values(tmp_path):
    quarantine, pings = _ingest_units(tmp_path, [7, -1, 8], "parquet", pa.int32(), missing_unit_values=["unknown", "-1"])
    assert quarantine["row"].tolist() == [2] and pings["unit"].tolist() == [7, 8]
    (tmp_path / "text").mkdir()
    quarantine, pings = _ingest_units(
        tmp_path / "text", ["x", " Unknown", "NULL", "-", "-1.0"], "csv", missing_unit_values=["unknown", "-1"]
    )
    # The policy's list replaces the default one ('-' is an id here), but the common spellings of missing
    # (NULL) stay missing, and a listed number is missing however it is written (-1.0).
    assert quarantine["row"].tolist() == [2, 3, 5] and sorted(pings["unit"]) == ["-", "x"]


def test_integral_float_ids_are_the_integer_unit_across_files(tmp_path):
    base = {"when": "2018-01-10 08:00:00", "lon": -74.05, "lat": 40.72, "gender": "f"}
    pd.DataFrame({"device": pd.array([1234, 5], dtype="int64"), **base}).to_parquet(tmp_path / "a.parquet")
    pd.DataFrame({"device": [1234.0, 12.5, 5.0], **base}).to_parquet(tmp_path / "b.parquet")
    decimals = pa.array([Decimal("1234.00"), Decimal("7.25")], pa.decimal128(10, 2))
    pq.write_table(pa.table({"device": decimals, **{k: pa.array([v] * 2) for k, v in base.items()}}), tmp_path / "c.parquet")
    policy = load_policy(write_policy(tmp_path, policy_dict(str(tmp_path / "*.parquet"))))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    pings = pd.read_parquet(result.pings_path)
    assert sorted(pings["unit"].unique()) == ["12.5", "1234", "5", "7.25"] and len(pings) == 7


# --- input errors: found before any work where possible, naming the file and the field, never a raw row ----


def test_check_trace_files_before_any_work(tmp_path):
    good = tmp_path / "good.csv"
    pd.DataFrame([GOOD]).to_csv(good, index=False)
    policy = load_policy(write_policy(tmp_path, policy_dict(str(good))))
    assert check_trace_files(policy, Q1) == [good.resolve()]
    no_lat = tmp_path / "nolat.csv"
    pd.DataFrame([GOOD]).drop(columns="lat").to_csv(no_lat, index=False)
    with pytest.raises(IngestError, match=r"nolat\.csv: missing column\(s\) \['lat'\].*field source\.lat"):
        check_trace_files(policy, Q1, [no_lat])
    with pytest.raises(IngestError, match=r"nope\.csv: no trace file matches"):
        check_trace_files(policy, Q1, [tmp_path / "nope.csv"])
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1 this is not a parquet file")
    with pytest.raises(IngestError, match=r"garbage\.parquet: cannot read as parquet"):
        check_trace_files(policy, Q1, [garbage])
    assert not list(tmp_path.glob("**/pings.parquet"))  # nothing was ingested


def test_missing_column_of_a_headerless_file_does_not_echo_its_first_row(tmp_path):
    traces = tmp_path / "t.csv"
    traces.write_text("SECRET-ID-42,2018-01-10 08:00:00,-74.05,40.72,f\n")
    policy = load_policy(write_policy(tmp_path, policy_dict(str(traces))))
    with pytest.raises(IngestError) as caught:
        check_trace_files(policy, Q1)
    assert "t.csv: missing column(s)" in str(caught.value) and "SECRET" not in str(caught.value)
    assert "field source.unit" in str(caught.value)


def test_ragged_csv_never_takes_a_data_row_for_the_header(tmp_path):
    traces = tmp_path / "t.csv"
    header = ",".join(GOOD)
    traces.write_text(
        f"{header}\nu1,2018-01-10 08:00:00,-74.05,40.72,f\nSECRET-ID-42,2018-01-10 08:00:00,-74.05,40.72,f,extra,more\n"
    )
    policy = load_policy(write_policy(tmp_path, policy_dict(str(traces))))
    with pytest.raises(IngestError) as caught:
        check_trace_files(policy, Q1)
        ingest_traces(policy, Q1, [traces], tmp_path / "out")
    assert "t.csv" in str(caught.value) and "SECRET" not in str(caught.value)


def test_corrupt_parquet_page_names_the_file(tmp_path):
    frame = pd.DataFrame(
        {
            "device": [f"unit-{i:06d}-{i * 7919 % 10007}" for i in range(20_000)],
            "when": "2018-01-10 08:00:00",
            "lon": -74.05,
            "lat": 40.72,
            "gender": "f",
        }
    )
    good, bad = tmp_path / "a.parquet", tmp_path / "b.parquet"
    frame.to_parquet(good, compression="snappy")
    data = bytearray(good.read_bytes())
    for i in range(100, len(data) // 2, 5):  # the data pages; the footer (the file's end) stays intact
        data[i] = (data[i] * 31 + 7) % 256
    bad.write_bytes(bytes(data))
    policy = load_policy(write_policy(tmp_path, policy_dict(str(tmp_path / "*.parquet"))))
    files = check_trace_files(policy, Q1)  # the footer reads: only the scan can find the corrupt page
    with pytest.raises(IngestError, match=r"b\.parquet: cannot read as parquet"):
        ingest_traces(policy, Q1, files, tmp_path / "out")


def test_a_corrupt_page_met_after_the_first_batch_names_the_file(tmp_path, monkeypatch):
    """The one-scan ingest reads in batches: a page that only fails after batches were written surfaces through
    pyarrow's reader (an OSError), and must still be an IngestError naming the file."""
    from spatial_release.traces import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "OUTPUT_BATCH_ROWS", 1000)
    frame = pd.DataFrame(
        {
            "device": [f"unit-{i:06d}-{i * 7919 % 10007}" for i in range(40_000)],
            "when": "2018-01-10 08:00:00",
            "lon": -74.05,
            "lat": 40.72,
            "gender": "f",
        }
    )
    good, bad = tmp_path / "a.parquet", tmp_path / "b.parquet"
    frame.to_parquet(good, compression="snappy", row_group_size=4_000)
    data = bytearray(good.read_bytes())
    for i in range(len(data) // 2, len(data) * 3 // 4, 5):  # pages of the later row groups only
        data[i] = (data[i] * 31 + 7) % 256
    bad.write_bytes(bytes(data))
    policy = load_policy(write_policy(tmp_path, policy_dict(str(tmp_path / "*.parquet"))))
    with pytest.raises(IngestError, match=r"b\.parquet: cannot read as parquet"):
        ingest_traces(policy, Q1, check_trace_files(policy, Q1), tmp_path / "out")


def test_one_scan_writes_valid_pings_and_the_sorted_quarantine_in_batches(tmp_path, monkeypatch):
    """Ingest validates each row once and splits every batch into the pings and the quarantine: with batches of
    two rows, every valid ping is kept once, every rejected row is quarantined once in file and row order with
    its raw values (raw values of valid rows are never carried), and no temporary file is left behind."""
    from spatial_release.traces import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "OUTPUT_BATCH_ROWS", 2)
    rows = [{**GOOD, "device": f"u{i}"} if i % 3 else {**GOOD, "device": f"u{i}", "lon": f"bad{i}"} for i in range(20)]
    result, quarantine, pings = _ingest(tmp_path, rows, max_rejected_share=0.9)
    assert sorted(pings["unit"]) == sorted(f"u{i}" for i in range(20) if i % 3)
    assert list(pings.columns) == ["unit", "ts", "lon", "lat", "src"]
    assert quarantine["row"].tolist() == [i + 1 for i in range(20) if i % 3 == 0]  # sorted, 1-based data rows
    assert quarantine["lon_raw"].tolist() == [f"bad{i}" for i in range(20) if i % 3 == 0]
    assert set(quarantine["reason"]) == {"coordinate_not_a_number"} and result.pings_valid == len(pings)
    assert not list((tmp_path / "out" / "spill").glob("rejected-*"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_file()) == ["pings.parquet", "quarantine.parquet"]
