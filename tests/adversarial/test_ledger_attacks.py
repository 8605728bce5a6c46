"""Attacks on the ledger, end to end through the command line: someone who can write the ledger folder (and
the releases folder) edits, forges or deletes the ledger. Each attack must be reported by `ledger verify`
(exit 1, "does NOT verify") and must block the next release (exit 1, nothing published), never publish
with a risk figure reset."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.fixture import two_quarter_policy
from support.releases import copy_programme, release_period, verify, write_ledger_entries

from spatial_release.ledger import ENTRIES, HEAD, append_entry, entry_hash, forget_pin, pin_path


@pytest.fixture
def programme(published_q1) -> Path:
    """The run's published 2018-Q1 of the two-quarter programme (conftest.published_q1: the test's own copy,
    signed with the copy's key). Each test starts its ledger's pin over, deliberately, as a programme whose
    pin was lost: what every attack below must still be caught without."""
    forget_pin(published_q1 / "ledger")
    return published_q1


def _entries(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "ledger" / ENTRIES).read_text().splitlines()]


def _assert_blocked(root: Path, capsys, message: str) -> None:
    """Both the verifier and the next release refuse, naming the problem; nothing is published."""
    assert verify(root) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and message in err and "Traceback" not in err
    assert release_period(root, root / "policy.yaml", "2018-Q2") == 1
    assert message in capsys.readouterr().err
    assert not (root / "out/releases/fixture/2018-Q2").exists()


@pytest.mark.slow
def test_the_untouched_programme_verifies_and_goes_on(programme, capsys):
    assert verify(programme) == 0
    assert "every release folder" in capsys.readouterr().out
    assert release_period(programme, programme / "policy.yaml", "2018-Q2") == 0
    record = json.loads((programme / "out/releases/fixture/2018-Q2/release.json").read_text())
    first = json.loads((programme / "out/releases/fixture/2018-Q1/release.json").read_text())
    # the cumulative figure carries Q1's
    assert record["risk"]["cumulative"] > record["risk"]["release_figure"] > 0
    assert record["ledger_entry"] == _entries(programme)[-1]["hash"] != first["ledger_entry"]
    assert verify(programme) == 0


@pytest.mark.slow
def test_deleting_the_ledger_blocks(programme, capsys):
    # before the fix: verify said "0 entries", and Q2 published with its cumulative risk reset to zero
    for name in (ENTRIES, HEAD):
        (programme / "ledger" / name).unlink()
    _assert_blocked(programme, capsys, "the ledger does not record")


def test_a_consistently_rehashed_edit_blocks(programme, capsys):
    # lower Q1's risk figure so that Q2 has more headroom, re-hashing the entry and HEAD
    entries = _entries(programme)
    entries[0]["risk"]["release_figure"] = 0.0
    entries[0]["hash"] = entry_hash(entries[0])
    write_ledger_entries(programme, entries)
    _assert_blocked(programme, capsys, "signature does not verify")


def test_a_forged_entry_appended_with_head_one_behind_blocks(programme, capsys):
    # a forged review entry appended, HEAD left as it was: the state a crash between the two renames leaves
    entries = _entries(programme)
    forged = {
        "kind": "review",
        "dataset": "fixture",
        "cumulative": 0.0,
        "seq": len(entries),
        "prev_hash": entries[-1]["hash"],
        "recorded_at": entries[-1]["recorded_at"],
        "signer": entries[-1]["signer"],
    }
    forged["hash"] = entry_hash(forged)
    forged["signature"] = entries[-1]["signature"]
    write_ledger_entries(programme, [*entries, forged], head=False)
    _assert_blocked(programme, capsys, "signature does not verify")


def test_a_ledger_re_signed_with_another_key_blocks(programme, tmp_path, monkeypatch, capsys):
    # the whole ledger rebuilt and signed by a key of the attacker's, and release.json pointed at it
    forged_folder = tmp_path / "forged"
    [entry] = _entries(programme)
    payload = {k: v for k, v in entry.items() if k not in ("seq", "prev_hash", "hash", "signer", "signature")}
    with monkeypatch.context() as attacker:  # the attacker's key for the forgery only
        attacker.setenv("SPATIAL_RELEASE_SIGNING_KEY", str(tmp_path / "attacker" / "key"))
        forged = append_entry(forged_folder, {**payload, "risk": {**entry["risk"], "release_figure": 0.0}})
    for name in (ENTRIES, HEAD):
        shutil.copyfile(forged_folder / name, programme / "ledger" / name)
    record_path = programme / "out/releases/fixture/2018-Q1/release.json"
    record_path.write_text(json.dumps({**json.loads(record_path.read_text()), "ledger_entry": forged["hash"]}))
    _assert_blocked(programme, capsys, "not by the trusted key")


@pytest.mark.slow
def test_a_removed_release_folder_blocks(programme, capsys):
    shutil.rmtree(programme / "out/releases/fixture/2018-Q1")
    _assert_blocked(programme, capsys, "has no readable release.json")


@pytest.mark.slow
def test_a_release_folder_the_ledger_does_not_know_blocks(programme, capsys):
    shutil.copytree(programme / "out/releases/fixture/2018-Q1", programme / "out/releases/fixture/2017-Q4")
    _assert_blocked(programme, capsys, "2017-Q4 is a published release the ledger does not record")


@pytest.mark.slow
def test_a_published_table_edited_after_publication_blocks(programme, capsys):
    """A figure of the published cells.parquet set below k must not pass `ledger verify --releases`, as it
    would if only release.json's hash fields were compared. The files are re-hashed."""
    import pandas as pd

    cells = programme / "out/releases/fixture/2018-Q1/cells.parquet"
    frame = pd.read_parquet(cells)
    frame.loc[0, "n_devices"] = 1
    frame.to_parquet(cells, index=False)
    _assert_blocked(programme, capsys, "cells.parquet does not match")


@pytest.mark.slow
def test_a_published_record_edited_after_publication_blocks(programme, capsys):
    """The risk figures of release.json lowered by hand: the signed ledger entry holds them too."""
    path = programme / "out/releases/fixture/2018-Q1/release.json"
    record = json.loads(path.read_text())
    record["risk"]["cumulative"] = 0.0
    path.write_text(json.dumps(record))
    _assert_blocked(programme, capsys, "field 'risk' differs")


@pytest.mark.slow
def test_any_figure_of_a_published_record_edited_blocks(programme, capsys):
    """k and the counts of release.json edited by hand; the entry signs the record's hash."""
    path = programme / "out/releases/fixture/2018-Q1/release.json"
    record = json.loads(path.read_text())
    record["k"] = 50
    path.write_text(json.dumps(record))
    _assert_blocked(programme, capsys, "differs from the record ledger entry")


@pytest.mark.slow
def test_a_rolled_back_ledger_with_the_release_renamed_to_staging_blocks(programme, capsys):
    """An older copy of the ledger folder (before Q2) put back, and Q2's release folder renamed to its staging
    name: the older ledger verifies on its own, and a run that deleted staging folders would make Q2 vanish
    without trace. The pin beside the signing key blocks both, and the folder is kept; where the pin is not
    (an auditor elsewhere, or a pin deleted), the hidden release.json blocks them."""
    ledger, q2 = programme / "ledger", programme / "out/releases/fixture/2018-Q2"
    older = {name: (ledger / name).read_bytes() for name in (ENTRIES, HEAD)}
    assert release_period(programme, programme / "policy.yaml", "2018-Q2") == 0
    capsys.readouterr()
    for name, data in older.items():
        (ledger / name).write_bytes(data)
    hidden = q2.with_name(".2018-Q2.publishing")
    q2.rename(hidden)

    assert verify(programme) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and str(pin_path(ledger)) in err and "1 entry missing" in err
    assert release_period(programme, programme / "policy.yaml", "2018-Q2") == 1
    assert "1 entry missing" in capsys.readouterr().err
    assert (hidden / "release.json").exists() and not q2.exists()

    forget_pin(ledger)
    assert verify(programme) == 1
    assert ".2018-Q2.publishing holds a published release" in capsys.readouterr().err
    assert release_period(programme, programme / "policy.yaml", "2018-Q2") == 1
    assert "holds a published release" in capsys.readouterr().err
    assert (hidden / "release.json").exists() and not q2.exists()


@pytest.mark.slow
def test_a_copy_of_the_ledger_and_releases_at_another_path_cannot_publish_behind_its_pin(programme, tmp_path, capsys):
    """A copy of the ledger and releases folders at another path, used after the original moved on: a pin
    keyed by path would leave the copy unpinned, so a period the original published since could be
    re-published into the copy with a cumulative risk that leaves that release out. The pin is keyed by the
    ledger's genesis: the copy is behind the original's pin wherever it lives."""
    capsys.readouterr()
    copy = copy_programme(programme, tmp_path / "elsewhere")
    assert release_period(programme, programme / "policy.yaml", "2018-Q2") == 0
    capsys.readouterr()
    assert verify(copy) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and str(pin_path(copy / "ledger")) in err and "1 entry missing" in err
    assert release_period(copy, copy / "policy.yaml", "2018-Q2") == 1
    assert "1 entry missing" in capsys.readouterr().err
    assert not (copy / "out/releases/fixture/2018-Q2").exists()
    assert verify(programme) == 0  # the original is the pinned ledger


@pytest.mark.slow
def test_a_second_ledger_at_another_path_is_not_a_copy(programme, tmp_path, capsys):
    """Control: a ledger of its own (its own genesis) beside the first, under the same key, publishes and
    verifies with its own pin, and the first still goes on."""
    other = tmp_path / "other"
    other.mkdir()
    policy = two_quarter_policy(other)
    assert release_period(other, policy, "2018-Q1") == 0 and release_period(other, policy, "2018-Q2") == 0
    assert verify(other) == 0
    assert pin_path(other / "ledger") != pin_path(programme / "ledger")
    assert release_period(programme, programme / "policy.yaml", "2018-Q2") == 0 and verify(programme) == 0
