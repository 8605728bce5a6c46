"""Unit ids that read alike: the spellings folded into one unit, and the look-alikes quarantined.

An export spells one device many ways: office tools turn a hyphen into a dash, East Asian input methods type
fullwidth letters, a spreadsheet writes superscript digits or changes case. Each spelling counted as another
unit publishes one device as several (seven spellings of one device in a cell were published as 6 at k = 5).
So a text id is folded (`fold_spelling`) before it is compared:
- Unicode compatibility forms (NFKC): fullwidth `ｄｅｖ`, superscript and subscript digits `²⁹⁵⁹⁰`, ligatures,
  mathematical letters, circled and parenthesised numbers are their plain characters;
- case (Unicode full case folding, `DEV`, `Dev` and `dev` are one unit): ids whose case an export changes are
  common (UUIDs and advertising ids are upper case on one platform, lower case in most databases), while two
  devices told apart by case alone are rare; folding can lower a count, never publish one unit as several;
- every dash (category Pd: U+2010 hyphen, U+2011 non-breaking hyphen, en and em dashes...) and minus sign
  (U+2212, superscript and subscript minus, U+02D7, U+2796, small and fullwidth hyphen-minus) is `-`;
- a circled digit NFKC leaves as it is (the dingbat, negative and double-circled ones: `❼`, `➆`, `➐`, `⓻`)
  is its digit, as `⑦` is.

What remains are look-alikes across scripts (Cyrillic `е` in `dеv`, Greek `ο`, Latin `ı`). Folding them into
the letter they resemble (confusable skeletons, Unicode TS #39) would also fold ids that differ (`l`, `I` and
`1` share a skeleton), so they are quarantined instead, with a reason (`look_alike_problem`):
`mixed_script_unit_id` for letters of more than one script (Han with kana, Hangul or Bopomofo counts as one,
as TS #39 resolves them), and `look_alike_unit_id` for an id outside ASCII every character of which looks
like an ASCII one, in Unicode's confusables data or by its name (small capitals `ᴅᴇᴠ`, the negative squared
and circled letters `🅳`, `🅓` and the regional indicators `🇩`, which the data leaves out). An id holding a
control that shows it in another order than it is stored (a right-to-left override, embedding or isolate:
`<U+202E>777777-ved` is shown as `dev-777777`) is a `look_alike_unit_id` too (`REORDERING`, checked in SQL
on the id before the controls are removed). A quarantined row lowers a count, never raises one.

Both run in Python inside DuckDB's scan (`register_unit_id_functions`), on the ids that are not plain ASCII
only: the SQL of `traces.ingest` decides which.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Callable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from duckdb.func import ARROW, SPECIAL

# The minus signs outside Unicode's dash class (Pd holds U+FE63 and U+FF0D already); NFKC makes the
# superscript and subscript minus U+2212.
MINUS_SIGNS = "\u2212\u207b\u208b\u02d7\u2796"
# Scripts written together in one language: Japanese (Han, Hiragana, Katakana), Korean (Han, Hangul) and
# Chinese with Bopomofo; TS #39's resolved script sets treat each as one script.
_ONE_WRITING = (
    frozenset({"HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"HAN", "HANGUL"}),
    frozenset({"HAN", "BOPOMOFO"}),
)
_NO_SCRIPT = frozenset({"COMMON", "INHERITED"})  # digits, punctuation, combining marks: any script's

# Read as the ASCII letter their name ends with; Unicode's confusables data lists few of them.
_NAMED_LATIN = re.compile(
    r"(?:SMALL CAPITAL|(?:NEGATIVE )?(?:CIRCLED|SQUARED) LATIN (?:CAPITAL|SMALL) LETTER"
    r"|REGIONAL INDICATOR SYMBOL LETTER) [A-Z]"
)
# The controls that show an id in another order than it is stored: right-to-left embedding and override,
# left-to-right override (which reverses right-to-left text) and right-to-left isolate.
REORDERING = "\u202b\u202d\u202e\u2067"

MIXED_SCRIPT = "mixed_script_unit_id"
LOOK_ALIKE = "look_alike_unit_id"
FOLD_FUNCTION = "unit_id_fold"
LOOK_ALIKE_FUNCTION = "unit_id_look_alike"


@functools.cache
def _dashes() -> dict[int, str]:
    """Every dash and minus sign as `-`, and every circled digit NFKC leaves as it is as its digit, for
    str.translate (built once, on the first id that needs it)."""
    dashes = (c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Pd")
    circled = {
        c: str(unicodedata.digit(chr(c)))
        for c in range(0x80, sys.maxunicode + 1)
        if "CIRCLED" in unicodedata.name(chr(c), "") and unicodedata.digit(chr(c), None) is not None
    }
    return {**{c: "-" for c in (*dashes, *map(ord, MINUS_SIGNS))}, **circled}


def _compatible(text: str) -> str:
    """NFKC with every dash and minus sign as `-`, and circled digits as digits."""
    return unicodedata.normalize("NFKC", text).translate(_dashes())


def fold_spelling(text: str) -> str:
    """The one spelling of `text` under compatibility forms, case and dashes. Case folding and NFKC are
    interleaved as Unicode's compatibility caseless match does (D146: folding can un-normalise, `ǰ`), so
    that folding a folded id changes nothing."""
    once = unicodedata.normalize("NFKD", unicodedata.normalize("NFD", text).casefold())
    return _compatible(unicodedata.normalize("NFKD", once.casefold()))


def without_marks(text: str) -> str:
    """`text` without its combining marks (decomposed, marks removed, recomposed), as DuckDB's strip_accents
    writes the ids."""
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.category(c).startswith("M")))


def _shown(text: str) -> str:
    """What a reader of the export sees of an id, case kept: compatibility forms and dashes folded, marks
    removed (ingest strips accents), digits of any script as ASCII (ingest writes them so)."""
    kept = without_marks(_compatible(text))
    return "".join(str(unicodedata.digit(c)) if unicodedata.category(c) == "Nd" else c for c in kept)


@functools.cache
def _script(char: str) -> str:
    from confusable_homoglyphs import categories

    return str(categories.alias(char))


@functools.cache
def _glyphs(text: str) -> tuple[str, ...]:
    """The texts Unicode's confusables data lists beside `text`: its prototype, or the characters whose
    prototype it is (the data wraps right-to-left glyphs in U+200E marks, which draw nothing)."""
    from confusable_homoglyphs import confusables  # its tables load slowly: only for ids that need it

    return tuple(entry["c"].replace("\u200e", "") for entry in confusables.confusables_data.get(text, ()))


@functools.cache
def _looks_ascii(char: str) -> bool:
    """`char` is ASCII or shares its confusable skeleton (TS #39) with a text that folds to ASCII: its
    prototype, or another character of that prototype (`─` has the prototype `ー`, as the em dash does,
    which folds to `-`)."""
    if char.isascii() or _NAMED_LATIN.fullmatch(unicodedata.name(char, "").removeprefix("LATIN LETTER ")):
        return True
    prototypes = _glyphs(char)
    alike = (*prototypes, *(other for glyph in prototypes for other in _glyphs(glyph)))
    return any(_compatible(glyph).isascii() for glyph in alike)


def _scripts(text: str) -> set[str]:
    return {_script(c) for c in text} - _NO_SCRIPT


def _is_mixed(scripts: set[str]) -> bool:
    return len(scripts) > 1 and not any(scripts <= writing for writing in _ONE_WRITING)


def _code_points(chars: str) -> str:
    return ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in chars)


def reordered_problem(controls: str) -> str:
    """The quarantine's `<reason>\t<detail>` for an id holding the reordering `controls` (`REORDERING`)."""
    return f"{LOOK_ALIKE}\tthe unit id is shown in another order than it is stored: it holds {_code_points(controls)}"


def look_alike_problem(text: str) -> str | None:
    """None for an id that reads as itself; else `<reason>\\t<detail>`: `mixed_script_unit_id` (letters of
    several scripts) or `look_alike_unit_id` (outside ASCII, but every character looks like ASCII). The
    detail names the scripts or the characters (the quarantine quotes the id anyway)."""
    shown = _shown(text)
    scripts = _scripts(shown)
    if _is_mixed(scripts):
        return f"{MIXED_SCRIPT}\tthe unit id mixes letters of the scripts {', '.join(sorted(scripts))}"
    if not shown.isascii() and all(map(_looks_ascii, shown)):
        others = "".join(dict.fromkeys(c for c in shown if not c.isascii()))
        return f"{LOOK_ALIKE}\tthe unit id reads as an ASCII id but is written with {_code_points(others)}"
    return None


def _arrow_function(function: Callable[[str], str | None]) -> Callable[[pa.Array | pa.ChunkedArray], pa.Array]:
    """`function` over a batch of texts, computed once per distinct text: a device's id repeats on each of
    its pings, and Python's per-text cost is most of this path's (a batch of 2,048 pings holds a few ids)."""
    cached = functools.lru_cache(maxsize=1 << 16)(function)

    def apply(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks()
        encoded = pc.dictionary_encode(texts)
        distinct = pa.array([None if t is None else cached(t) for t in encoded.dictionary.to_pylist()], pa.string())
        return distinct.take(encoded.indices)

    return apply


def register_unit_id_functions(con: duckdb.DuckDBPyConnection) -> None:
    """`unit_id_fold(text)` (`fold_spelling`) and `unit_id_look_alike(text)` (`look_alike_problem`) on `con`,
    each called on whole batches of the rows that need it."""
    for name, function in ((FOLD_FUNCTION, fold_spelling), (LOOK_ALIKE_FUNCTION, look_alike_problem)):
        con.create_function(
            name,
            _arrow_function(function),
            ["VARCHAR"],
            "VARCHAR",
            type=ARROW,
            null_handling=SPECIAL,
            side_effects=False,
        )
