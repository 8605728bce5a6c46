"""Attacks that count one unit as several. Compared as text, `29590`, `29590.0`, `2.959e4` and `29590`
behind an invisible format character (U+200E, a soft hyphen inside...) would be four units, and `<NA>`,
`#N/A`, `NaT`, `inf` or `""` units too: one bike written three ways would publish as 3 devices at k = 3 with
every check passing. Each spelling of one id must be one unit, each spelling of missing a quarantined
`missing_unit_id` (counted, not lost). The expected units are derived here from the integer the spellings
were made of, never with the code under test."""

from __future__ import annotations

import sys
import tempfile
import unicodedata
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fixture import policy_dict, write_policy

from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.traces.ingest import ingest_traces, resolve_trace_paths

Q1 = Period.parse("2018-Q1")
OTHER = {"when": "2018-01-10 08:00:00", "lon": -74.05, "lat": 40.72, "gender": "f"}

# Format characters (category Cf, outside the blanks trimmed as whitespace), and some of the blanks an export
# leaves at the ends.
FORMAT_CHARACTERS = (
    "\u00ad\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064"
    + "".join(map(chr, range(0x206A, 0x2070)))
    + "\ufeff\ufff9\ufffa\ufffb\U000110bd\U000e0001"
    + "".join(map(chr, range(0xE0020, 0xE0080, 7)))
)
BLANKS = " \t\u00a0\u2003\u202f\u3000"
# Other ways to make one id several: the zero of every script's digits (category Nd, derived here with
# unicodedata), grouping marks, control characters (category Cc; no NUL, no line break: a CSV field),
# combining marks (category Mn) and the minus signs that are not ASCII.
ZEROS = tuple(
    chr(c)
    for c in range(0x80, sys.maxunicode + 1)
    if unicodedata.category(chr(c)) == "Nd" and unicodedata.digit(chr(c)) == 0
)
GROUP_MARKS = " ,'\u00a0\u202f\u2009"
CONTROLS = "\x01\x08\x1b\x7f\x85\x9f"
MARKS = "\u0300\u0301\u0308\u0327\u0338\u20d7\u1ab0"
MINUSES = "-\u2212\uff0d\ufe63"
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


def _grouped(digits: str, mark: str) -> str:
    """`digits` in groups of three from the right, `mark` between them (`29,590`)."""
    head = len(digits) % 3 or 3
    return mark.join([digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)])


@st.composite
def _numeral(draw, n: int) -> str:
    """`n` written as an integer, an integral decimal or in scientific notation, any sign and padding; the
    first two with their digits grouped or not."""
    digits, sign = str(abs(n)), "-" if n < 0 else draw(st.sampled_from(["", "+"]))
    form = draw(st.sampled_from(["integer", "decimal", "scientific"]))
    if form != "scientific" and draw(st.booleans()):
        digits = _grouped(digits, draw(st.sampled_from(GROUP_MARKS)))
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
def _respelled(draw, text: str) -> str:
    """`text` with its digits in other scripts (each digit in one of a few), a minus that is not ASCII,
    control characters and combining marks anywhere."""
    zeros = draw(st.lists(st.sampled_from(ZEROS), min_size=1, max_size=3))
    chars = [
        chr(ord(draw(st.sampled_from(["0", *zeros]))) + int(c))
        if c.isdigit()
        else draw(st.sampled_from(MINUSES))
        if c == "-"
        else c
        for c in text
    ]
    for extra in (CONTROLS, MARKS):
        for _ in range(draw(st.integers(0, 2))):
            chars.insert(draw(st.integers(0, len(chars))), draw(st.sampled_from(extra)))
    return "".join(chars)


@st.composite
def _spellings_of_one_id(draw) -> tuple[int, list[str]]:
    n = draw(st.one_of(st.integers(-(10**6), 10**9), st.integers(10**15, 10**30)))  # over 15 digits: no rounding
    return n, draw(st.lists(_numeral(n).flatmap(_respelled).flatmap(_disguised), min_size=2, max_size=8))


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(_spellings_of_one_id())
def test_every_spelling_of_one_id_is_one_unit(case):
    n, spellings = case
    with tempfile.TemporaryDirectory() as folder:
        # the next integer, written plainly, stays another unit: nothing is merged that should not be
        result, quarantine, pings = _ingest(Path(folder), {"t.csv": _rows(spellings + [str(n + 1)])})
    assert quarantine.empty, quarantine[["row", "reason", "unit_raw"]]
    assert sorted(pings["unit"].unique(), key=int) == [str(n), str(n + 1)]


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.sampled_from(MISSING)
        .flatmap(lambda text: st.sampled_from([text, text.lower(), text.upper(), text.swapcase()]))
        .flatmap(_disguised),
        min_size=1,
        max_size=6,
    )
)
def test_every_spelling_of_missing_is_a_quarantined_missing_id(spellings):
    with tempfile.TemporaryDirectory() as folder:
        result, quarantine, pings = _ingest(Path(folder), {"t.csv": _rows(["u1", *spellings, "u2"])})
    assert sorted(pings["unit"]) == ["u1", "u2"]
    assert quarantine["row"].tolist() == list(range(2, 2 + len(spellings)))
    assert set(quarantine["reason"]) == {"missing_unit_id"}
    assert result.pings_read == len(spellings) + 2 and result.rejected_by_reason == {"missing_unit_id": len(spellings)}


def test_a_bike_as_float_text_and_behind_format_characters_is_one_unit_with_its_integer_id(tmp_path):
    """A Parquet BIGINT id and the same bike in a CSV, as a float's text, in scientific notation and behind a
    left-to-right mark, with a soft hyphen inside; one unit, beside another bike."""
    integers = pa.table({"device": pa.array([29590, 1234], pa.int64()), **{k: pa.array([v] * 2) for k, v in OTHER.items()}})
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
    """Only numbers are written out: codes, hex, several points, inner spaces and commas between other than
    digits, and fractions are ids as written (a fraction's trailing zeros apart), and 12.5 is not 12 or 13.
    Case is folded: `AB12`, `Ab12` and `ab12` are one unit (an export changes the case of UUIDs and
    advertising ids; docs/policies.md)."""
    ids = ["u1", "0x1F", "1.2.3", "u 1", "a,b", "12 b", "12.5", "12.50", "1e999", "-", "e5", "AB12", "ab12", "Ab12"]
    result, quarantine, pings = _ingest(tmp_path, {"t.csv": _rows(ids)}, missing_unit_values=["unknown"])
    assert quarantine.empty
    assert sorted(pings["unit"].unique()) == sorted(
        ["u1", "0x1f", "1.2.3", "u 1", "a,b", "12 b", "12.5", "1e999", "-", "e5", "ab12"]
    )


def test_a_bike_spelled_many_ways_is_one_unit(tmp_path):
    """Each of these spellings, counted apart, would be one more unit beside 29590 (a 2-unit cell published
    as 3 at k = 3): digits of other scripts, grouped digits, a control character, a combining mark, a
    Unicode minus. Beside them, NFC and NFD spellings of `josé` (and `jose`: accents are stripped) are one
    unit, and 29591 and -29590 stay others."""
    bike = [
        "29590",
        "\uff12\uff19\uff15\uff19\uff10",
        "\u0662\u0669\u0665\u0669\u0660",
        "\u0968\u096f\u096b\u096f\u0966",
        "29,590",
        "29 590",
        "29\u00a0590",
        "29\u202f590",
        "29590\x7f",
        "\x1b29590",
        "29590\u0301",
        "\uff12\uff19,\uff15\uff19\uff10.0",
        "2\u0301.959e4",
        "\U0001d7d0\U0001d7d7\U0001d7d3\U0001d7d7\U0001d7ce",
    ]
    minus = ["-29590", "\u221229590", "\u2212\uff12\uff19\uff15\uff19\uff10", "-29,590"]
    names = ["jos\u00e9", "jose\u0301", "jose", "\u200ejose\u0301 "]
    result, quarantine, pings = _ingest(tmp_path, {"t.csv": _rows(bike + minus + names + ["29591"])})
    assert quarantine.empty
    expected = ["29590"] * len(bike) + ["-29590"] * len(minus) + ["jose"] * len(names) + ["29591"]
    assert sorted(pings["unit"]) == sorted(expected)


def test_a_grouped_number_is_its_number_and_other_marks_stay(tmp_path):
    """A grouping mark goes only where the rest is a number: `12 5` and `1,2` are 125 and 12 (merging
    can only lower a count); `12 5 a`, `,12` and `12,` keep them."""
    ids = ["12 5", "125", "1,2", "1'000'000", "1\u2009000.50", "12 5 a", ",12", "12,", "1,,2"]
    result, quarantine, pings = _ingest(tmp_path, {"t.csv": _rows(ids)})
    assert quarantine.empty
    assert sorted(pings["unit"]) == sorted(["125", "125", "12", "1000000", "1000.5", "12 5 a", ",12", "12,", "1,,2"])


@pytest.mark.slow
def test_every_unicode_digit_is_its_ascii_digit_and_nothing_else_changes():
    """The numerals step computes a digit from its code point (no table of 650 digits): checked here on
    every code point against unicodedata, alone and in a text."""
    import duckdb

    from spatial_release.traces.ingest import _ascii_numerals_sql

    signs = {"\u2212": "-", "\ufe62": "+", "\ufe63": "-", "\uff0b": "+", "\uff0d": "-", "\uff0e": "."}
    con = duckdb.connect()
    inside = _ascii_numerals_sql("'x' || t || 'y'")
    got = con.execute(
        f"SELECT i, {_ascii_numerals_sql('t')}, {inside} "
        f"FROM (SELECT i, chr(CAST(i AS INTEGER)) AS t FROM range(1, {sys.maxunicode + 1}) r(i) "
        "WHERE i NOT BETWEEN 55296 AND 57343)"
    ).fetchall()
    for i, alone, inside in got:
        char = chr(i)
        expected = str(unicodedata.digit(char)) if unicodedata.category(char) == "Nd" else signs.get(char, char)
        assert (alone, inside) == (expected, f"x{expected}y"), hex(i)
