"""Attacks through the input: time zones, odd unit ids and user mistakes, each run end to end through the
command line. Each test asserts either the release that the raw rows imply (re-derived here with pandas and
zoneinfo, never with the code under test) or a refusal with exit 2 that names the file and the field (or
row), without a traceback, with nothing published and nothing in the ledger.

The attacks: a policy whose time_formats hold %z must not shift every instant (a naive 00:30 in New York
read as the evening before), a NaN id in a DOUBLE column must not count as one pseudo-unit "nan", 1234.0 and
1234 must be one unit, and the mistakes below must not exit with a traceback after ingest and counting ran."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, time
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from support.fixture import CELL_A, CELL_B, CELL_D, CELL_E, K, cell_id, fixture_pings, lonlat_in, policy_dict, write_policy
from support.releases import nothing_published, release

NEW_YORK = ZoneInfo("America/New_York")


def _published_cells(tmp_path: Path) -> dict[tuple[str, str], int]:
    [folder] = (tmp_path / "out" / "releases").glob("*/2018-Q1")
    cells = pd.read_parquet(folder / "cells.parquet", columns=["cell_id", "bucket_start", "n_devices"])
    return {(c, b.isoformat()): int(n) for c, b, n in zip(cells["cell_id"], cells["bucket_start"], cells["n_devices"])}


def _expected_cells(rows: pd.DataFrame) -> dict[tuple[str, str], int]:
    """Distinct units per (cell, local day), the day's start as a UTC instant: from `cell` and `instant`."""
    day = rows["instant"].map(
        lambda t: datetime.combine(t.astimezone(NEW_YORK).date(), time(), tzinfo=NEW_YORK).astimezone(UTC).isoformat()
    )
    counts = rows.assign(day=day).groupby(["cell", "day"])["unit"].nunique()
    return {key: int(n) for key, n in counts.items()}


def _instant(text: str) -> datetime:
    """The instant a raw timestamp names, by hand: an offset if it has one, else New York wall time."""
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=NEW_YORK)).astimezone(UTC)


# --- time zones -----------------------------------------------------------------------------------------


def _pings_near_midnight() -> pd.DataFrame:
    """Pings of known cells just after and just before local midnight, written as naive New York time, as
    UTC with an offset, and with New York's own offset: an instant shifted by the zone's 5 hours changes day."""
    rng = np.random.default_rng(9)
    rows: list[dict[str, object]] = []

    def add(prefix: str, corner: tuple[int, int], n_units: int, whens: list[str]) -> None:
        for u in range(n_units):
            lon, lat = lonlat_in(corner, len(whens), rng)
            rows.extend(
                {
                    "device": f"{prefix}{u}",
                    "when": w,
                    "lon": round(float(x), 7),
                    "lat": round(float(y), 7),
                    "gender": "f",
                    "cell": cell_id(corner),
                }
                for w, x, y in zip(whens, lon, lat)
            )

    add("a", CELL_A, 4, ["2018-01-10 00:30:00", "2018-01-11 00:15:00"])  # naive, just after midnight
    add("e", CELL_E, 5, ["2018-01-11 04:30:00+00:00", "2018-01-10 05:10:00+00:00"])  # 23:30 and 00:10 local
    add("d", CELL_D, 3, ["2018-01-10 01:00:00-05:00", "2018-01-10T23:59:00-05:00"])
    add("b", CELL_B, 3, ["2018-01-10T04:59:00Z"])  # 23:59 on the 9th
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_mixed_time_formats_publish_the_instants_of_the_raw_rows(tmp_path, capsys):
    frame = _pings_near_midnight()
    traces = tmp_path / "traces.csv"
    frame.drop(columns="cell").to_csv(traces, index=False)
    data = policy_dict(str(traces))
    data["source"]["time_formats"] = [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M:%S%z",
        "%Y-%m-%dT%H:%M:%S%z",
        "%Y-%m-%dT%H:%M:%SZ",
    ]
    code = release(write_policy(tmp_path, data), tmp_path)
    assert code == 0, capsys.readouterr().err
    expected = _expected_cells(frame.assign(unit=frame["device"], instant=frame["when"].map(_instant)))
    assert min(expected.values()) >= K  # nothing to withhold: every figure must be published as it is
    assert _published_cells(tmp_path) == expected


@pytest.mark.slow
def test_a_local_time_the_clocks_skipped_is_quarantined_not_moved(tmp_path, capsys):
    """02:30 on 2018-03-11 never happened in New York; with no rejected pings allowed, the release blocks
    and names the reason (before: it published the ping at 07:30Z with exit 0)."""
    frame = fixture_pings()
    frame.loc[0, "when"] = "2018-03-11 02:30:00"
    traces = tmp_path / "traces.csv"
    frame.to_csv(traces, index=False)
    code = release(write_policy(tmp_path, policy_dict(str(traces))), tmp_path)
    err = capsys.readouterr().err
    assert code == 1 and "nonexistent_local_time" in err and "input file 1 of 1 row 1" in err
    assert nothing_published(tmp_path)


@pytest.mark.slow
def test_parquet_timestamps_of_every_unit_publish_the_instants_of_the_raw_rows(tmp_path, capsys):
    """Parquet TIMESTAMP(NANOS), what `pandas.to_parquet` writes, naive or UTC-aware, must publish like the
    other units (DuckDB has no epoch_us over TIMESTAMPTZ_NS, and no CASE mixing it with TIMESTAMPTZ). The
    pings near midnight, spread over eight files: each Parquet unit (s, ms, us, ns), naive New York wall time
    or UTC-aware; a file read an hour off would move pings across a day."""
    frame = _pings_near_midnight()
    frame = frame.assign(unit=frame["device"], instant=frame["when"].map(_instant))
    kinds = [(unit, tz) for unit in ("s", "ms", "us", "ns") for tz in (None, "UTC")]
    traces = []
    for i, (unit, tz) in enumerate(kinds):
        part = frame.iloc[i :: len(kinds)]
        whens = [t if tz else t.astimezone(NEW_YORK).replace(tzinfo=None) for t in part["instant"]]
        table = pa.table(
            {
                "device": part["device"].tolist(),
                "when": pa.array(whens, pa.timestamp(unit, tz=tz)),
                "lon": part["lon"].tolist(),
                "lat": part["lat"].tolist(),
                "gender": part["gender"].tolist(),
            }
        )
        traces.append(tmp_path / f"traces-{unit}-{tz or 'naive'}.parquet")
        pq.write_table(table, traces[-1])
    code = release(write_policy(tmp_path, policy_dict(str(tmp_path / "traces-*.parquet"))), tmp_path)
    assert code == 0, capsys.readouterr().err
    expected = _expected_cells(frame)
    assert min(expected.values()) >= K  # nothing to withhold: every figure must be published as it is
    assert _published_cells(tmp_path) == expected


# --- unit ids -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_nan_and_float_ids_count_the_units_the_rows_name(tmp_path, capsys):
    """Cell B holds two real bikes. A DOUBLE id column adds NaN rows (no id) and writes the bikes as 1.0
    and 2.0 while another file has them as integers: B holds k - 1 = 2 units and must stay withheld (before:
    'nan' made a third unit, and '1.0' and '1' two more, and B was published)."""
    rng = np.random.default_rng(3)
    rows = []
    for corner, ids in ((CELL_A, [11, 12, 13]), (CELL_E, range(21, 27)), (CELL_D, range(31, 36)), (CELL_B, [1, 2])):
        for hour in ("12", "13"):  # each bike pings twice: once in each file
            lon, lat = lonlat_in(corner, len(ids), rng)
            rows += [
                {
                    "device": float(i),
                    "when": f"2018-01-10 {hour}:00:00",
                    "lon": float(x),
                    "lat": float(y),
                    "cell": cell_id(corner),
                }
                for i, x, y in zip(ids, lon, lat)
            ]
    lon, lat = lonlat_in(CELL_B, 3, rng)
    rows += [
        {"device": float("nan"), "when": "2018-01-10 12:00:00", "lon": float(x), "lat": float(y), "cell": cell_id(CELL_B)}
        for x, y in zip(lon, lat)
    ]
    frame = pd.DataFrame(rows).assign(gender="f")
    doubles, ints = frame[frame["when"].str.contains(" 12:")], frame[frame["when"].str.contains(" 13:")]
    columns = ("when", "lon", "lat", "gender")
    pq.write_table(
        pa.table(
            {
                "device": pa.array(doubles["device"].tolist(), pa.float64(), from_pandas=False),
                **{c: pa.array(doubles[c].tolist()) for c in columns},
            }
        ),
        tmp_path / "a.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "device": pa.array(ints["device"].astype("int64").tolist(), pa.int64()),
                **{c: pa.array(ints[c].tolist()) for c in columns},
            }
        ),
        tmp_path / "b.parquet",
    )
    data = policy_dict(str(tmp_path / "*.parquet"))
    data["source"]["max_rejected_share"] = 0.2
    code = release(write_policy(tmp_path, data), tmp_path)
    assert code == 0, capsys.readouterr().err
    known = frame.dropna(subset=["device"])
    expected = _expected_cells(known.assign(unit=known["device"].astype(int), instant=known["when"].map(_instant)))
    assert expected[(cell_id(CELL_B), "2018-01-10T05:00:00+00:00")] == K - 1
    published = _published_cells(tmp_path)
    assert all(expected[key] == n for key, n in published.items())  # every published figure is the true one
    assert not {key for key, n in expected.items() if n < K} & set(published)  # below k: absent


@pytest.mark.slow
@pytest.mark.parametrize(
    "bike",
    [
        ["29590.0", "\u200e2.959\u00ade4"],
        ["\uff12\uff19\uff15\uff19\uff10", "29,590\x7f", "\u0662\u0669\u0665\u0669\u0660\u0301", "29\u202f590"],
    ],
    ids=["float-text-and-format-characters", "other-scripts-grouped-and-marked"],
)
def test_one_bike_written_three_ways_is_one_unit(tmp_path, capsys, bike):
    """Cell B holds two bikes; one of them is written `29590`, `29590.0` and `2.959e4` behind a left-to-right
    mark with a soft hyphen inside (or in fullwidth or Arabic-Indic digits, grouped, with a DEL or a combining
    mark), and rows whose id is `<NA>`, `#N/A` or `NaT` ping there too. B holds k - 1 units and must stay
    withheld (counted apart, 3 spellings would make 3 devices, published at k = 3, and each spelling of
    missing one more). The rows of missing ids are quarantined, not lost."""
    rng = np.random.default_rng(23)
    rows = []
    spellings = {
        CELL_B: ["29590", *bike, "41017"],
        CELL_A: ["u1", "u2", "u3"],
        CELL_E: [f"e{i}" for i in range(6)],
        CELL_D: [f"d{i}" for i in range(5)],
    }
    for corner, ids in spellings.items():
        lon, lat = lonlat_in(corner, len(ids), rng)
        rows += [
            {
                "device": i,
                "when": "2018-01-10 12:00:00",
                "lon": float(x),
                "lat": float(y),
                "cell": cell_id(corner),
                "unit": i,
            }
            for i, x, y in zip(ids, lon, lat)
        ]
    lon, lat = lonlat_in(CELL_B, 3, rng)
    rows += [
        {"device": i, "when": "2018-01-10 12:00:00", "lon": float(x), "lat": float(y), "cell": cell_id(CELL_B), "unit": None}
        for i, x, y in zip(["<NA>", "#N/A", "NaT"], lon, lat)
    ]
    frame = pd.DataFrame(rows)
    frame["unit"] = frame["unit"].replace({spelling: "29590" for spelling in bike})
    traces = tmp_path / "traces.csv"
    frame.drop(columns=["cell", "unit"]).assign(gender="f").to_csv(traces, index=False)
    data = policy_dict(str(traces))
    data["source"]["max_rejected_share"] = 0.2
    code = release(write_policy(tmp_path, data), tmp_path)
    assert code == 0, capsys.readouterr().err
    known = frame.dropna(subset=["unit"])
    expected = _expected_cells(known.assign(instant=known["when"].map(_instant)))
    assert expected[(cell_id(CELL_B), "2018-01-10T05:00:00+00:00")] == K - 1
    published = _published_cells(tmp_path)
    assert all(expected[key] == n for key, n in published.items())
    assert not {key for key, n in expected.items() if n < K} & set(published)  # B: withheld
    [quarantine] = (tmp_path / "out").glob("work/**/quarantine.parquet")
    assert pd.read_parquet(quarantine)["reason"].tolist() == ["missing_unit_id"] * 3


# --- user mistakes: exit 2 before any work, naming the file and the field -----------------------------------


def _traces_csv(tmp_path: Path, drop: str | None = None) -> Path:
    path = tmp_path / ("traces.csv" if drop is None else f"traces-without-{drop}.csv")
    frame = fixture_pings()
    (frame.drop(columns=drop) if drop else frame).to_csv(path, index=False)
    return path


def _policy_with(tmp_path: Path, change=None, traces: Path | None = None) -> Path:
    data = policy_dict(str(traces or _traces_csv(tmp_path)))
    if change:
        change(data)
    return write_policy(tmp_path, data)


def _duplicate_key(tmp_path: Path) -> tuple[Path, list[Path] | None, list[str]]:
    policy = _policy_with(tmp_path)
    text = policy.read_text()
    policy.write_text(text.replace("k: 3\n", "k: 3\nmeasure: presence\nk: 2\n", 1))
    return policy, None, [str(policy), "duplicate key 'k'"]


def _bad_strptime(tmp_path: Path):
    policy = _policy_with(tmp_path, lambda d: d["source"].update(time_formats=["%Y-%m-%d %H:%M:%S", "%d/%m/%Y %Q"]))
    return policy, None, [str(policy), "source.time_formats[1]", "%Q"]


def _missing_zeros(tmp_path: Path):
    policy = _policy_with(tmp_path, lambda d: d["suppression"].update(zeros="zeros-typo.csv"))
    return policy, None, [str(policy), "suppression.zeros", str(tmp_path / "zeros-typo.csv")]


def _zeros_is_the_traces(tmp_path: Path):
    """A zeros path that names the trace file: refused, and not one id of it is echoed."""
    traces = _traces_csv(tmp_path)
    policy = _policy_with(tmp_path, lambda d: d["suppression"].update(zeros=str(traces)), traces)
    return policy, None, [str(policy), "suppression.zeros", str(traces)]


def _missing_landscape(tmp_path: Path):
    policy = _policy_with(tmp_path, lambda d: d["risk"].update(landscape="landscapes/typo.yaml"))
    return policy, None, [str(policy), "risk.landscape", str(tmp_path / "landscapes" / "typo.yaml")]


def _missing_column(tmp_path: Path):
    traces = _traces_csv(tmp_path, drop="lat")
    return _policy_with(tmp_path, traces=traces), [traces], [str(traces), "'lat'", "source.lat"]


def _missing_file(tmp_path: Path):
    return _policy_with(tmp_path), [tmp_path / "no-such-traces.csv"], [str(tmp_path / "no-such-traces.csv")]


def _corrupt_parquet(tmp_path: Path):
    path = tmp_path / "truncated.parquet"
    fixture_pings().to_parquet(path)
    path.write_bytes(path.read_bytes()[:-100])  # an interrupted copy: the footer is gone
    return _policy_with(tmp_path), [path], [str(path), "cannot read as parquet"]


MISTAKES = [
    _duplicate_key,
    _bad_strptime,
    _missing_zeros,
    _zeros_is_the_traces,
    _missing_landscape,
    _missing_column,
    _missing_file,
    _corrupt_parquet,
]


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda f: f.__name__.strip("_"))
def test_user_mistake_exits_2_naming_file_and_field(tmp_path, capsys, mistake):
    policy, traces, named = mistake(tmp_path)
    code = release(policy, tmp_path, traces=traces)
    err = capsys.readouterr().err
    assert code == 2, err
    assert all(part in err for part in named), err
    assert "Traceback" not in err and err.startswith("error: ") and len(err.splitlines()) == 1
    assert not any(unit in err for unit in fixture_pings()["device"].unique())  # no id, no raw row
    assert nothing_published(tmp_path) and not (tmp_path / "out" / "work").exists()  # no work started


@pytest.mark.parametrize("period", ["1990-Q1", "2099-Q1", "2018-Q5", "2018-13"])
def test_period_outside_the_partitions_exits_2(tmp_path, capsys, period):
    code = release(_policy_with(tmp_path), tmp_path, period)
    err = capsys.readouterr().err
    assert code == 2 and period in err and "Traceback" not in err, err
    assert nothing_published(tmp_path) and not (tmp_path / "out" / "work").exists()


@pytest.mark.parametrize("period", ["\uff12\uff10\uff11\uff18-Q1", "2018-Q1\n"], ids=["fullwidth", "newline"])
def test_period_of_other_digits_or_a_trailing_newline_exits_2_before_any_work(tmp_path, capsys, period):
    """`--period ２０１８-Q1` or $'2018-Q1\\n' must not publish releases/fixture/2018-Q1 under a name the
    publish step then looks for under another spelling. A usage error, before any work."""
    code = release(_policy_with(tmp_path), tmp_path, period)
    err = capsys.readouterr().err
    assert code == 2 and repr(period) in err and "Traceback" not in err, err
    assert nothing_published(tmp_path) and not (tmp_path / "out" / "work").exists()


@pytest.mark.slow
def test_command_line_process_prints_no_traceback(tmp_path):
    """The installed entry point, as a user runs it: the message and exit code, nothing else."""
    policy = _policy_with(tmp_path)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "spatial_release.cli",
            "release",
            "--policy",
            str(policy),
            "--period",
            "1990-Q1",
            "--out",
            str(tmp_path / "out"),
            "--ledger",
            str(tmp_path / "ledger"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr and "1990-Q1" in run.stderr, run.stderr
    policy.write_text(yaml.safe_dump({"name": "x"}) + "name: y\n")
    run = subprocess.run(
        [sys.executable, "-m", "spatial_release.cli", "release", "--policy", str(policy), "--period", "2018-Q1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr and "duplicate key 'name'" in run.stderr
