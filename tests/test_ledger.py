"""The ledger's hash chain detects every edit, deletion, reordering and truncation; appends are atomic."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from spatial_release import cli
from spatial_release.ledger import ENTRIES, HEAD, LedgerCorrupt, append_entry, read_ledger


@pytest.fixture
def ledger(tmp_path):
    for i in range(4):
        append_entry(tmp_path, {"kind": "release", "dataset": "d", "period": f"2018-0{i + 1}", "risk": 0.01 * i})
    return tmp_path


def _lines(folder):
    return (folder / ENTRIES).read_text().splitlines()


def _write(folder, lines):
    (folder / ENTRIES).write_text("".join(line + "\n" for line in lines))


def test_a_clean_ledger_verifies(ledger):
    entries = read_ledger(ledger)
    assert [e["seq"] for e in entries] == [0, 1, 2, 3]
    assert entries[1]["prev_hash"] == entries[0]["hash"]


def test_an_edited_entry_is_detected(ledger):
    lines = _lines(ledger)
    entry = json.loads(lines[2])
    entry["risk"] = 0.0
    lines[2] = json.dumps(entry)
    _write(ledger, lines)
    with pytest.raises(LedgerCorrupt, match="entry 2: hash does not match"):
        read_ledger(ledger)


def test_a_deleted_entry_is_detected(ledger):
    lines = _lines(ledger)
    _write(ledger, lines[:1] + lines[2:])
    with pytest.raises(LedgerCorrupt) as caught:
        read_ledger(ledger)
    assert caught.value.index == 1


def test_reordered_entries_are_detected(ledger):
    lines = _lines(ledger)
    lines[1], lines[2] = lines[2], lines[1]
    _write(ledger, lines)
    with pytest.raises(LedgerCorrupt) as caught:
        read_ledger(ledger)
    assert caught.value.index == 1


def test_a_cut_off_tail_is_detected(ledger):
    _write(ledger, _lines(ledger)[:2])
    with pytest.raises(LedgerCorrupt, match="cut off the end"):
        read_ledger(ledger)


def test_a_rehashed_forgery_still_breaks_the_chain(ledger):
    # an editor who recomputes the edited entry's own hash still breaks the next entry's prev_hash
    from spatial_release.ledger import entry_hash
    lines = _lines(ledger)
    entry = json.loads(lines[1])
    entry["risk"] = 0.0
    entry["hash"] = entry_hash(entry)
    lines[1] = json.dumps(entry)
    _write(ledger, lines)
    with pytest.raises(LedgerCorrupt) as caught:
        read_ledger(ledger)
    assert caught.value.index == 2 and "prev_hash" in caught.value.reason


def test_crash_between_entries_and_head_is_accepted(ledger):
    count, last = (ledger / HEAD).read_text().split()
    entries = read_ledger(ledger)
    (ledger / HEAD).write_text(f"{int(count) - 1} {entries[-2]['hash']}\n")  # HEAD not yet renamed
    assert len(read_ledger(ledger)) == 4


def test_concurrent_appends_keep_the_chain(tmp_path):
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda i: append_entry(tmp_path, {"kind": "review", "n": i}), range(20)))
    entries = read_ledger(tmp_path)
    assert len(entries) == 20 and sorted(e["n"] for e in entries) == list(range(20))


def test_cli_ledger_verify(ledger, capsys):
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 0
    assert "4 entries" in capsys.readouterr().out
    lines = _lines(ledger)
    _write(ledger, lines[:1] + lines[2:])
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 1
    assert "ledger entry 1" in capsys.readouterr().err
