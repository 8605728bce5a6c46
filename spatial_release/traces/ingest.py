"""Raw trace files -> validated pings (unit, UTC instant, lon, lat) plus a quarantine of rejected pings.

Files are read with DuckDB as text (`all_varchar`), so that a malformed value becomes a quarantined row with
its reason instead of an exception that loses the whole file. A trip row yields two pings (origin and
destination), each validated on its own: a trip that ends after the period keeps its origin.
Row numbers are 1-based data rows (a CSV's header is line 1, so data row N is line N + 1).

Time: every ping becomes the UTC instant its timestamp names, by the rule in `traces.timestamps` (a
local time the clocks skipped is quarantined as `nonexistent_local_time`; one they repeated is the earlier
instant).

Unit ids: integer columns stay integers; other ids are text without what draws nothing (control and format
characters anywhere, accents, blanks at the ends), compatibility forms, case and dashes folded and look-alikes
across scripts quarantined (`traces.unit_ids`), digits of any script in ASCII, a grouped number's marks
removed, every number written one exact way, so that 1234.0, 1.234e3, +1234, 01234, 1,234, １２３４, ¹²³⁴ and
an integer 1234 are one unit, in any file (`_with_unit`). A missing id (null, NaN or infinite, blank
text, a common spelling of missing such as `<NA>` or `#N/A`, or one of the policy's
`source.missing_unit_values`, compared case-insensitively) is quarantined as `missing_unit_id`, never
counted as a unit.
"""

from __future__ import annotations

import re
import sys
import time
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spatial_release.fileio import atomic_path
from spatial_release.period import Period
from spatial_release.policy import Policy, SourceSpec
from spatial_release.progress import Progress, ProgressEvent, silent
from spatial_release.traces.files import (  # noqa: F401 - re-exported: the traces' public entry points
    IngestError,
    check_trace_files,
    expand_patterns,
    open_file,
    resolve_trace_paths,
    unreadable_file,
)
from spatial_release.traces.sql import ident, sql_str
from spatial_release.traces.timestamps import LocalClock, timestamp_sql, zone_gap_sql
from spatial_release.traces.unit_ids import (
    FOLD_FUNCTION,
    LOOK_ALIKE,
    LOOK_ALIKE_FUNCTION,
    MIXED_SCRIPT,
    REORDERING,
    fold_spelling,
    register_unit_id_functions,
    reordered_problem,
    without_marks,
)

PING_COLUMNS = ("unit", "ts", "lon", "lat")
VALID_COLUMNS = (*PING_COLUMNS, "src")  # pings.parquet: src is the trace file's position
QUARANTINE_COLUMNS = ("file", "row", "trip_end", "reason", "detail", "unit_raw", "time_raw", "lon_raw", "lat_raw")


@dataclass(frozen=True)
class IngestResult:
    pings_path: Path
    quarantine_path: Path
    files: tuple[str, ...]
    input_columns: tuple[str, ...]
    rows_read: int
    pings_read: int
    pings_valid: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    examples: tuple[str, ...] = ()
    valid_by_file: dict[str, int] = field(default_factory=dict)  # file name -> valid pings

    @property
    def pings_rejected(self) -> int:
        return sum(self.rejected_by_reason.values())

    @property
    def rejected_share(self) -> float:
        return self.pings_rejected / self.pings_read if self.pings_read else 0.0

    def rejected_share_problem(self, limit: float) -> str | None:
        """A sentence describing why the rejected share is over `limit`, or None when it is within it."""
        if self.pings_read == 0:
            # the number of files, not their names: this sentence reaches Dagster metadata and alerts, and a
            # per-device export's name is a unit id (the work area's ingest.json lists them)
            return f"no pings were read from the {len(self.files)} input file(s) (names in ingest/ingest.json)"
        if self.rejected_share <= limit:
            return None
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(self.rejected_by_reason.items()))
        return (
            f"{self.pings_rejected} of {self.pings_read} pings rejected ({self.rejected_share:.2%}), over the "
            f"policy's limit of {limit:.2%} ({reasons}); first rejected: {'; '.join(self.examples)}; "
            f"all rejected rows are in {self.quarantine_path}"
        )


INTEGER_TYPES = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT")


# Integer ids counted as BIGINT; UBIGINT can exceed it and is read as text like HUGEINT.
ID_INTEGER_TYPES = tuple(t for t in INTEGER_TYPES if t != "UBIGINT")
FLOAT_TYPES = ("DOUBLE", "FLOAT", "REAL")
# The blanks stripped from the ends of a text id: a blank id is missing, whatever the blank is made of:
# ASCII whitespace and NUL, and the Unicode spaces an export can leave behind (no-break, en/em and
# ideographic spaces). An id made of U+00A0 or U+200B alone is no unit: k - 1 real units plus it would
# publish as k.
BLANK_CHARACTERS = (
    " \t\r\n\x0b\x0c\x00\x85\u00a0\u1680\u180e"
    + "".join(chr(c) for c in range(0x2000, 0x200E))
    + "\u2028\u2029\u202f\u205f\u2060\u3000\ufeff"
)
# The characters removed anywhere in a text id, not only at its ends: they draw nothing, so `29590`,
# `2959<U+00AD>0` and `<U+200E>29590` look alike to whoever reads the export, and are one bike.
# Every format character (category Cf: bidi marks, soft hyphen, invisible operators, tags U+E0020-E007F...)
# and the rest of Unicode's default-ignorable code points (variation selectors, Hangul fillers, U+034F).
_INVISIBLE = (
    r"\p{Cf}\x{034F}\x{115F}\x{1160}\x{17B4}\x{17B5}\x{180B}-\x{180F}\x{3164}\x{FE00}-\x{FE0F}"
    r"\x{FFA0}\x{E0000}-\x{E0FFF}"
)
_BLANK = "".join(f"\\x{{{ord(c):X}}}" for c in BLANK_CHARACTERS)
# RE2 (DuckDB's regexes). Removed anywhere: the invisibles and every control character (category Cc: a
# trailing DEL must not make `29590\x7f` another unit than 29590).
_HIDDEN = sql_str(f"[\\p{{Cc}}{_INVISIBLE}]")
# The controls that show an id in another order than it is stored (`traces.unit_ids.REORDERING`).
_REORDERS = sql_str("[" + "".join(f"\\x{{{ord(c):X}}}" for c in REORDERING) + "]")
# After accents are stripped: blanks at either end (a blank id is missing).
_ENDS = sql_str(f"^[{_BLANK}]+|[{_BLANK}]+$")
# The ids that need none of the Unicode steps: printable ASCII without blank, comma or apostrophe (the
# grouping marks). Most ids: one regex on them is the whole cost (`_clean_text_layers`).
_PLAIN = sql_str(r"[!-&(-+\--~]+")
# Digits of every script (category Nd: fullwidth `２９５９０`, Arabic-Indic `٢٩٥٩٠`...) as ASCII digits, and
# the signs and point a number can be written with outside ASCII (U+2212 minus, fullwidth + - .): each
# spelling is the same unit. translate() with all 650 digits builds its map again for every row, so each
# character's digit is computed from its code point instead: Unicode's digits come in runs of ten from a
# zero, each run inside one aligned block of 16 code points starting at offset 0 or 6, but for the
# mathematical digits (five runs, U+1D7CE-U+1D7FF).
_ZEROS = tuple(
    c for c in range(0x80, sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Nd" and unicodedata.digit(chr(c)) == 0
)
_MATH_DIGITS = (0x1D7CE, 0x1D7FF)
_SIGNS = {"\u2212": "-", "\ufe62": "+", "\ufe63": "-", "\uff0b": "+", "\uff0d": "-", "\uff0e": "."}
_NOT_ASCII_NUMERAL = sql_str(
    "[" + "".join(f"\\x{{{z:X}}}-\\x{{{z + 9:X}}}" for z in _ZEROS) + "".join(f"\\x{{{ord(c):X}}}" for c in _SIGNS) + "]"
)


def _ascii_numeral_sql(char: str) -> str:
    """One character as ASCII: a digit of any script its digit, a sign or point its ASCII one, else itself."""
    cp = f"unicode({char})"
    blocks = {
        offset: ", ".join(str(z >> 4) for z in _ZEROS if z % 16 == offset and not _MATH_DIGITS[0] <= z <= _MATH_DIGITS[1])
        for offset in (0, 6)
    }
    digit = (
        f"CASE WHEN {cp} BETWEEN {_MATH_DIGITS[0]} AND {_MATH_DIGITS[1]} THEN ({cp} - {_MATH_DIGITS[0]}) % 10 "
        f"WHEN ({cp} >> 4) IN ({blocks[6]}) AND ({cp} & 15) >= 6 THEN ({cp} & 15) - 6 "
        f"WHEN ({cp} >> 4) IN ({blocks[0]}) AND ({cp} & 15) <= 9 THEN {cp} & 15 END"
    )
    sign = "CASE " + " ".join(f"WHEN {char} = {sql_str(c)} THEN {sql_str(a)}" for c, a in _SIGNS.items())
    return f"coalesce(CAST({digit} AS VARCHAR), {sign} ELSE {char} END)"


def _ascii_numerals_sql(text: str) -> str:
    """`text` with its digits, signs and point in ASCII; a text without any outside ASCII is not split."""
    each = f"array_to_string(list_transform(string_split({text}, ''), lambda c: {_ascii_numeral_sql('c')}), '')"
    return f"CASE WHEN regexp_matches({text}, {_NOT_ASCII_NUMERAL}) THEN {each} ELSE {text} END"


# A number with its digits grouped (`29,590`, `29 590`, `29<U+202F>590`, `1'000`): only where removing the
# marks leaves a number is a mark removed, so `u 1` or `a,b` stay as written.
_GROUP_MARKS = " ,'\u00a0\u2007\u2009\u202f\u066c\u2019"
_GROUP_MARK = "".join(f"\\x{{{ord(c):X}}}" for c in _GROUP_MARKS)
_GROUPED = sql_str(f"[+-]?[0-9]+(?:[{_GROUP_MARK}][0-9]+)+(?:\\.[0-9]*)?")

# A number written in decimal, as text: sign, leading zeros, whole digits, fraction digits, trailing zeros,
# exponent (the zeros apart, so that the common spellings, 29590.0 or 007, need no string arithmetic). The
# exponent has two digits at most, so that the digits written out stay short (`1e99999` stays text: no real
# id). ASCII digits only: RE2's \d is [0-9].
_NUMBER = r"^([+-]?)(0*)(\d*?)(?:\.(\d*?)(0*))?(?:[eE]([+-]?\d{1,2}))?$"
_NUMBER_PARTS = "['sign', 'lead', 'whole', 'frac', 'trail', 'exp']"
# The spelling every other spelling of an integer becomes (a BIGINT's text), or it with `.0`: most ids.
_INTEGER_FAST = r"(-?[1-9]\d*|0)(\.0)?"
# Texts that mean 'no id' whatever the policy lists, compared in lower case after the id is cleaned: the
# spellings of missing of pandas (its default na_values, `<NA>`, `NaT`), spreadsheets (`#N/A`, `#NULL!`),
# databases and C/JavaScript exports, infinities, and an empty quoted string left in the field. Each was
# would count as one more unit. A policy's own `missing_unit_values` add to these.
COMMON_MISSING_IDS = (
    "",
    "null",
    "none",
    "na",
    "n/a",
    "nan",
    "-nan",
    "+nan",
    "nat",
    "<na>",
    "#n/a",
    "#n/a n/a",
    "#na",
    "#null!",
    "-1.#ind",
    "1.#ind",
    "-1.#qnan",
    "1.#qnan",
    "inf",
    "-inf",
    "+inf",
    "infinity",
    "-infinity",
    "+infinity",
    '""',
    "''",
    "(null)",
    "<null>",
    "undefined",
)


def _is_fractional_type(dtype: str) -> bool:
    return dtype in FLOAT_TYPES or dtype.startswith("DECIMAL")


def _visible_text_sql(text: str) -> str:
    """A text id that is not plain ASCII without what may make one id look like several: controls and
    invisibles anywhere, compatibility forms, case and dashes folded (`traces.unit_ids.fold_spelling`),
    accents (strip_accents: decomposed, every combining mark removed, recomposed; so NFC and NFD spellings of
    `josé`, a mark on a digit `29590<U+0301>`, and `jose` are one unit), blanks at its ends. Merging
    spellings can only lower a count, never publish one unit as several."""
    folded = f"{FOLD_FUNCTION}(regexp_replace({text}, {_HIDDEN}, '', 'g'))"
    return f"regexp_replace(strip_accents({folded}), {_ENDS}, '', 'g')"


def _clean_text_layers(raw: str, text: str) -> str:
    """`raw` plus `__unit_text`: the id `text` written one way: visible (`_visible_text_sql`), its numerals in
    ASCII, a grouped number's marks removed; and `__unit_look_alike`, why the id is quarantined as a
    look-alike of another (`traces.unit_ids.look_alike_problem`) or NULL. A plain ASCII id skips all of it
    but case folding: one regex decides; the other steps run on the rest only (CASE
    evaluates a branch on its rows alone), each in its own layer so that no step is computed twice."""
    plain = f"SELECT *, regexp_full_match({text}, {_PLAIN}) AS __unit_plain FROM {raw}"
    look_alike = f"{LOOK_ALIKE_FUNCTION}(regexp_replace({text}, {_HIDDEN}, '', 'g'))"
    # before the controls are removed: what shows an id in another order is a look-alike of another id
    held = ", ".join(
        f"CASE WHEN contains({text}, {sql_str(c)}) THEN {sql_str(f'U+{ord(c):04X} {unicodedata.name(c)}, ')} ELSE '' END"
        for c in REORDERING
    )
    look_alike = (
        f"CASE WHEN regexp_matches({text}, {_REORDERS}) THEN "
        f"{sql_str(reordered_problem(''))} || rtrim(concat({held}), ', ') ELSE {look_alike} END"
    )
    visible = (
        f"SELECT *, CASE WHEN __unit_plain THEN lower({text}) ELSE {_visible_text_sql(text)} END AS __unit_visible, "
        f"CASE WHEN NOT __unit_plain THEN {look_alike} END AS __unit_look_alike FROM ({plain})"
    )
    ascii_ = (
        f"SELECT * EXCLUDE (__unit_visible), CASE WHEN __unit_plain THEN __unit_visible "
        f"ELSE {_ascii_numerals_sql('__unit_visible')} END AS __unit_ascii FROM ({visible})"
    )
    grouped = (
        f"CASE WHEN __unit_plain THEN __unit_ascii WHEN regexp_full_match(__unit_ascii, {_GROUPED}) "
        f"THEN regexp_replace(__unit_ascii, {sql_str(f'[{_GROUP_MARK}]')}, '', 'g') ELSE __unit_ascii END"
    )
    return f"(SELECT * EXCLUDE (__unit_plain, __unit_ascii), {grouped} AS __unit_text FROM ({ascii_}))"


def _shifted_sql(number: str) -> tuple[str, str]:
    """(digits before the point, digits after it) of a number with an exponent, its digits moved by it."""
    digits = f"({number}.whole || {number}.frac)"
    point = f"(length({number}.whole) + TRY_CAST({number}.exp AS INTEGER))"
    padded = f"(repeat('0', greatest(0, -{point})) || {digits} || repeat('0', greatest(0, {point} - length({digits}))))"
    cut = f"greatest({point}, 0)"
    return f"ltrim(left({padded}, {cut}), '0')", f"rtrim(substr({padded}, {cut} + 1), '0')"


def _decimal_sql(number: str) -> str:
    """The exact decimal text of a number's parts (a struct of _NUMBER_PARTS): no exponent, no '+', no
    leading zeros, no trailing zeros after the point, '-' only on a non-zero value. Only digits move, so an
    id of any length keeps every digit (a DOUBLE would round ids over 15 digits)."""
    shifted_whole, shifted_frac = _shifted_sql(number)
    whole = f"CASE WHEN {number}.exp = '' THEN {number}.whole ELSE {shifted_whole} END"
    frac = f"CASE WHEN {number}.exp = '' THEN {number}.frac ELSE {shifted_frac} END"
    return (
        f"CASE WHEN {whole} = '' AND {frac} = '' THEN '0' ELSE "
        f"CASE WHEN {number}.sign = '-' THEN '-' ELSE '' END || coalesce(nullif({whole}, ''), '0') "
        f"|| CASE WHEN {frac} = '' THEN '' ELSE '.' || {frac} END END"
    )


def _with_id_text(raw: str, column: str, dtype: str) -> str:
    """`raw` plus `__unit_text`, a non-integer id as text before numbers are written out: a float column's
    integral values as the integer (TRY_CAST: DuckDB may evaluate the THEN branch on rows the condition
    excludes, NaN or 1e300); other ids written one way (`_clean_text_layers`)."""
    col = ident(column)
    if not _is_fractional_type(dtype):
        return _clean_text_layers(raw, f"CAST({col} AS VARCHAR)")
    finite = f"isfinite({col}) AND " if dtype in FLOAT_TYPES else ""
    text = (
        f"CASE WHEN {finite}{col} = trunc({col}) AND abs({col}) < 9.2e18 "
        f"THEN CAST(TRY_CAST({col} AS BIGINT) AS VARCHAR) ELSE CAST({col} AS VARCHAR) END"
    )
    return f"(SELECT *, {text} AS __unit_text FROM {raw})"


def _with_unit(raw: str, column: str, dtype: str) -> str:
    """`raw` plus the column `__unit`: the text id with every number written one way (`_decimal_sql`), so
    that 29590, 29590.0, +29590, 029590, 2.959e4 and a BIGINT 29590 of another file are one unit. Integer
    columns need none (their ids are counted as BIGINT; a union with text files writes them as this text).

    Leading zeros go too: `007` is the unit 7. A zero-padded device code is then the same unit as its
    number, which is what a spreadsheet or a float column makes of it; two devices whose codes differ only
    by padding would be counted as one, which can only lower a count, never publish one unit as several."""
    if dtype in ID_INTEGER_TYPES:
        return raw
    # Three steps, each computed once a row: the visible text; its number parts, only where it is not
    # already an integer's text, nor one with `.0` (a float column's CSV: a pandas column of ids with a
    # blank is floats); the unit.
    parts = (
        f"CASE WHEN NOT regexp_full_match(__unit_text, {sql_str(_INTEGER_FAST)}) "
        f"THEN regexp_extract(__unit_text, {sql_str(_NUMBER)}, {_NUMBER_PARTS}) END"
    )
    digits = "__unit_number.lead || __unit_number.whole || __unit_number.frac || __unit_number.trail"
    unit = (
        f"CASE WHEN __unit_number IS NULL THEN "
        f"CASE WHEN suffix(__unit_text, '.0') THEN left(__unit_text, -2) ELSE __unit_text END "
        f"WHEN {digits} = '' THEN __unit_text ELSE {_decimal_sql('__unit_number')} END"
    )
    return (
        f"(SELECT * EXCLUDE (__unit_number), {unit} AS __unit FROM ("
        f"SELECT *, {parts} AS __unit_number FROM {_with_id_text(raw, column, dtype)}))"
    )


def _look_alike_sql(dtype: str) -> str:
    """Why a text id is quarantined as a look-alike (`_clean_text_layers`); a number never is."""
    return "CAST(NULL AS VARCHAR)" if dtype in ID_INTEGER_TYPES or _is_fractional_type(dtype) else "__unit_look_alike"


def _unit_sql(column: str, dtype: str) -> str:
    """Integer ids stay integers (cheaper to count than text); others are `__unit` (`_with_unit`)."""
    return f"CAST({ident(column)} AS BIGINT)" if dtype in ID_INTEGER_TYPES else "__unit"


_NUMBER_TEXT = re.compile(_NUMBER)


def _listed_id(text: str) -> str:
    """A policy's missing value as `_with_unit` writes ids (spelling folded, accents stripped, blanks trimmed,
    numbers written out), in lower case: the policy's `-1` is then missing as `-1.0` too, its `—` as the
    data's `—`, which is `-` once folded, its `inconnu` with an accent as the data's. (A policy is typed by
    hand: no format characters.)"""
    text = without_marks(fold_spelling(text)).strip(BLANK_CHARACTERS)
    match = _NUMBER_TEXT.fullmatch(text)
    if not match or not any(match[group] for group in (2, 3, 4, 5)):  # no digit: not a number
        return text.lower()
    value = Decimal(text)  # exact, for the spellings _NUMBER matches
    return format(value.normalize(), "f") if value else "0"


def _finite_numbers(values: Iterable[str]) -> list[float]:
    out = []
    for value in values:
        try:
            number = float(value.strip())
        except ValueError:
            continue
        if number == number and abs(number) != float("inf"):
            out.append(number)
    return out


def _unit_missing_sql(column: str, dtype: str, missing_values: Sequence[str]) -> str:
    """The unit id is missing: NULL, NaN or infinite, blank text, one of the common spellings of missing or
    a listed missing value (for a numeric column, the listed values that are numbers). Typed columns are
    never formatted as text for this."""
    col = ident(column)
    numbers = _finite_numbers(missing_values)
    if dtype in ID_INTEGER_TYPES:
        listed = sorted({int(n) for n in numbers if n.is_integer()})
        return f"({col} IS NULL{f' OR {col} IN ({chr(44).join(map(str, listed))})' if listed else ''})"
    if _is_fractional_type(dtype):
        not_finite = f" OR NOT isfinite({col})" if dtype in FLOAT_TYPES else ""
        listed_sql = f" OR CAST({col} AS DOUBLE) IN ({', '.join(map(repr, sorted(set(numbers))))})" if numbers else ""
        return f"({col} IS NULL{not_finite}{listed_sql})"
    texts = sorted(set(COMMON_MISSING_IDS) | {_listed_id(value) for value in missing_values})
    return f"(__unit IS NULL OR lower(__unit) IN ({', '.join(sql_str(t) for t in texts)}))"


NUMERIC_TYPES = INTEGER_TYPES + ("DOUBLE", "FLOAT", "REAL", "HUGEINT")


def _coordinate_sql(column: str, dtype: str) -> str:
    """Numeric columns are read as numbers; text is parsed (a failure is NULL, quarantined with its text)."""
    if dtype in NUMERIC_TYPES or dtype.startswith("DECIMAL"):
        return f"CAST({ident(column)} AS DOUBLE)"
    return f"TRY_CAST(trim(CAST({ident(column)} AS VARCHAR)) AS DOUBLE)"


def _blank_sql(column: str, dtype: str) -> str:
    """The value is missing: NULL, or blank text. Typed columns are never formatted as text on the hot path."""
    if dtype == "VARCHAR":
        return f"({ident(column)} IS NULL OR trim({ident(column)}) = '')"
    return f"({ident(column)} IS NULL)"


def _ping_select(
    raw: str,
    path: Path,
    end: str,
    unit: str,
    time: str,
    lon: str,
    lat: str,
    types: dict[str, str],
    source: SourceSpec,
    clock: LocalClock,
) -> str:
    # The *_raw text columns only feed the quarantine: valid pings never pay for formatting them. The inner
    # query parses each timestamp once; the outer one turns a local time into its instant.
    time_sql = timestamp_sql(time, types[time], source)
    instant = time_sql.instant or "CAST(NULL AS TIMESTAMPTZ)"
    local = time_sql.local or "CAST(NULL AS TIMESTAMP)"
    return f"""
        SELECT * EXCLUDE (__instant, __local),
               coalesce(__instant, {clock.instant_sql("__local")}) AS ts,
               (__instant IS NULL AND {clock.nonexistent_sql("__local")})
                   OR {zone_gap_sql("time_raw", "__instant", types[time], source)} AS time_nonexistent
        FROM (
            SELECT {sql_str(str(path))} AS file, __row AS row, {sql_str(end)} AS trip_end,
                   {_unit_sql(unit, types[unit])} AS unit_raw,
                   {_unit_missing_sql(unit, types[unit], source.missing_unit_values)} AS unit_missing,
                   {_look_alike_sql(types[unit])} AS unit_look_alike,
                   {time_sql.raw} AS time_raw,
                   {_blank_sql(time, types[time])} AS time_missing,
                   {time_sql.bad_offset} AS time_offset_bad,
                   CAST({ident(lon)} AS VARCHAR) AS lon_raw,
                   CAST({ident(lat)} AS VARCHAR) AS lat_raw,
                   {instant} AS __instant,
                   {local} AS __local,
                   {_coordinate_sql(lon, types[lon])} AS lon,
                   {_coordinate_sql(lat, types[lat])} AS lat
            FROM {_with_unit(raw, unit, types[unit])})"""


def _pings_of_file(raw: str, path: Path, types: dict[str, str], source: SourceSpec, clock: LocalClock) -> str:
    if source.format == "pings":
        # the policy model requires the three columns of a pings source (SourceSpec's validator)
        assert source.time is not None and source.lon is not None and source.lat is not None
        return _ping_select(raw, path, "", source.unit, source.time, source.lon, source.lat, types, source, clock)
    ends = {"origin": source.origin, "destination": source.destination}
    return " UNION ALL ".join(
        _ping_select(raw, path, name, source.unit, end.time, end.lon, end.lat, types, source, clock)  # type: ignore[union-attr]
        for name, end in ends.items()
    )


def _reason_sql(start_utc: str, end_utc: str, source: SourceSpec) -> tuple[str, str]:
    """(reason, detail) CASE expressions; the first failing rule wins, so each row has one reason."""
    rules = [
        (
            "unit_missing",
            "missing_unit_id",
            "'the unit id is missing (null, NaN, blank, a spelling of missing such as NA or #N/A, or one of '"
            "'source.missing_unit_values)'",
        ),
        *(
            (f"split_part(unit_look_alike, chr(9), 1) = '{name}'", name, "split_part(unit_look_alike, chr(9), 2)")
            for name in (MIXED_SCRIPT, LOOK_ALIKE)
        ),
        ("time_missing", "missing_timestamp", "'the timestamp is empty'"),
        # before its instant is used: DuckDB's strptime shifts the instant by any offset it reads
        (
            "time_offset_bad",
            "offset_out_of_range",
            "'timestamp \"' || time_raw || '\" names a UTC offset outside -14:00 to +14:00 (or over 59 minutes)'",
        ),
        (
            "time_nonexistent",
            "nonexistent_local_time",
            f"'local time \"' || time_raw || '\" does not exist in {source.timezone} (the clocks skipped it)'",
        ),
        (
            "ts IS NULL",
            "unparseable_timestamp",
            f"'timestamp \"' || time_raw || '\" matches none of the formats ' || {sql_str(str(source.time_formats))}",
        ),
        (
            "lon IS NULL OR lat IS NULL",
            "coordinate_not_a_number",
            "'lon/lat \"' || coalesce(lon_raw, 'NULL') || '\", \"' || coalesce(lat_raw, 'NULL') || '\"' "
            "|| ' is not a number'",
        ),
        ("isnan(lon) OR isnan(lat)", "coordinate_not_a_number", "'lon/lat ' || lon_raw || ', ' || lat_raw || ' is NaN'"),
        (
            "NOT (lon BETWEEN -180 AND 180) OR NOT (lat BETWEEN -90 AND 90)",
            "coordinate_out_of_range",
            "'lon/lat ' || lon_raw || ', ' || lat_raw || ' outside [-180, 180] x [-90, 90]'",
        ),
        ("lon = 0 AND lat = 0", "coordinate_null_island", "'lon/lat 0, 0 is the usual placeholder of a missing GPS fix'"),
        (
            f"ts < TIMESTAMPTZ {start_utc} OR ts >= TIMESTAMPTZ {end_utc}",
            "outside_period",
            "'instant ' || strftime(ts, '%Y-%m-%dT%H:%M:%SZ') || ' is outside the period'",
        ),
    ]
    reason = "CASE " + " ".join(f"WHEN {cond} THEN '{name}'" for cond, name, _ in rules) + " END"
    detail = "CASE " + " ".join(f"WHEN {cond} THEN {text}" for cond, _, text in rules) + " END"
    return reason, detail


def _quarantine_column(name: str) -> str:
    return "CAST(unit_raw AS VARCHAR) AS unit_raw" if name == "unit_raw" else name


OUTPUT_BATCH_ROWS = 1_000_000


def _write_outputs(con: duckdb.DuckDBPyConnection, pings_path: Path, quarantine_path: Path) -> None:
    """One scan of the validated view: each batch's valid pings go to pings.parquet, its rejected rows to a
    temporary file, sorted into quarantine.parquet at the end. Validation (time zones, text to numbers) is
    most of the cost of ingest, so every row is validated once, not once per output. The quarantine's raw
    values are selected for rejected rows only."""
    kept = [
        f"CASE WHEN reason IS NULL THEN NULL ELSE {_quarantine_column(c).rsplit(' AS ', 1)[0]} END AS {c}"
        for c in QUARANTINE_COLUMNS
    ]
    query = f"SELECT unit_raw AS unit, ts, lon, lat, src, {', '.join(kept)} FROM checked"
    # in the spill folder, a per-unit artefact deleted at retention with the rest, should a kill leave it
    spill = quarantine_path.parent / "spill"
    spill.mkdir(parents=True, exist_ok=True)
    rejected_tmp = spill / f"rejected-{uuid.uuid4().hex}.parquet"
    pings_writer = rejected_writer = None
    try:
        with atomic_path(pings_path) as pings_tmp:
            for batch in con.sql(query).to_arrow_reader(OUTPUT_BATCH_ROWS):
                valid = pc.is_null(batch.column("reason"))
                pings = batch.filter(valid).select(list(VALID_COLUMNS))
                if pings_writer is None:
                    pings_writer = pq.ParquetWriter(str(pings_tmp), pings.schema)
                pings_writer.write_batch(pings)
                rejected = batch.filter(pc.invert(valid)).select(list(QUARANTINE_COLUMNS))
                if rejected.num_rows:
                    if rejected_writer is None:
                        rejected_writer = pq.ParquetWriter(str(rejected_tmp), rejected.schema)
                    rejected_writer.write_batch(rejected)
            if pings_writer is None:  # no row at all: an empty file with the columns
                con.execute(
                    f"COPY (SELECT unit_raw AS unit, ts, lon, lat, src FROM checked LIMIT 0) "
                    f"TO {sql_str(str(pings_tmp))} (FORMAT parquet)"
                )
            else:
                pings_writer.close()
                pings_writer = None
        source = f"read_parquet({sql_str(str(rejected_tmp))})" if rejected_writer is not None else f"({query} LIMIT 0)"
        if rejected_writer is not None:
            rejected_writer.close()
            rejected_writer = None
        with atomic_path(quarantine_path) as tmp:
            con.execute(
                f"COPY (SELECT {', '.join(QUARANTINE_COLUMNS)} FROM {source} ORDER BY file, row, trip_end) "
                f"TO {sql_str(str(tmp))} (FORMAT parquet)"
            )
    finally:
        for writer in (pings_writer, rejected_writer):
            if writer is not None:
                writer.close()
        rejected_tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class _OpenedFiles:
    """The trace files registered on the connection: each one's pings as a SELECT, and what was read."""

    selects: tuple[str, ...]
    columns: frozenset[str]
    rows_read: int


def _connect(out_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    register_unit_id_functions(con)
    con.execute(f"SET temp_directory = {sql_str(str(out_dir / 'spill'))}")
    return con


def _open_files(
    con: duckdb.DuckDBPyConnection, files: Sequence[Path], source: SourceSpec, clock: LocalClock, progress: Progress
) -> _OpenedFiles:
    columns: set[str] = set()
    selects: list[str] = []
    rows_read = 0
    for i, path in enumerate(files):
        types = open_file(con, path, source, f"raw_{i}")
        columns.update(c for c in types if c != "__row")
        try:
            counted = con.execute(f"SELECT count(*) FROM raw_{i}").fetchone()
        except duckdb.Error as exc:  # a value the reader cannot convert fails the count already
            raise unreadable_file(con, files[: i + 1], source, exc) from None
        if counted is None:  # count(*) always answers one row
            raise RuntimeError(f"no row count for {path}")
        rows = counted[0]
        rows_read += rows
        # `src` (the file's position) lets later checks say which file a ping came from, e.g. the file
        # whose pings fall outside the geometry; a SMALLINT costs next to nothing in the Parquet file.
        selects.append(
            f"SELECT *, CAST({i} AS SMALLINT) AS src FROM ({_pings_of_file(f'raw_{i}', path, types, source, clock)})"
        )
        # files by position: the progress reaches the Dagster event log, and a per-device export's name is a
        # unit id (the work area's ingest.json lists the names in this order)
        progress(
            ProgressEvent("ingest", f"ingest: input file {i + 1} of {len(files)}: {rows:,} rows", share=(i + 1) / len(files))
        )
    return _OpenedFiles(tuple(selects), frozenset(columns), rows_read)


def _write_checked(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[Path],
    source: SourceSpec,
    pings_path: Path,
    quarantine_path: Path,
    progress: Progress,
) -> None:
    started = time.perf_counter()
    try:
        _write_outputs(con, pings_path, quarantine_path)
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        # a corrupt page met after the first batch surfaces through pyarrow's reader, not as a DuckDB error
        raise unreadable_file(con, files, source, exc) from None
    seconds = time.perf_counter() - started
    progress(
        ProgressEvent(
            "ingest", f"ingest: valid pings and quarantine written in {seconds:.1f} s", share=1.0, seconds=seconds, done=True
        )
    )


def _rejections(
    con: duckdb.DuckDBPyConnection, quarantine_path: Path, files: Sequence[Path]
) -> tuple[dict[str, int], tuple[str, ...]]:
    """(rejected pings by reason, the first rejected rows named by file position, row and reason)."""
    con.execute(f"CREATE TEMP TABLE rejected AS SELECT * FROM read_parquet({sql_str(str(quarantine_path))})")
    by_reason = dict(con.execute("SELECT reason, count(*) FROM rejected GROUP BY reason ORDER BY reason").fetchall())
    # File, row and reason only: the detail quotes the raw values (a person's id, time and place), which stay
    # in the internal quarantine file and out of logs and check messages.
    place = {str(f): f"input file {i + 1} of {len(files)}" for i, f in enumerate(files)}  # never the name
    examples = tuple(
        f"{place.get(file, 'an input file')} row {row}{' ' + trip_end if trip_end else ''}: {reason_}"
        for file, row, trip_end, reason_ in con.execute(
            "SELECT file, row, trip_end, reason FROM rejected ORDER BY file, row, trip_end LIMIT 3"
        ).fetchall()
    )
    return by_reason, examples


def ingest_traces(
    policy: Policy, period: Period, files: Sequence[Path], out_dir: Path, progress: Progress = silent
) -> IngestResult:
    """Read, map and validate every trace file; write `pings.parquet` and `quarantine.parquet` into out_dir.

    policy: the columns, time formats, time zone and missing-id texts (`source`). period: pings outside it
    are quarantined (`outside_period`). files: the trace files, e.g. from `resolve_trace_paths` (CSV or
    Parquet). out_dir: where the two Parquet files go (and DuckDB's spill folder). progress: told each
    file's row count and the write time.

    Each valid ping is (unit, ts in UTC, lon, lat, src = the file's position in `files`); each rejected one
    is a quarantine row with file, row, trip end, reason, detail and its raw values (internal: they quote a
    person's id and whereabouts). Validation is a view over the files, read once in record batches that are
    split into the two files, so memory stays bounded whatever the number of pings. Raises IngestError when
    a file cannot be read at all (naming it, never quoting a row). The returned IngestResult carries the
    counts by reason and the first rejected rows by file, row and reason only."""
    source = policy.source
    out_dir.mkdir(parents=True, exist_ok=True)
    con = _connect(out_dir)
    start, end = period.utc_window(policy.time.timezone)
    reason, detail = _reason_sql(sql_str(start.isoformat()), sql_str(end.isoformat()), source)
    opened = _open_files(con, files, source, LocalClock.around(source.timezone, start, end), progress)
    con.execute(
        f"CREATE TEMP VIEW checked AS SELECT *, {reason} AS reason, {detail} AS detail "
        f"FROM ({' UNION ALL '.join(opened.selects)})"
    )
    pings_path = out_dir / "pings.parquet"
    quarantine_path = out_dir / "quarantine.parquet"
    _write_checked(con, files, source, pings_path, quarantine_path, progress)
    by_reason, examples = _rejections(con, quarantine_path, files)
    per_src = dict(
        con.execute(f"SELECT src, count(*) FROM read_parquet({sql_str(str(pings_path))}) GROUP BY src").fetchall()
    )
    valid = sum(per_src.values())
    pings_read = valid + sum(by_reason.values())
    con.close()
    return IngestResult(
        pings_path=pings_path,
        quarantine_path=quarantine_path,
        files=tuple(str(f) for f in files),
        input_columns=tuple(sorted(opened.columns)),
        rows_read=opened.rows_read,
        pings_read=pings_read,
        pings_valid=pings_read - sum(by_reason.values()),
        rejected_by_reason=by_reason,
        examples=examples,
        valid_by_file={Path(f).name: int(per_src.get(i, 0)) for i, f in enumerate(files)},
    )
