"""One device spelled seven ways (four dashes, fullwidth letters, a fullwidth hyphen-minus) in a cell nobody
else visits must not be published as 6 devices at k = 5. Spellings that read alike must be one unit
(compatibility forms, case, dashes and minus signs) or be quarantined with a reason (look-alikes across
scripts); distinct ids must never merge. The expected units are derived here from the
devices the spellings were made of, never with the code under test."""

from __future__ import annotations

import json
import string
import tempfile
import unicodedata
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fixture import TO_LONLAT, policy_dict, write_policy
from support.releases import published_folder, release

from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.traces.ingest import COMMON_MISSING_IDS, ingest_traces, resolve_trace_paths
from spatial_release.traces.unit_ids import fold_spelling

Q1 = Period.parse("2018-Q1")
SEVEN = (
    "dev-777777",
    "dev\u2010777777",
    "dev\u2011777777",
    "dev\u2012777777",
    "dev\u2013777777",
    "\uff44\uff45\uff56-777777",
    "dev\uff0d777777",
)
LOOK_ALIKE_REASONS = {"mixed_script_unit_id", "look_alike_unit_id"}


def _ingest(folder: Path, ids: list[str], missing: tuple[str, ...] = ("unknown",)):
    frame = pd.DataFrame({"device": ids, "when": "2018-01-10 08:00:00", "lon": -74.05, "lat": 40.72})
    frame.to_csv(folder / "t.csv", index=False)
    data = policy_dict(str(folder / "t.csv"))
    data["source"].update(max_rejected_share=1.0, missing_unit_values=list(missing))
    policy = load_policy(write_policy(folder, data))
    result = ingest_traces(policy, Q1, resolve_trace_paths(policy), folder / "out")
    return pd.read_parquet(result.quarantine_path), pd.read_parquet(result.pings_path)


# --- the case, end to end through the command line -------------------------------------------------

CORNER = (580_000, 4_508_000)  # EPSG:32618 metres; 500 m cells
CELL = 500


def _inside(corner: tuple[int, int], n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n points 50 m or more inside the 500 m cell at `corner`."""
    return TO_LONLAT.transform(corner[0] + rng.uniform(50, CELL - 50, n), corner[1] + rng.uniform(50, CELL - 50, n))


def _week_of_pings(rng: np.random.Generator) -> pd.DataFrame:
    """Four cells of 6 devices each (published at k = 5) and, in a fifth cell nobody else visits, one device
    whose seven pings are spelled seven ways."""
    rows = []
    cells = [(CORNER[0] + CELL * i, CORNER[1]) for i in range(4)] + [(CORNER[0] + CELL, CORNER[1] + CELL)]
    for c, corner in enumerate(cells[:4]):
        for d in range(6):
            lon, lat = _inside(corner, 2, rng)
            rows += [(f"c{c}d{d}", f"2018-01-1{p} 09:00:00", lon[p], lat[p]) for p in range(2)]
    lon, lat = _inside(cells[4], len(SEVEN), rng)
    rows += [(spelling, f"2018-01-{9 + i % 4:02d} 10:00:00", lon[i], lat[i]) for i, spelling in enumerate(SEVEN)]
    return pd.DataFrame(rows, columns=["device", "when", "lon", "lat"])


@pytest.mark.slow
def test_one_device_spelled_seven_ways_is_one_unit_end_to_end(tmp_path, capsys):
    frame = _week_of_pings(np.random.default_rng(39))
    frame.to_csv(tmp_path / "traces.csv", index=False, encoding="utf-8")
    data = policy_dict(
        str(tmp_path / "traces.csv"),
        k=5,
        geometry={"kind": "grid", "crs": "EPSG:32618", "size_m": 500, "parents_m": [1000]},
        time={"bucket": "1w", "timezone": "America/New_York"},
    )
    data["source"]["identifiers"] = ["device"]
    policy = write_policy(tmp_path, data)
    code = release(policy, tmp_path)
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    folder = published_folder(tmp_path)
    cells = gpd.read_parquet(folder / "cells.parquet")
    published = dict(zip(cells["cell_id"], cells["n_devices"], strict=True))
    crowded = {f"500mE{CORNER[0] + CELL * i}N{CORNER[1]}" for i in range(4)}
    # one real device: its cell withheld (below k), or at most 1, never 6
    assert published.get(f"500mE{CORNER[0] + CELL}N{CORNER[1] + CELL}", 0) <= 1
    # the controls: the cells of 6 devices that are published show 6, and the week's total is the number of
    # real devices, 4 x 6 + 1
    assert published and set(published) <= crowded and set(published.values()) == {6}
    margins = pd.read_parquet(folder / "margins.parquet")
    assert margins.loc[margins["level"] == "total", "n_devices"].tolist() == [4 * 6 + 1]
    record = json.loads((folder / "release.json").read_text())
    assert record["input"]["pings_read"] == len(frame) and record["input"]["pings_rejected"] == 0


# --- property: spellings of one device across the classes ---------------------------------------------------

FULLWIDTH_OFFSET = 0xFF01 - 0x21
SUPERSCRIPTS = "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
SUBSCRIPTS = "".join(chr(0x2080 + d) for d in range(10))
# Unicode's dash class (Pd) and minus signs; derived from the standard's lists, not from the code under test
DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2e3a\u2e3b\ufe58\ufe63\uff0d\u2212\u207b\u208b\u02d7\u2796\u058a\u05be"
# Latin letters and a look-alike of each from another script (Cyrillic, Greek), per Unicode's confusables
LOOK_ALIKES = {
    "a": "\u0430\u03b1",
    "c": "\u0441",
    "e": "\u0435",
    "i": "\u0456\u03b9",
    "j": "\u0458",
    "o": "\u043e\u03bf",
    "p": "\u0440\u03c1",
    "s": "\u0455",
    "x": "\u0445",
    "y": "\u0443",
}
LETTERS = string.ascii_lowercase
# A letter first, so that no device is a number (numbers are written one way on purpose) or a spelling of
# missing; one with look-alikes, so that a spelling can be all look-alikes (`look_alike_unit_id`).
DEVICE = st.tuples(st.sampled_from("acejopsxy"), st.text(LETTERS + string.digits + "-", min_size=1, max_size=8)).map("".join)


def _math_bold(char: str) -> str:
    base = 0x1D400 if char.isupper() else 0x1D41A
    return chr(base + ord(char.lower()) - ord("a"))


@st.composite
def _spelling(draw, device: str) -> tuple[str, bool]:
    """(a spelling of `device`, whether a letter was swapped for a look-alike of another script). Each
    character independently: case, fullwidth, mathematical bold (compatibility forms), superscript and
    subscript digits, any dash or minus for `-`, or a look-alike letter."""
    out, swapped = [], False
    for char in device:
        if char == "-":
            out.append(draw(st.sampled_from("-" + DASHES)))
            continue
        if char.isdigit():
            forms = [char, chr(ord(char) + FULLWIDTH_OFFSET), SUPERSCRIPTS[int(char)], SUBSCRIPTS[int(char)]]
            out.append(draw(st.sampled_from(forms)))
            continue
        letter = draw(st.sampled_from([char, char.upper()]))
        forms = [letter, chr(ord(letter) + FULLWIDTH_OFFSET), _math_bold(letter)]
        if char in LOOK_ALIKES and draw(st.integers(0, 5)) == 0:
            alike = draw(st.sampled_from(LOOK_ALIKES[char]))
            out.append(alike.upper() if letter.isupper() else alike)
            swapped = True
        else:
            out.append(draw(st.sampled_from(forms)))
    return "".join(out), swapped


@st.composite
def _devices_and_spellings(draw) -> list[tuple[str, str, bool]]:
    devices = draw(st.lists(DEVICE, min_size=1, max_size=6, unique=True))
    return [
        (device, *spelling) for device in devices for spelling in draw(st.lists(_spelling(device), min_size=1, max_size=6))
    ]


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(_devices_and_spellings())
def test_spellings_of_one_device_are_one_unit_or_quarantined(rows):
    """Each device's spellings that are valid pings are one unit, that unit no other device's; a spelling
    with a look-alike letter of another script is quarantined as a look-alike; so the number of units never
    exceeds the number of real devices."""
    with tempfile.TemporaryDirectory() as folder:
        quarantine, pings = _ingest(Path(folder), [spelling for _, spelling, _ in rows])
    swapped = {i + 1 for i, (_, _, was) in enumerate(rows) if was}  # rows are 1-based data rows
    assert set(quarantine["row"]) == swapped, quarantine[["row", "reason", "detail"]]
    assert set(quarantine["reason"]) <= LOOK_ALIKE_REASONS
    devices_of_valid = [device for device, _, was in rows if not was]
    assert len(pings) == len(devices_of_valid)
    units: dict[str, set[str]] = {}  # unit -> the real devices whose spellings became it
    for device, unit in zip(devices_of_valid, pings.sort_values("src", kind="stable")["unit"], strict=True):
        units.setdefault(unit, set()).add(device)
    assert all(len(devices) == 1 for devices in units.values()), units
    assert len(units) == len(set(devices_of_valid)) <= len({device for device, _, _ in rows})


PLAIN = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=",'"), min_size=1, max_size=10).map(
    lambda tail: "q" + tail
)  # a leading letter: no number (numbers are written one way on purpose)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(st.lists(PLAIN, min_size=2, max_size=30, unique_by=str.lower))
def test_distinct_plain_ascii_ids_never_merge(ids):
    """Plain ASCII ids that differ other than by case stay distinct units, and none is quarantined."""
    ids = [i for i in ids if i.lower() not in COMMON_MISSING_IDS]
    with tempfile.TemporaryDirectory() as folder:
        quarantine, pings = _ingest(Path(folder), ids)
    assert quarantine.empty
    assert pings["unit"].nunique() == len(ids)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12))
def test_folding_a_folded_id_changes_nothing(text):
    assert fold_spelling(fold_spelling(text)) == fold_spelling(text)


# --- superscripts, compatibility forms and the look-alike reasons, with their controls --------------------


def test_superscript_subscript_and_compatibility_digits_are_the_number(tmp_path):
    spellings = ["29590", "\u00b2\u2079\u2075\u2079\u2070", "\u2082\u2089\u2085\u2089\u2080", "\u2461\u2468590"]
    quarantine, pings = _ingest(tmp_path, [*spellings, "29591"])
    assert quarantine.empty
    assert sorted(pings["unit"]) == ["29590"] * len(spellings) + ["29591"]


@pytest.mark.parametrize(
    "spelling, reason",
    [
        ("d\u0435v-777777", "mixed_script_unit_id"),  # Cyrillic e among Latin letters
        ("dev-\u0436", "mixed_script_unit_id"),  # Latin and Cyrillic, no look-alike: still two scripts
        ("dev\u4e00777777", "mixed_script_unit_id"),  # a Han one for the hyphen
        ("\u0410\u0412\u0421-1", "look_alike_unit_id"),  # Cyrillic only, reads as ABC-1
        ("\u0391\u0392\u0395-1", "look_alike_unit_id"),  # Greek only, reads as ABE-1
        ("dev-\u0131d", "look_alike_unit_id"),  # Latin dotless i
        ("dev\u30fc777777", "look_alike_unit_id"),  # the katakana prolonged sound mark for the hyphen
        ("dev\u2500777777", "look_alike_unit_id"),  # a box-drawing line: the em dash's skeleton, `ー`
    ],
)
def test_look_alikes_are_quarantined_with_their_reason(tmp_path, spelling, reason):
    quarantine, pings = _ingest(tmp_path, ["dev-777777", spelling])
    assert pings["unit"].tolist() == ["dev-777777"]
    assert quarantine[["row", "reason"]].values.tolist() == [[2, reason]]
    assert quarantine["detail"].iloc[0].startswith("the unit id ")


def test_ids_of_one_script_or_one_writing_are_units(tmp_path):
    """Controls: ids in one script other than Latin, and Japanese or Korean ids (Han with kana or Hangul),
    are units, as are Latin letters with accents or strokes (which look like no ASCII letter alone)."""
    ids = ["\u03b1\u03b2\u03b3-1", "\u0436\u0435\u043b", "\u6771\u4eac\u30bf\u30ef\u30fc", "\uc11c\uc6b8-1", "dev-\u00f8"]
    quarantine, pings = _ingest(tmp_path, ids)
    assert quarantine.empty
    assert pings["unit"].nunique() == len(ids)


def test_a_policy_missing_value_matches_its_folded_spellings(tmp_path):
    """The policy's missing values are folded as the data's ids are: `unknown` is missing in every case and
    width."""
    quarantine, pings = _ingest(tmp_path, ["UNKNOWN", "\uff35\uff4e\uff4b\uff4e\uff4f\uff57\uff4e", "Unknown", "u1"])
    assert pings["unit"].tolist() == ["u1"]
    assert quarantine["reason"].tolist() == ["missing_unit_id"] * 3


def test_a_policy_missing_value_with_an_accent_matches_the_data_without(tmp_path):
    """The data's ids lose their accents; so does the policy's list of missing values, or `inconnu` written
    with an accent in the policy never matched the data (before: two units)."""
    ids = ["inconnu", "INCONNU", "inco\u0301nnu", "inc\u00f3nnu", "u1"]
    quarantine, pings = _ingest(tmp_path, ids, missing=("inc\u00f3nnu",))
    assert pings["unit"].tolist() == ["u1"]
    assert quarantine["reason"].tolist() == ["missing_unit_id"] * 4


# --- look-alikes the confusables data and NFKC leave as other units -------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        "dev-\u2776\u2776\u2776\u2776\u2776\u2776",  # DINGBAT NEGATIVE CIRCLED DIGIT ONE: no NFKC form
        "dev-\u2790\u2790\u2790\u2790\u2790\u2790",  # DINGBAT NEGATIVE CIRCLED SANS-SERIF DIGIT SEVEN
        "dev-\u24fb\u24fb\u24fb\u24fb\u24fb\u24fb",  # DOUBLE CIRCLED DIGIT SEVEN
        "dev-\u2786\u2786\u2786\u2786\u2786\u2786",  # DINGBAT CIRCLED SANS-SERIF DIGIT SEVEN (was quarantined)
    ],
)
def test_circled_digits_without_a_compatibility_form_are_their_digit(tmp_path, spelling):
    """`①` folds under NFKC; its dingbat, negative and double-circled siblings have no compatibility form and
    were each another unit (`dev-❼❼❼❼❼❼` beside `dev-777777`: one device counted twice). Unicode gives each a
    digit value; the expected unit is written here from the character's name, not by the code under test."""
    names = ["ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"]
    digit = str(names.index(unicodedata.name(spelling[-1]).rsplit(" ", 1)[1]) + 1)
    quarantine, pings = _ingest(tmp_path, [f"dev-{digit * 6}", spelling])
    assert quarantine.empty, quarantine[["reason", "detail"]]
    assert pings["unit"].tolist() == [f"dev-{digit * 6}"] * 2
    assert fold_spelling(spelling) == f"dev-{digit * 6}"


@pytest.mark.parametrize(
    "spelling",
    [
        "\u1d05\u1d07\u1d20-777777",  # LATIN LETTER SMALL CAPITAL D, E, V: reads as DEV-777777
        "d\u1d07v-777777",  # one small capital among ASCII letters
        "\U0001f173\U0001f174\U0001f185-777777",  # NEGATIVE SQUARED LATIN CAPITAL LETTER D, E, V
        "\U0001f153\U0001f154\U0001f165-777777",  # NEGATIVE CIRCLED LATIN CAPITAL LETTER D, E, V
        "\U0001f1e9\U0001f1ea\U0001f1fb-777777",  # REGIONAL INDICATOR SYMBOL LETTER D, E, V
    ],
)
def test_latin_letters_the_confusables_data_misses_are_quarantined_as_look_alikes(tmp_path, spelling):
    """Small capitals and the negative squared or circled letters read as the ASCII letter their name says,
    but Unicode's confusables data lists few of them and NFKC folds none: `ᴅᴇᴠ-777777` was a unit beside
    `dev-777777`. Each is quarantined as a look-alike; the ASCII spelling stays the unit."""
    quarantine, pings = _ingest(tmp_path, ["dev-777777", spelling])
    assert pings["unit"].tolist() == ["dev-777777"]
    assert quarantine[["row", "reason"]].values.tolist() == [[2, "look_alike_unit_id"]]


@pytest.mark.parametrize("override", ["\u202e", "\u202b", "\u2067"])
def test_an_id_shown_in_another_order_than_it_is_stored_is_quarantined(tmp_path, override):
    """A right-to-left override, embedding or isolate shows `777777-ved` as `dev-777777`: the controls drew
    nothing and were removed, and the id stored backwards was another unit beside `dev-777777`. The
    quarantine names the control; an id wrapped left-to-right (LRI ... PDI) is its unit (control)."""
    quarantine, pings = _ingest(tmp_path, ["dev-777777", f"{override}777777-ved\u2069", "\u2066dev-777777\u2069"])
    assert pings["unit"].tolist() == ["dev-777777"] * 2
    assert quarantine[["row", "reason"]].values.tolist() == [[2, "look_alike_unit_id"]]
    assert f"U+{ord(override):04X}" in quarantine["detail"].iloc[0]
