"""The publication guarantees, as pure functions over the files that are about to be published.

Each check re-derives its verdict from the counting artefact (the true distinct-unit counts of every group)
and the candidate release files; none trusts a figure reported by the suppressor. Each returns a
`CheckOutcome` naming the offending rows, so a blocked release says which cell broke which guarantee.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pandas as pd

from spatial_release.suppression.rules import below_k

CELL_KEY = ["cell_id", "bucket_start"]
MARGIN_KEY = ["level", "area_id", "bucket_start"]
MAX_LISTED = 20


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    passed: bool
    summary: str
    offending: list[dict] = field(default_factory=list)
    figures: dict = field(default_factory=dict)


def expected_columns(count_column: str) -> dict[str, list[str]]:
    return {
        "cells.parquet": ["cell_id", "bucket_start", count_column, "geometry"],
        "margins.parquet": ["level", "area_id", "bucket_start", count_column],
    }


def _records(frame: pd.DataFrame) -> list[dict]:
    return [
        {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}
        for row in frame.head(MAX_LISTED).to_dict("records")
    ]


def _with_truth(published: pd.DataFrame, truth: pd.DataFrame, key: list[str], count_column: str) -> pd.DataFrame:
    merged = published[[*key, count_column]].merge(truth[[*key, "n"]].rename(columns={"n": "true_n"}), on=key, how="left")
    merged["true_n"] = merged["true_n"].fillna(0).astype("int64")
    return merged


def check_k_floor(
    cells: pd.DataFrame,
    margins: pd.DataFrame,
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    k: int,
    zeros: Iterable[str],
    count_column: str,
) -> CheckOutcome:
    """Every published (cell, bucket) and margin holds >= k distinct units (inclusive) and shows its true count.

    The only exception is a listed structural zero that truly holds no unit, published as 0.
    """
    zeros = frozenset(zeros)
    c = _with_truth(cells, true_cells, CELL_KEY, count_column)
    is_zero = (c["true_n"] == 0) & c["cell_id"].isin(zeros) & (c[count_column] == 0)
    bad_cells = c[~is_zero & (below_k(c["true_n"], k) | (c[count_column] != c["true_n"]))]
    m = _with_truth(margins, true_margins, MARGIN_KEY, count_column)
    bad_margins = m[below_k(m["true_n"], k) | (m[count_column] != m["true_n"])]
    nonzero = c.loc[~is_zero, "true_n"]
    passed = bad_cells.empty and bad_margins.empty
    figures: dict = {
        "k": k,
        "boundary": "inclusive (n >= k is published)",
        "cells_below_k_or_misreported": int(len(bad_cells)),
        "margins_below_k_or_misreported": int(len(bad_margins)),
    }
    if passed:  # published figures then; of a blocked candidate they are unpublished figures
        figures["smallest_published_cell_true_count"] = int(nonzero.min()) if len(nonzero) else None
        figures["smallest_published_margin_true_count"] = int(m["true_n"].min()) if len(m) else None
    # identifiers and what fails only: the candidate's count and the true one are unpublished figures, and the
    # offending rows reach the check's metadata, the run log and the alert
    offending = _failing(bad_cells, CELL_KEY, k, count_column) + _failing(bad_margins, MARGIN_KEY, k, count_column)
    summary = (
        f"all {int((~is_zero).sum())} published non-zero cells and {len(m)} margins hold >= {k} units"
        + (f"; {int(is_zero.sum())} listed structural zeros published as 0" if is_zero.any() else "")
        if passed
        else f"{len(bad_cells)} published cell(s) and {len(bad_margins)} margin(s) hold fewer than {k} units or "
        f"misreport their count; first: {offending[0]}"
    )
    return CheckOutcome("k_floor", passed, summary, offending, figures)


def _failing(bad: pd.DataFrame, key: list[str], k: int, count_column: str) -> list[dict]:
    """The offending rows of the k floor: the key and which rule fails, never a count."""
    reasons = ["below k" if below_k(true_n, k) else "misreported" for true_n in bad["true_n"]]
    return [{**row, "failing": reason} for row, reason in zip(_records(bad[key]), reasons[:MAX_LISTED])]


def check_structural_zeros(true_cells: pd.DataFrame, zeros: Iterable[str]) -> CheckOutcome:
    """No listed structural-zero cell holds a unit in any bucket.

    The list is public and a listed cell is published as 0, so a listed cell that holds units is either
    withheld (its gap tells the outsider someone was there) or published beside a list that denies it.
    Either way the list is wrong and the release waits for a corrected one. The report names the cells
    and buckets only: how many units they hold is a withheld figure, and who they are even more so."""
    zeros = frozenset(zeros)
    held = true_cells[true_cells["cell_id"].isin(zeros) & (true_cells["n"] > 0)].sort_values(CELL_KEY)
    offending = _records(held[CELL_KEY])
    figures = {"listed_zero_cells": len(zeros), "conflicts": int(len(held))}
    if held.empty:
        return CheckOutcome(
            "structural_zeros_hold", True, f"none of the {len(zeros)} listed structural-zero cells holds a unit", [], figures
        )
    first = offending[0]
    more = f" ({len(held) - 1} more listed cell-buckets hold units)" if len(held) > 1 else ""
    summary = (
        f"{first['cell_id']} at {first['bucket_start']} is listed as a structural zero but holds at "
        f"least one unit; the zeros list is wrong{more}: correct it and run the release again"
    )
    return CheckOutcome("structural_zeros_hold", False, summary, offending, figures)


def _shape_problems(frame: pd.DataFrame, key: list[str], file: str) -> list[dict]:
    """Null values and duplicated keys of one release file."""
    problems: list[dict] = []
    null_rows = frame[frame.drop(columns=["geometry"], errors="ignore").isna().any(axis=1)]
    if "geometry" in frame.columns:
        null_rows = pd.concat([null_rows, frame[frame["geometry"].isna()]]).drop_duplicates(subset=key)
    problems += [{"file": file, "problem": "null value", **r} for r in _records(null_rows[key])]
    duplicated = frame[frame.duplicated(subset=key, keep=False)]
    problems += [{"file": file, "problem": "duplicated key", **r} for r in _records(duplicated[key])]
    return problems


def _key_problems(
    frame: pd.DataFrame, key: list[str], truth: pd.DataFrame, k: int, zeros: frozenset[str], count_column: str, file: str
) -> list[dict]:
    problems = _shape_problems(frame, key, file)
    merged = _with_truth(frame.dropna(subset=key), truth, key, count_column)
    withheld = merged[(merged["true_n"] > 0) & below_k(merged["true_n"], k)]
    problems += [{"file": file, "problem": "withheld key present", **r} for r in _records(withheld[key])]
    zero_ok = merged["cell_id"].isin(zeros) if "cell_id" in merged.columns else False
    zero_rows = merged[(merged[count_column] == 0) & ~((merged["true_n"] == 0) & zero_ok)]
    problems += [{"file": file, "problem": "zero row that is not a structural zero", **r} for r in _records(zero_rows[key])]
    return problems


def check_withheld_absent(
    cells: pd.DataFrame,
    margins: pd.DataFrame,
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    k: int,
    zeros: Iterable[str],
    count_column: str,
) -> CheckOutcome:
    """Withheld keys are absent: no null rows, no flag or status column, no zero standing in for a gap."""
    zeros = frozenset(zeros)
    problems = _column_problems(cells, margins, count_column)
    problems += _key_problems(cells, CELL_KEY, true_cells, k, zeros, count_column, "cells.parquet")
    problems += _key_problems(margins, MARGIN_KEY, true_margins, k, frozenset(), count_column, "margins.parquet")
    return _absent_outcome(problems, "no withheld key, null, flag or false zero in the release")


def _column_problems(cells: pd.DataFrame, margins: pd.DataFrame, count_column: str) -> list[dict]:
    problems: list[dict] = []
    for file, frame in (("cells.parquet", cells), ("margins.parquet", margins)):
        extra = [c for c in frame.columns if c not in expected_columns(count_column)[file]]
        problems += [{"file": file, "problem": "unexpected column (a flag or a gap marker?)", "column": c} for c in extra]
        if count_column in frame.columns and not pd.api.types.is_integer_dtype(frame[count_column]):
            problems.append({"file": file, "problem": f"{count_column} is {frame[count_column].dtype}, not integer"})
    return problems


def _absent_outcome(problems: list[dict], clean: str) -> CheckOutcome:
    summary = clean if not problems else f"{len(problems)} problem(s); first: {problems[0]}"
    return CheckOutcome("withheld_absent", not problems, summary, problems[:MAX_LISTED], {"problems": len(problems)})


def check_dp_withheld_absent(
    cells: pd.DataFrame,
    margins: pd.DataFrame,
    true_cells: pd.DataFrame,
    true_margins: pd.DataFrame,
    threshold: int,
    count_column: str,
) -> CheckOutcome:
    """Under differential privacy, keys the mechanism did not select are absent: every published key is a key
    of the data (the mechanism's candidates are the data's keys only) and shows at least the threshold its
    noisy count had to clear (post-processing only raises figures); no null, duplicate, flag or zero."""
    problems = _column_problems(cells, margins, count_column)
    for file, frame, key, truth in (
        ("cells.parquet", cells, CELL_KEY, true_cells),
        ("margins.parquet", margins, MARGIN_KEY, true_margins),
    ):
        problems += _shape_problems(frame, key, file)
        merged = _with_truth(frame.dropna(subset=key), truth, key, count_column)
        outside = merged[merged["true_n"] == 0]
        problems += [{"file": file, "problem": "key outside the data", **r} for r in _records(outside[key])]
        below = merged[merged[count_column] < threshold]
        problems += [{"file": file, "problem": "figure below the selection threshold", **r} for r in _records(below[key])]
    return _absent_outcome(problems, f"every published key was selected (none outside the data, none below {threshold})")


def _unit_id_columns(frame: pd.DataFrame, ids: set[str]) -> list[tuple[str, int]]:
    """Each text column of `frame` holding unit ids, with how many distinct ones."""
    found = []
    for column in frame.columns:
        if column != "geometry" and (frame[column].dtype == object or pd.api.types.is_string_dtype(frame[column])):
            n = len(set(frame[column].dropna().astype(str)) & ids)
            if n:
                found.append((column, n))
    return found


# Free text (the record's strings, report.html, the PNG's text chunks) is cut into words at blanks, quotes,
# brackets and path or list separators; a word with a letter in it is also cut into its parts at `-_.@+`
# (parts of 3 characters or more),
# so that `bike-29590.csv` yields `bike-29590.csv`, `bike`, `29590` and `csv`. A word made of digits and
# number punctuation (`0.0038`, `1,234`, `-74.1`) or a number with a unit (`1.5em`, `2h`) is a figure, and a
# word that starts with a date or a period (`2018-01-29`, `2026-12-01T20`, `2018-Q1`) is a time: neither is
# read as an id, or every small integer id would collide with the report's figures. So a unit id written as
# a bare number in prose is not found; the record's strings are also compared whole (a JSON string `"29590"`
# is always found), and file names, the usual carrier, are no longer published at all.
_WORD_SEPARATORS = re.compile(r"[\s/\\,;'\"()\[\]{}<>=|&?#`*]+")
_PART_SEPARATORS = re.compile(r"[-_.@+]+")
MIN_PART = 3  # shorter parts (`utf-8`, `wave-2`) are everyday words: a 1- or 2-character id is found whole only
_FIGURE = re.compile(r"^[-+]?[\d.,:%+\-eE]*\d[\d.,:%+\-]*$")
_MEASURE = re.compile(r"^[-+]?\d+(\.\d+)?([eE][-+]?\d+)?[a-zA-Z%]{0,3}$")  # 1.5em, 12px, 2h, 3.2%
_STARTS_WITH_DATE = re.compile(r"^\d{4}-(\d{2}|Q[1-4]|H[12]|W\d{2})")


# An embedded image (`data:image/png;base64,...`) is binary: its base64 text is not words.
_DATA_URI = re.compile(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=]+")


def text_words(text: str) -> Iterator[str]:
    """The words of free text that could carry a unit id (see above)."""
    for word in _WORD_SEPARATORS.split(_DATA_URI.sub(" ", text)):
        if not word or _FIGURE.match(word) or _MEASURE.match(word) or _STARTS_WITH_DATE.match(word):
            continue
        yield word
        if any(c.isalpha() for c in word):
            yield from (part for part in _PART_SEPARATORS.split(word) if len(part) >= MIN_PART)


def json_strings(value: object) -> Iterator[str]:
    """Every string of a JSON value, keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)
    elif isinstance(value, str):
        yield value


def ids_in_texts(texts: dict[str, str | list[str]], unit_ids: set[str] | frozenset[str]) -> list[dict]:
    """Problems (file, count; never the ids) for each text holding unit ids: `texts` maps a file name to its
    free text, or to its list of text values (a JSON record's strings), each also compared whole."""
    problems = []
    for name, text in texts.items():
        values = [text] if isinstance(text, str) else list(text)
        found = {v.strip() for v in values if isinstance(text, list) and v.strip() in unit_ids}
        found |= {w for v in values for w in text_words(v) if w in unit_ids}
        if found:
            problems.append({"file": name, "problem": f"{len(found)} unit id(s) in the text (not quoted)"})
    return problems


def record_texts(record: dict) -> list[str]:
    return list(json_strings(json.loads(json.dumps(record, default=str))))


def check_no_identifiers(
    files: dict[str, pd.DataFrame],
    record_keys: Iterable[str],
    protected_columns: Iterable[str],
    input_columns: Iterable[str],
    unit_ids: Iterable[str],
    count_column: str,
    texts: dict[str, str | list[str]] | None = None,
) -> CheckOutcome:
    """No identifier or quasi-identifier of the input reaches a release file, by column name or by value.

    Only the release schema's columns may appear; no input column that the policy declares protected
    (and no other raw input column outside the schema) may be a column; no string value may equal a unit id;
    no key of the release record may be a protected column's name; no unit id in the free text of `texts`
    (the record's strings, the report), whole or as a part of a word (`ids_in_texts`).
    """
    protected = set(protected_columns)
    raw = set(input_columns)
    ids = {str(i).strip() for i in unit_ids}
    problems: list[dict] = []
    for file, frame in files.items():
        allowed = expected_columns(count_column).get(file, [])
        for column in frame.columns:
            if column in protected:
                problems.append({"file": file, "column": column, "problem": "protected input column"})
            elif column not in allowed:
                kind = "raw input column" if column in raw else "column outside the release schema"
                problems.append({"file": file, "column": column, "problem": kind})
        # The leaked values are unit ids: named by column and counted, never quoted (the outcome reaches the
        # run log, Dagster metadata and alerts).
        problems += [
            {"file": file, "column": column, "problem": f"{n} value(s) equal to a unit id (not quoted)"}
            for column, n in _unit_id_columns(frame, ids)
        ]
    problems += [
        {"file": "release.json", "key": key, "problem": "protected column named in the record"}
        for key in record_keys
        if key in protected
    ]
    problems += ids_in_texts(texts or {}, ids)
    passed = not problems
    summary = (
        "no identifier or quasi-identifier column or value in the release"
        if passed
        else f"{len(problems)} problem(s); first: {problems[0]}"
    )
    return CheckOutcome(
        "no_identifiers",
        passed,
        summary,
        problems[:MAX_LISTED],
        {"protected_columns": sorted(protected), "problems": len(problems)},
    )


def check_suppression_budget(unit_counts_withheld: int, unit_counts_total: int, budget: float) -> CheckOutcome:
    share = unit_counts_withheld / unit_counts_total if unit_counts_total else 0.0
    passed = unit_counts_total > 0 and share <= budget
    summary = (
        f"{share:.2%} of unit counts are in withheld cells (budget {budget:.0%})"
        if unit_counts_total
        else "no unit was counted: nothing to publish"
    )
    return CheckOutcome(
        "suppression_budget",
        passed,
        summary,
        [],
        {
            "share_withheld": share,
            "budget": budget,
            "unit_counts_withheld": unit_counts_withheld,
            "unit_counts_total": unit_counts_total,
        },
    )
