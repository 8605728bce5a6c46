"""Hostile pass of issue 23: one unit counted as several. A text id was compared as text, so `29590`,
`29590.0`, `2.959e4` and `29590` behind an invisible format character (U+200E, a soft hyphen inside...) were
four units, and `<NA>`, `#N/A`, `NaT`, `inf` or `""` were units too: one bike written three ways published
as 3 devices at k = 3 with every check passing. Each spelling of one id must be one unit, each spelling of
missing a quarantined `missing_unit_id` (counted, not lost). The expected units are derived here from the
integer the spellings were made of, never with the code under test."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings, strategies as st

from conftest import policy_dict, write_policy
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.traces.ingest import ingest_traces, resolve_trace_paths

Q1 = Period.parse("2018-Q1")
OTHER = {"when": "2018-01-10 08:00:00", "lon": -74.05, "lat": 40.72, "gender": "f"}

# The format characters of the report (category Cf, outside the blanks that were trimmed already), and some
# of the blanks an export leaves at the ends.
FORMAT_CHARACTERS = ("\u00ad\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064"
                     + "".join(map(chr, range(0x206a, 0x2070))) + "\ufeff\ufff9\ufffa\ufffb\U000110bd\U000e0001"
                     + "".join(map(chr, range(0xe0020, 0xe0080, 7))))
BLANKS = " \t\u00a0\u2003\u202f\u3000"
MISSING = ("<NA>", "#N/A", "NaT", "inf", "-inf", "nan", "null", "None", "NA", "N/A", '""')


def _ingest(folder: Path, frames: dict[str, pd.DataFrame | pa.Table], **source):
    for name, frame in frames.items():
        if isinstance(frame, pa.Table):
            pq.write_table(frame, folder / name)
        else:
            frame.to_csv(folder / name, index=False)
    data = policy_dict(str(folder / "t*"))
    data["source"].update(max_rejected_share=1.0, **source)
    policy = load_policy(write_policy(folder, data))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), folder / "out")
    return result, pd.read_parquet(result.quarantine_path), pd.read_parquet(result.pings_path)


def _rows(ids: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"device": ids, **{k: [v] * len(ids) for k, v in OTHER.items()}})


@st.composite
def _numeral(draw, n: int) -> str:
    """`n` written as an integer, an integral decimal or in scientific notation, any sign and padding."""
    digits, sign = str(abs(n)), "-" if n < 0 else draw(st.sampled_from(["", "+"]))
    form = draw(st.sampled_from(["integer", "decimal", "scientific"]))
    if form == "integer":
        return sign + "0" * draw(st.integers(0, 3)) + digits
    if form == "decimal":
        return sign + "0" * draw(st.integers(0, 2)) + digits + "." + "0" * draw(st.integers(0, 4))
    # mantissa d.ddd x 10^e with the point anywhere (or none), trailing zeros, e/E, a signed or padded exponent
    point = draw(st.integers(1, len(digits)))
    zeros = "0" * draw(st.integers(0, 3))
    exponent = len(digits) - point
    mantissa = digits[:point] + ("." + digits[point:] + zeros if point < len(digits) or zeros else "")
    written = draw(st.sampled_from(["{}", "+{}", "{:02d}"])).format(exponent)
    return f"{sign}{mantissa}{draw(st.sampled_from('eE'))}{written}"


@st.composite
def _disguised(draw, text: str) -> str:
    """`text` with format characters anywhere in it and blanks at its ends."""
    chars = list(text)
    for _ in range(draw(st.integers(0, 3))):
        chars.insert(draw(st.integers(0, len(chars))), draw(st.sampled_from(FORMAT_CHARACTERS)))
    ends = st.text(st.sampled_from(BLANKS + FORMAT_CHARACTERS), max_size=3)
    return draw(ends) + "".join(chars) + draw(ends)


@st.composite
def _spellings_of_one_id(draw) -> tuple[int, list[str]]:
    n = draw(st.one_of(st.integers(-10**6, 10**9), st.integers(10**15, 10**30)))  # over 15 digits: no rounding
    return n, draw(st.lists(_numeral(n).flatmap(_disguised), min_size=2, max_size=8))


@settings(max_examples=30, deadline=None)
@given(_spellings_of_one_id())
def test_every_spelling_of_one_id_is_one_unit(case):
    n, spellings = case
    with tempfile.TemporaryDirectory() as folder:
        # the next integer, written plainly, stays another unit: nothing is merged that should not be
        result, quarantine, pings = _ingest(Path(folder), {"t.csv": _rows(spellings + [str(n + 1)])})
    assert quarantine.empty, quarantine[["row", "reason", "unit_raw"]]
    assert sorted(pings["unit"].unique(), key=int) == [str(n), str(n + 1)]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(MISSING).flatmap(
    lambda text: st.sampled_from([text, text.lower(), text.upper(), text.swapcase()])).flatmap(_disguised),
    min_size=1, max_size=6))
def test_every_spelling_of_missing_is_a_quarantined_missing_id(spellings):
    with tempfile.TemporaryDirectory() as folder:
        result, quarantine, pings = _ingest(Path(folder), {"t.csv": _rows(["u1", *spellings, "u2"])})
    assert sorted(pings["unit"]) == ["u1", "u2"]
    assert quarantine["row"].tolist() == list(range(2, 2 + len(spellings)))
    assert set(quarantine["reason"]) == {"missing_unit_id"}
    assert result.pings_read == len(spellings) + 2 and result.rejected_by_reason == {"missing_unit_id": len(spellings)}


def test_the_red_team_bike_is_one_unit_in_a_union_with_an_integer_column(tmp_path):
    """The issue's case: a Parquet BIGINT id and the same bike in a CSV, as a float's text, in scientific
    notation and behind a left-to-right mark, with a soft hyphen inside; one unit, beside another bike."""
    integers = pa.table({"device": pa.array([29590, 1234], pa.int64()),
                         **{k: pa.array([v] * 2) for k, v in OTHER.items()}})
    text = _rows(["29590.0", "2.959e4", "\u200e2959\u00ad0", "2.9590E+04", "01234"])
    result, quarantine, pings = _ingest(tmp_path, {"t1.parquet": integers, "t2.csv": text})
    assert quarantine.empty and len(pings) == 7
    assert sorted(pings["unit"].unique()) == ["1234", "29590"]


def test_long_ids_keep_every_digit(tmp_path):
    """Ids over 15 digits differ in their last digit: a DOUBLE would round them into one unit."""
    ids = ["123456789012345678901", "123456789012345678902.0", "1.23456789012345678903e20"]
    result, quarantine, pings = _ingest(tmp_path, {"t.csv": _rows(ids)})
    assert sorted(pings["unit"]) == ["123456789012345678901", "123456789012345678902", "123456789012345678903"]


def test_text_that_is_no_integer_stays_text(tmp_path):
    """Only numbers are written out: codes, hex, several points, inner spaces and fractions are ids as
    written (a fraction's trailing zeros apart), and 12.5 is not 12 or 13."""
    ids = ["u1", "0x1F", "1.2.3", "12 5", "12.5", "12.50", "1e999", "-", "e5"]
    result, quarantine, pings = _ingest(tmp_path, {"t.csv": _rows(ids)}, missing_unit_values=["unknown"])
    assert quarantine.empty
    assert sorted(pings["unit"].unique()) == sorted(["u1", "0x1F", "1.2.3", "12 5", "12.5", "1e999", "-", "e5"])
