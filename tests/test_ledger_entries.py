"""Ledger entries are written from their types (`ReleaseEntryBody`, `ReviewEntry`), and the written entries are
the bytes the hand-spelled dicts they replaced gave: field for field, value for value, order included."""

import json
from pathlib import Path

from spatial_release.ledger import Ledger, ReleaseEntry, ReleaseEntryBody, ReviewEntry
from spatial_release.ledger.chain import ENTRIES, RESERVED, canonical

# The first entry of a demo release's ledger (`spatial-release demo`), written by the publish step when it
# still spelled the entry as a dict.
GOLDEN = Path(__file__).parent / "golden" / "ledger_release_entry.json"
LEDGER_SET = (*RESERVED, "recorded_at")  # what the ledger adds to the publish step's fields


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


def _as_the_publish_step_spelled_it(entry: dict) -> dict:
    """The dict the publish step appended before the entry was typed, in its order, from an entry's values."""
    return {
        "kind": "release",
        "dataset": entry["dataset"],
        "period": entry["period"],
        "policy": entry["policy"],
        "files": entry["files"],
        "risk": entry["risk"],
        "population": entry["population"],
        "inputs": entry["inputs"],
        "record_sha256": entry["record_sha256"],
        "work_files": entry["work_files"],
    }


def _body(entry: ReleaseEntryBody) -> ReleaseEntryBody:
    """The body alone, built as the publish step builds it (keywords, not a read entry)."""
    return ReleaseEntryBody(
        dataset=entry.dataset,
        period=entry.period,
        policy=entry.policy,
        files=entry.files,
        risk=entry.risk,
        population=entry.population,
        inputs=entry.inputs,
        record_sha256=entry.record_sha256,
        work_files=entry.work_files,
    )


def test_a_release_entry_body_writes_the_fields_of_the_stored_entry():
    golden = _golden()
    body = _body(ReleaseEntry.from_entry(golden))
    written = body.to_json()
    assert written == {k: v for k, v in golden.items() if k not in LEDGER_SET}
    old = _as_the_publish_step_spelled_it(golden)
    assert json.dumps(written) == json.dumps(old)  # the same keys in the same order, the same values
    assert canonical(written) == canonical(old)


def test_a_release_entry_written_both_ways_is_the_same_ledger_line(tmp_path):
    """One key, one recorded_at: the dict of the old publish step and the typed body append the same bytes."""
    golden = _golden()
    key = tmp_path / "keys" / "signing.pem"
    old = Ledger(tmp_path / "old", signing_key=key)
    new = Ledger(tmp_path / "new", signing_key=key)
    stamp = {"recorded_at": golden["recorded_at"]}
    old.append({**_as_the_publish_step_spelled_it(golden), **stamp})
    new.append({**_body(ReleaseEntry.from_entry(golden)).to_json(), **stamp})
    line = (new.folder / ENTRIES).read_bytes()
    assert line == (old.folder / ENTRIES).read_bytes()
    read = ReleaseEntry.from_entry(new.read()[0])
    assert (read.release_figure, read.inputs, read.files) == (
        golden["risk"]["release_figure"],
        tuple(golden["inputs"]),
        golden["files"],
    )


def test_a_review_entry_written_both_ways_is_the_same_ledger_line(tmp_path):
    key = tmp_path / "keys" / "signing.pem"
    old = Ledger(tmp_path / "old", signing_key=key)
    new = Ledger(tmp_path / "new", signing_key=key)
    stamp = {"recorded_at": "2026-01-01T00:00:00+00:00"}
    landscape = "e1f8800fe765f47448c6e2a5594a584331222dbea55b40e87b609e16badc3961"
    spelled = {
        "kind": "review",
        "dataset": "demo",
        "landscape_sha256": landscape,
        "cumulative": 0.00255,
        "releases": 2,
        "breaches": ["2018-Q2"],
    }
    typed = ReviewEntry(
        dataset="demo",
        landscape_sha256=landscape,
        cumulative=0.00255,
        releases=2,
        breaches=("2018-Q2",),
    ).to_json()
    assert json.dumps(typed) == json.dumps(spelled)
    old.append({**spelled, **stamp})
    new.append({**typed, **stamp})
    assert (new.folder / ENTRIES).read_bytes() == (old.folder / ENTRIES).read_bytes()


def test_an_entry_read_back_keeps_the_figures_it_was_read_for():
    """release_figure and privacy come from the risk record: a read entry answers as before."""
    golden = _golden()
    entry = ReleaseEntry.from_entry(golden)
    assert entry.release_figure == golden["risk"]["release_figure"] and entry.privacy is None
    assert entry.key == ("demo", "2018-Q1") and entry.seq == 0
    dp = ReleaseEntry.from_entry({**golden, "risk": {"release_figure": None, "privacy": {"loss": [1.0, 0.0]}}})
    assert dp.release_figure is None and dp.privacy == {"loss": [1.0, 0.0]}
