"""Every ingest failure mode is quarantined with its reason, file and row; none vanishes silently."""

from pathlib import Path

import pandas as pd
import pytest

from conftest import SHARED_DATA, policy_dict, requires_shared, write_policy, PROJECT_ROOT
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.traces.ingest import IngestError, ingest_traces, resolve_trace_paths

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
        ({"device": ""}, "missing_unit_id", "unit id is empty"),
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
    assert "2 of 3 pings rejected" in problem and "t.csv row 2" in problem and "quarantine" in problem


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
    frame = pd.DataFrame({"device": ["u1", "u2"], "when": pd.to_datetime(["2018-01-10 08:00", "2018-01-11 09:30"]),
                          "lon": [-74.05, -74.06], "lat": [40.72, 40.73], "gender": ["f", "m"]})
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
    frame = pd.DataFrame({
        "device": pd.array([11, None, 13, 14, 15], dtype="Int64"),
        "when": pd.to_datetime(["2018-01-10 08:00", "2018-01-10 09:00", None, "2018-01-10 10:00",
                                "2018-05-01 00:00"]),
        "lon": [-74.05, -74.05, -74.05, float("nan"), -74.05], "lat": [40.72] * 5, "gender": ["f"] * 5})
    path = tmp_path / "t.parquet"
    frame.to_parquet(path)
    policy = load_policy(write_policy(tmp_path, policy_dict(str(path))))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), tmp_path / "out")
    quarantine = pd.read_parquet(result.quarantine_path)
    assert dict(zip(quarantine["row"], quarantine["reason"])) == {
        2: "missing_unit_id", 3: "missing_timestamp", 4: "coordinate_not_a_number", 5: "outside_period"}
    pings = pd.read_parquet(result.pings_path)
    assert pings["unit"].tolist() == [11] and str(pings["unit"].dtype) == "int64"
    assert result.pings_read == 5 and result.pings_valid + result.pings_rejected == 5
