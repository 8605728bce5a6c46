"""Finding 7 of issue 9, end to end through the command line: someone who can write the ledger folder (and
the releases folder) edits, forges or deletes the ledger. Each attack must be reported by `ledger verify`
(exit 1, "does NOT verify") and must block the next release (exit 1, nothing published), never publish
with a risk figure reset."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.fixture import two_quarter_policy

from spatial_release import cli
from spatial_release.ledger import ENTRIES, HEAD, append_entry, entry_hash, forget_pin, pin_path


@pytest.fixture(scope="module")
def published_q1(tmp_path_factory) -> Path:
    """A programme with 2018-Q1 published (ledger and release folder), made once and copied per test."""
    root = tmp_path_factory.mktemp("programme")
    policy = two_quarter_policy(root)
    assert _release(root, policy, "2018-Q1") == 0
    return root


def _copy_programme(source: Path, root: Path) -> Path:
    shutil.copytree(source, root)
    # the copy keeps every path under the new root (the policy names its trace file by absolute path)
    policy = root / "policy.yaml"
    policy.write_text(policy.read_text().replace(str(source), str(root)))
    return root


@pytest.fixture
def programme(published_q1, tmp_path) -> Path:
    # Each test's copy is the same ledger (one genesis, so one pin): a test's copy that published Q2 would
    # leave the next test's copy behind that pin. Each test starts its ledger over, deliberately.
    root = _copy_programme(published_q1, tmp_path / "programme")
    forget_pin(root / "ledger")
    return root


def _release(root: Path, policy: Path, period: str) -> int:
    return cli.main(
        [
            "release",
            "--policy",
            str(policy),
            "--period",
            period,
            "--traces",
            str(root / f"traces-{period}.csv"),
            "--out",
            str(root / "out"),
            "--ledger",
            str(root / "ledger"),
        ]
    )


def _verify(root: Path) -> int:
    return cli.main(["ledger", "verify", "--ledger", str(root / "ledger"), "--releases", str(root / "out/releases")])


def _entries(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "ledger" / ENTRIES).read_text().splitlines()]


def _write(root: Path, entries: list[dict], head: bool = True) -> None:
    (root / "ledger" / ENTRIES).write_text("".join(json.dumps(e) + "\n" for e in entries))
    if head:
        (root / "ledger" / HEAD).write_text(f"{len(entries)} {entries[-1]['hash']}\n")


def _assert_blocked(root: Path, capsys, message: str) -> None:
    """Both the verifier and the next release refuse, naming the problem; nothing is published."""
    assert _verify(root) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and message in err and "Traceback" not in err
    assert _release(root, root / "policy.yaml", "2018-Q2") == 1
    assert message in capsys.readouterr().err
    assert not (root / "out/releases/fixture/2018-Q2").exists()


def test_the_untouched_programme_verifies_and_goes_on(programme, capsys):
    assert _verify(programme) == 0
    assert "every release folder" in capsys.readouterr().out
    assert _release(programme, programme / "policy.yaml", "2018-Q2") == 0
    record = json.loads((programme / "out/releases/fixture/2018-Q2/release.json").read_text())
    first = json.loads((programme / "out/releases/fixture/2018-Q1/release.json").read_text())
    # the cumulative figure carries Q1's
    assert record["risk"]["cumulative"] > record["risk"]["release_figure"] > 0
    assert record["ledger_entry"] == _entries(programme)[-1]["hash"] != first["ledger_entry"]
    assert _verify(programme) == 0


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
    _write(programme, entries)
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
    _write(programme, [*entries, forged], head=False)
    _assert_blocked(programme, capsys, "signature does not verify")


def test_a_ledger_re_signed_with_another_key_blocks(programme, tmp_path, monkeypatch, capsys):
    # the whole ledger rebuilt and signed by a key of the attacker's, and release.json pointed at it
    monkeypatch.setenv("SPATIAL_RELEASE_SIGNING_KEY", str(tmp_path / "attacker" / "key"))
    forged_folder = tmp_path / "forged"
    [entry] = _entries(programme)
    payload = {k: v for k, v in entry.items() if k not in ("seq", "prev_hash", "hash", "signer", "signature")}
    forged = append_entry(forged_folder, {**payload, "risk": {**entry["risk"], "release_figure": 0.0}})
    monkeypatch.undo()
    for name in (ENTRIES, HEAD):
        shutil.copyfile(forged_folder / name, programme / "ledger" / name)
    record_path = programme / "out/releases/fixture/2018-Q1/release.json"
    record_path.write_text(json.dumps({**json.loads(record_path.read_text()), "ledger_entry": forged["hash"]}))
    _assert_blocked(programme, capsys, "not by the trusted key")


def test_a_removed_release_folder_blocks(programme, capsys):
    shutil.rmtree(programme / "out/releases/fixture/2018-Q1")
    _assert_blocked(programme, capsys, "has no readable release.json")


def test_a_release_folder_the_ledger_does_not_know_blocks(programme, capsys):
    shutil.copytree(programme / "out/releases/fixture/2018-Q1", programme / "out/releases/fixture/2017-Q4")
    _assert_blocked(programme, capsys, "2017-Q4 is a published release the ledger does not record")


def test_a_published_table_edited_after_publication_blocks(programme, capsys):
    """Found by the hostile pass: a figure of the published cells.parquet set below k passed `ledger verify
    --releases` (only release.json's hash fields were compared). The files are now re-hashed."""
    import pandas as pd

    cells = programme / "out/releases/fixture/2018-Q1/cells.parquet"
    frame = pd.read_parquet(cells)
    frame.loc[0, "n_devices"] = 1
    frame.to_parquet(cells, index=False)
    _assert_blocked(programme, capsys, "cells.parquet does not match")


def test_a_published_record_edited_after_publication_blocks(programme, capsys):
    """The risk figures of release.json lowered by hand: the signed ledger entry holds them too."""
    path = programme / "out/releases/fixture/2018-Q1/release.json"
    record = json.loads(path.read_text())
    record["risk"]["cumulative"] = 0.0
    path.write_text(json.dumps(record))
    _assert_blocked(programme, capsys, "field 'risk' differs")


def test_any_figure_of_a_published_record_edited_blocks(programme, capsys):
    """Hostile pass: k and the counts of release.json edited by hand; the entry signs the record's hash."""
    path = programme / "out/releases/fixture/2018-Q1/release.json"
    record = json.loads(path.read_text())
    record["k"] = 50
    path.write_text(json.dumps(record))
    _assert_blocked(programme, capsys, "differs from the record ledger entry")


def test_a_rolled_back_ledger_with_the_release_renamed_to_staging_blocks(programme, capsys):
    """Issue 23, item 7. An older copy of the ledger folder (before Q2) put back, and Q2's release folder
    renamed to its staging name: `ledger verify --releases` passed (the older ledger verifies, and the
    cross-check skipped hidden folders) and the next run deleted the folder, so Q2 vanished without trace.
    Now the pin beside the signing key blocks both, and the folder is kept; where the pin is not (an
    auditor elsewhere, or a pin deleted), the hidden release.json blocks them."""
    ledger, q2 = programme / "ledger", programme / "out/releases/fixture/2018-Q2"
    older = {name: (ledger / name).read_bytes() for name in (ENTRIES, HEAD)}
    assert _release(programme, programme / "policy.yaml", "2018-Q2") == 0
    capsys.readouterr()
    for name, data in older.items():
        (ledger / name).write_bytes(data)
    hidden = q2.with_name(".2018-Q2.publishing")
    q2.rename(hidden)

    assert _verify(programme) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and str(pin_path(ledger)) in err and "1 entry missing" in err
    assert _release(programme, programme / "policy.yaml", "2018-Q2") == 1
    assert "1 entry missing" in capsys.readouterr().err
    assert (hidden / "release.json").exists() and not q2.exists()

    forget_pin(ledger)
    assert _verify(programme) == 1
    assert ".2018-Q2.publishing holds a published release" in capsys.readouterr().err
    assert _release(programme, programme / "policy.yaml", "2018-Q2") == 1
    assert "holds a published release" in capsys.readouterr().err
    assert (hidden / "release.json").exists() and not q2.exists()


def test_a_copy_of_the_ledger_and_releases_at_another_path_cannot_publish_behind_its_pin(programme, tmp_path, capsys):
    """Red-team re-test: the pin was keyed by the ledger's path, so a copy of the ledger and releases folders
    at another path started with no pin; publishing a period into the copy that the original had published
    since re-published it with a cumulative risk that left that release out, and `ledger verify` passed. The
    pin is keyed by the ledger's genesis now: the copy is behind the original's pin wherever it lives."""
    capsys.readouterr()
    copy = _copy_programme(programme, tmp_path / "elsewhere")
    assert _release(programme, programme / "policy.yaml", "2018-Q2") == 0
    capsys.readouterr()
    assert _verify(copy) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and str(pin_path(copy / "ledger")) in err and "1 entry missing" in err
    assert _release(copy, copy / "policy.yaml", "2018-Q2") == 1
    assert "1 entry missing" in capsys.readouterr().err
    assert not (copy / "out/releases/fixture/2018-Q2").exists()
    assert _verify(programme) == 0  # the original is the pinned ledger


def test_a_second_ledger_at_another_path_is_not_a_copy(programme, tmp_path, capsys):
    """Control: a ledger of its own (its own genesis) beside the first, under the same key, publishes and
    verifies with its own pin, and the first still goes on."""
    other = tmp_path / "other"
    other.mkdir()
    policy = two_quarter_policy(other)
    assert _release(other, policy, "2018-Q1") == 0 and _release(other, policy, "2018-Q2") == 0
    assert _verify(other) == 0
    assert pin_path(other / "ledger") != pin_path(programme / "ledger")
    assert _release(programme, programme / "policy.yaml", "2018-Q2") == 0 and _verify(programme) == 0
