"""The ledger: the hash chain detects every edit, deletion, reordering and truncation; signatures detect a
consistently re-hashed edit and a forged append; appends are atomic, locked, recorded once per (dataset,
period), and every crash point (a real kill -9) leaves a state the next append rolls forward."""

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from spatial_release import cli
from spatial_release.ledger import (
    ENTRIES,
    HEAD,
    AlreadyRecorded,
    Ledger,
    LedgerCorrupt,
    LedgerKeyError,
    PinMismatch,
    ReleasesMismatch,
    append_entry,
    check_releases,
    entry_hash,
    forget_pin,
    pin_path,
    public_key_path_for,
    read_ledger,
    signing_key_path,
)
from spatial_release.release import PENDING, recover_interrupted


@pytest.fixture
def ledger(tmp_path):
    folder = tmp_path / "ledger"
    for i in range(4):
        append_entry(folder, {"kind": "release", "dataset": "d", "period": f"2018-0{i + 1}", "risk": 0.01 * i})
    return folder


def _lines(folder):
    return (folder / ENTRIES).read_text().splitlines()


def _write(folder, lines):
    (folder / ENTRIES).write_text("".join(line + "\n" for line in lines))


def _rehash_from(folder, lines, start):
    """What someone who can write the folder does: recompute every hash and prev_hash from `start` on,
    and HEAD, so that the chain alone verifies again."""
    entries = [json.loads(line) for line in lines]
    for i in range(start, len(entries)):
        entries[i]["prev_hash"] = entries[i - 1]["hash"] if i else "0" * 64
        entries[i]["hash"] = entry_hash(entries[i])
    _write(folder, [json.dumps(e) for e in entries])
    (folder / HEAD).write_text(f"{len(entries)} {entries[-1]['hash']}\n")


def test_a_clean_ledger_verifies(ledger):
    entries = read_ledger(ledger)
    assert [e["seq"] for e in entries] == [0, 1, 2, 3]
    assert entries[1]["prev_hash"] == entries[0]["hash"]
    assert all(e["signature"] and e["signer"] for e in entries)


def test_an_edited_entry_is_detected(ledger):
    lines = _lines(ledger)
    entry = json.loads(lines[2])
    entry["risk"] = 0.0
    lines[2] = json.dumps(entry)
    _write(ledger, lines)
    with pytest.raises(LedgerCorrupt, match=r"entry 2 \(line 3 of entries.jsonl\): hash does not match"):
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


def test_a_consistently_rehashed_edit_is_detected(ledger):
    # the editor recomputes the edited entry's hash, every later prev_hash and hash, and HEAD;
    # the chain verifies, the signature of the edited entry does not
    lines = _lines(ledger)
    entry = json.loads(lines[1])
    entry["risk"] = 0.0
    lines[1] = json.dumps(entry)
    _rehash_from(ledger, lines, 1)
    with pytest.raises(LedgerCorrupt) as caught:
        read_ledger(ledger)
    assert caught.value.index == 1 and "signature does not verify" in caught.value.reason


def test_a_forged_entry_appended_with_head_left_one_behind_is_detected(ledger):
    # the state a crash between the two renames leaves is accepted only for a signed entry
    lines = _lines(ledger)
    last = json.loads(lines[-1])
    forged = {
        "kind": "release",
        "dataset": "d",
        "period": "2018-05",
        "risk": 0.0,
        "seq": 4,
        "prev_hash": last["hash"],
        "recorded_at": last["recorded_at"],
        "signer": last["signer"],
    }
    forged["hash"] = entry_hash(forged)
    forged["signature"] = last["signature"]
    _write(ledger, lines + [json.dumps(forged)])
    with pytest.raises(LedgerCorrupt, match=r"entry 4 .*signature does not verify"):
        read_ledger(ledger)


def test_an_entry_signed_by_another_key_is_detected(ledger, tmp_path, monkeypatch):
    # someone who can write the folder replaces the whole ledger with one signed by a key of their own
    monkeypatch.setenv("SPATIAL_RELEASE_SIGNING_KEY", str(tmp_path / "attacker" / "key"))
    forged = tmp_path / "forged"
    append_entry(forged, {"kind": "release", "dataset": "d", "period": "2018-01", "risk": 0.0})
    monkeypatch.undo()
    for name in (ENTRIES, HEAD):
        (ledger / name).write_bytes((forged / name).read_bytes())
    with pytest.raises(LedgerCorrupt, match="not by the trusted key"):
        read_ledger(ledger)


def test_crash_between_entries_and_head_is_accepted_and_repaired(ledger):
    count, last = (ledger / HEAD).read_text().split()
    entries = read_ledger(ledger)
    (ledger / HEAD).write_text(f"{int(count) - 1} {entries[-2]['hash']}\n")  # HEAD not yet renamed
    assert len(read_ledger(ledger)) == 4
    append_entry(ledger, {"kind": "review"})
    assert (ledger / HEAD).read_text().split()[0] == "5" and len(read_ledger(ledger)) == 5


def test_crash_before_the_first_head_is_rolled_forward(tmp_path):
    # entries.jsonl written, HEAD never: the next read and append roll it forward
    folder = tmp_path / "ledger"
    append_entry(folder, {"kind": "release", "dataset": "d", "period": "2018-01"})
    (folder / HEAD).unlink()
    assert len(read_ledger(folder)) == 1
    append_entry(folder, {"kind": "release", "dataset": "d", "period": "2018-02"})
    assert len(read_ledger(folder)) == 2 and (folder / HEAD).read_text().startswith("2 ")


def test_head_missing_behind_several_entries_is_corrupt(ledger):
    (ledger / HEAD).unlink()
    with pytest.raises(LedgerCorrupt, match="HEAD is missing"):
        read_ledger(ledger)


def test_a_second_release_entry_for_a_period_is_refused(ledger):
    # whatever the caller checked, the ledger itself records a (dataset, period) once
    with pytest.raises(AlreadyRecorded, match="already records d 2018-02"):
        append_entry(ledger, {"kind": "release", "dataset": "d", "period": "2018-02"})
    append_entry(ledger, {"kind": "release", "dataset": "other", "period": "2018-02"})
    append_entry(ledger, {"kind": "review", "dataset": "d", "period": "2018-02"})  # reviews repeat
    assert len(read_ledger(ledger)) == 6


def test_concurrent_appends_keep_the_chain(tmp_path):
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda i: append_entry(tmp_path, {"kind": "review", "n": i}), range(20)))
    entries = read_ledger(tmp_path)
    assert len(entries) == 20 and sorted(e["n"] for e in entries) == list(range(20))


def test_the_signing_key_is_created_owner_only(tmp_path, monkeypatch):
    key = tmp_path / "cfg" / "sub" / "ledger.key"
    monkeypatch.setenv("SPATIAL_RELEASE_SIGNING_KEY", str(key))
    append_entry(tmp_path / "ledger", {"kind": "review"})
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert public_key_path_for(key).exists() and signing_key_path() == key
    key.chmod(0o644)  # readable by others: refused, like ssh
    with pytest.raises(LedgerKeyError, match="owner-only"):
        append_entry(tmp_path / "ledger", {"kind": "review"})


def test_cli_ledger_verify(ledger, capsys):
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 0
    assert "4 entries" in capsys.readouterr().out
    lines = _lines(ledger)
    _write(ledger, lines[:1] + lines[2:])
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 1
    assert "ledger entry 1" in capsys.readouterr().err


def test_cli_verify_needs_only_the_public_key(ledger, tmp_path, monkeypatch, capsys):
    public = tmp_path / "auditor.pub"
    public.write_bytes(public_key_path_for(signing_key_path()).read_bytes())
    monkeypatch.setenv("SPATIAL_RELEASE_SIGNING_KEY", str(tmp_path / "nowhere" / "key"))  # no private key here
    assert cli.main(["ledger", "verify", "--ledger", str(ledger), "--public-key", str(public)]) == 0
    assert not (tmp_path / "nowhere").exists()
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 1  # no trusted key: cannot verify
    assert "no trusted public key" in capsys.readouterr().err


@pytest.mark.parametrize(
    "damage, where",
    [
        (lambda f: (f / ENTRIES).write_text((f / ENTRIES).read_text() + "{not json\n"), "line 5"),
        (lambda f: (f / ENTRIES).write_text((f / ENTRIES).read_text() + "[1, 2]\n"), "line 5"),
        (lambda f: (f / ENTRIES).write_text((f / ENTRIES).read_text().replace("\n", "\n\n", 1)), "line 2"),
        (lambda f: (f / ENTRIES).write_bytes(b"\xff\xfe\n" + (f / ENTRIES).read_bytes()), "line 1"),
        (lambda f: (f / ENTRIES).write_text('{"seq": "x"}\n'), "line 1"),
        (lambda f: (f / HEAD).write_text("garbage\n"), "HEAD"),
        (lambda f: (f / HEAD).write_text("four abc\n"), "HEAD"),
        (lambda f: (f / HEAD).write_text("-1 " + "0" * 64 + "\n"), "HEAD"),
    ],
)
def test_cli_reports_malformed_ledgers_without_a_traceback(ledger, capsys, damage, where):
    damage(ledger)
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and where in err and "Traceback" not in err


def _publish_folder(root: Path, entry: dict) -> None:
    folder = root / entry["dataset"] / entry["period"]
    folder.mkdir(parents=True)
    record = {k: entry[k] for k in ("dataset", "period", "risk", "files") if k in entry}
    (folder / "release.json").write_text(json.dumps({**record, "ledger_entry": entry["hash"]}))


def test_releases_are_cross_checked_against_the_ledger(ledger, tmp_path):
    releases = tmp_path / "releases"
    entries = read_ledger(ledger)
    for entry in entries:
        _publish_folder(releases, entry)
    check_releases(entries, releases)
    # deleting the ledger while releases exist: every folder is unknown
    with pytest.raises(ReleasesMismatch, match="the ledger does not record"):
        check_releases([], releases)
    # a published record edited after publication (the risk it reports): the signed entry disagrees
    record_path = releases / "d" / "2018-02" / "release.json"
    original = record_path.read_text()
    record_path.write_text(json.dumps({**json.loads(original), "risk": 0.0}))
    with pytest.raises(ReleasesMismatch, match="field 'risk' differs"):
        check_releases(entries, releases)
    record_path.write_text(original)
    # an entry without its folder
    (releases / "d" / "2018-03" / "release.json").unlink()
    with pytest.raises(ReleasesMismatch, match="2018-03"):
        check_releases(entries, releases)


def test_cli_verify_cross_checks_releases(ledger, tmp_path, capsys):
    releases = tmp_path / "releases"
    for entry in read_ledger(ledger):
        _publish_folder(releases, entry)
    assert cli.main(["ledger", "verify", "--ledger", str(ledger), "--releases", str(releases)]) == 0
    for name in (ENTRIES, HEAD):
        (ledger / name).unlink()
    # beside its pin, a deleted ledger is a rollback to nothing
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 1
    assert "4 entries missing" in capsys.readouterr().err
    forget_pin(ledger)  # where the pin is not (an auditor's machine), the releases still tell
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 0  # alone, an empty ledger verifies
    assert cli.main(["ledger", "verify", "--ledger", str(ledger), "--releases", str(releases)]) == 1
    assert "does not record" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- kill -9 crashes

_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from spatial_release import fileio
    from spatial_release.ledger import append_entry

    crash_at, when = int(sys.argv[2]), sys.argv[3]
    calls = [0]
    real_replace = os.replace

    def replace(src, dst):
        calls[0] += 1
        if calls[0] == crash_at and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)
        if calls[0] == crash_at and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)

    fileio.os.replace = replace
    append_entry(Path(sys.argv[1]), {"kind": "release", "dataset": "d", "period": sys.argv[4]})
""")


@pytest.mark.parametrize("existing", [0, 2])
@pytest.mark.parametrize(
    "crash_at, when", [(1, "before"), (1, "after"), (2, "before"), (2, "after"), (3, "before"), (3, "after")]
)
def test_kill_9_at_every_step_of_an_append_is_rolled_forward(tmp_path, existing, crash_at, when):
    """The append's renames are its steps: entries.jsonl (1), HEAD (2), the pin (3); the process is killed
    right before or right after each. The next append must succeed, leave no temporary, and the ledger
    verify against a pin that records it."""
    folder = tmp_path / "ledger"
    for i in range(existing):
        append_entry(folder, {"kind": "release", "dataset": "d", "period": f"2017-0{i + 1}"})
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder), str(crash_at), when, "2018-01"],
        env={**os.environ},
        capture_output=True,
        text=True,
    )
    assert child.returncode == -9, child.stderr
    survived = read_ledger(folder)  # readable right after the crash, before any repair
    assert len(survived) in (existing, existing + 1)
    append_entry(folder, {"kind": "review"})
    entries = read_ledger(folder)
    assert [e["seq"] for e in entries] == list(range(len(entries)))
    assert (folder / HEAD).read_text().split() == [str(len(entries)), entries[-1]["hash"]]
    assert not list(folder.glob(".*.tmp"))  # the killed writer's temporaries are gone
    pin = json.loads(pin_path(folder).read_text())
    assert (pin["entries"], pin["head"]) == (len(entries), entries[-1]["hash"])
    assert not list(pin_path(folder).parent.glob(f".{pin_path(folder).name}.*.tmp"))
    periods = [e.get("period") for e in entries if e["kind"] == "release"]
    assert periods.count("2018-01") == (1 if len(survived) > existing else 0)


def test_cli_verify_of_a_mistyped_ledger_path_is_a_user_error(tmp_path, capsys):
    """A path that does not exist must not read as "verifies: 0 entries", exit 0."""
    assert cli.main(["ledger", "verify", "--ledger", str(tmp_path / "no-such-ledger")]) == 2
    assert "not a ledger folder" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ the last-head pin


def _snapshot(folder: Path) -> dict[str, bytes]:
    """The ledger folder's files as an attacker or operator copies them, to put back later."""
    return {name: (folder / name).read_bytes() for name in (ENTRIES, HEAD)}


def _put_back(folder: Path, snapshot: dict[str, bytes]) -> None:
    for name, data in snapshot.items():
        (folder / name).write_bytes(data)


def test_the_pin_is_kept_beside_the_signing_key(ledger):
    # the test key is in the scratch folder (support.environment): the pin is there too, never in the user's home
    path = pin_path(ledger)
    assert path.parent == signing_key_path().with_name(signing_key_path().name + ".pins")
    assert ledger not in path.parents and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    pin = json.loads(path.read_text())
    entries = read_ledger(ledger)
    assert (pin["ledger"], pin["entries"], pin["head"]) == (str(ledger.resolve()), 4, entries[-1]["hash"])


def test_an_older_copy_of_the_ledger_put_back_is_behind_its_pin(ledger, capsys):
    """Negative control: before the pin, the older copy verified (its chain, HEAD and signatures are all
    the key's own) and the release recorded since vanished from the record."""
    older = _snapshot(ledger)
    append_entry(ledger, {"kind": "release", "dataset": "d", "period": "2018-05"})
    _put_back(ledger, older)
    with pytest.raises(PinMismatch, match=r"holds 4 entries but its pin .* records 5 .*: 1 entry missing"):
        read_ledger(ledger)
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and str(pin_path(ledger)) in err and "1 entry missing" in err
    with pytest.raises(PinMismatch):  # nor can the older copy be appended to (re-recording 2018-05)
        append_entry(ledger, {"kind": "release", "dataset": "d", "period": "2018-05"})


def test_a_ledger_replaced_by_another_of_the_same_length_diverges_from_its_pin(ledger, tmp_path):
    other = tmp_path / "other"
    for i in range(4):
        append_entry(other, {"kind": "release", "dataset": "d", "period": f"2018-0{i + 1}", "risk": 0.0})
    _put_back(ledger, _snapshot(other))  # signed by the same key: verifies on its own
    with pytest.raises(PinMismatch, match="entry 3 is not the head its pin"):
        read_ledger(ledger)


def test_a_ledger_ahead_of_its_pin_is_accepted_and_re_pinned(ledger):
    # a crash between HEAD's rename and the pin's: the pinned head is still in the chain
    path = pin_path(ledger)
    before = path.read_bytes()
    append_entry(ledger, {"kind": "review"})
    path.write_bytes(before)
    assert len(read_ledger(ledger)) == 5  # a reader accepts it and writes nothing
    assert path.read_bytes() == before
    with Ledger(ledger).locked():  # a run's locked open re-pins
        pass
    assert json.loads(path.read_text())["entries"] == 5


def test_first_use_pins_what_is_there(ledger):
    forget_pin(ledger)  # a ledger written before pins existed
    assert len(read_ledger(ledger)) == 4 and not pin_path(ledger).exists()
    with Ledger(ledger).locked():
        pass
    assert json.loads(pin_path(ledger).read_text())["entries"] == 4


def test_ledgers_sharing_a_key_have_a_pin_each(ledger, tmp_path):
    other = tmp_path / "other"
    append_entry(other, {"kind": "review"})
    assert pin_path(other) != pin_path(ledger) and pin_path(other).parent == pin_path(ledger).parent
    older = _snapshot(other)
    append_entry(other, {"kind": "review"})
    _put_back(other, older)
    with pytest.raises(PinMismatch):
        read_ledger(other)
    assert len(read_ledger(ledger)) == 4  # the other ledger's rollback is its own


def test_a_copy_at_another_path_behind_its_pin_does_not_verify(ledger, tmp_path, capsys):
    """A copy of the ledger folder elsewhere, from before the last release: keyed by path, it would have no
    pin, verify and take appends. Keyed by the genesis, the copy finds the original's pin wherever it lives."""
    copy = tmp_path / "elsewhere" / "ledger"
    shutil.copytree(ledger, copy)
    append_entry(ledger, {"kind": "release", "dataset": "d", "period": "2018-05"})
    assert pin_path(copy) == pin_path(ledger)
    with pytest.raises(PinMismatch, match=r"holds 4 entries but its pin .* records 5 .*: 1 entry missing"):
        read_ledger(copy)
    assert cli.main(["ledger", "verify", "--ledger", str(copy)]) == 1
    assert "does NOT verify" in capsys.readouterr().err
    with pytest.raises(PinMismatch):  # nor does the copy take the release the original has
        append_entry(copy, {"kind": "release", "dataset": "d", "period": "2018-05"})


def test_a_copy_that_went_ahead_leaves_the_original_behind(ledger, tmp_path):
    """One genesis, one pin: whichever copy moves ahead is the ledger; the other is behind (or diverges)."""
    copy = tmp_path / "elsewhere"
    shutil.copytree(ledger, copy)
    assert len(read_ledger(copy)) == 4  # an exact copy is the pinned ledger
    append_entry(copy, {"kind": "review"})
    assert json.loads(pin_path(ledger).read_text())["ledger"] == str(copy.resolve())  # the path: information
    with pytest.raises(PinMismatch, match="1 entry missing"):
        read_ledger(ledger)
    (copy / ENTRIES).write_text("".join(line + "\n" for line in _lines(copy)[:4]))  # cut the copy back
    (copy / HEAD).write_text(f"4 {json.loads(_lines(copy)[3])['hash']}\n")
    with pytest.raises(PinMismatch, match="1 entry missing"):
        read_ledger(copy)


def test_the_path_a_copy_moved_ahead_from_stays_pinned(ledger, tmp_path, capsys):
    """A copy elsewhere moves ahead, then the ledger at the original path is deleted (or replaced): with only
    the last pinned path recorded, that would read as first use there, with no entry and no pin, where the
    pin is. Every path it was pinned at is kept."""
    copy = tmp_path / "elsewhere"
    shutil.copytree(ledger, copy)
    append_entry(copy, {"kind": "review"})
    pin = json.loads(pin_path(copy).read_text())
    assert pin["paths"] == [str(ledger.resolve()), str(copy.resolve())] and pin["ledger"] == str(copy.resolve())
    for name in (ENTRIES, HEAD):
        (ledger / name).unlink()
    with pytest.raises(PinMismatch, match="holds 0 entries but its pin .* records 5"):
        read_ledger(ledger)
    with pytest.raises(PinMismatch):  # nor does a new ledger started there take appends
        append_entry(ledger, {"kind": "release", "dataset": "d", "period": "2018-01"})
    other = tmp_path / "other"  # replaced there by another ledger signed with the same key
    append_entry(other, {"kind": "review"})
    _put_back(ledger, _snapshot(other))
    with pytest.raises(PinMismatch, match="1 entry but its pin .* records 5"):
        read_ledger(ledger)
    assert cli.main(["ledger", "verify", "--ledger", str(ledger)]) == 1
    assert "does NOT verify" in capsys.readouterr().err
    # starting over deliberately at the original path frees that path only: the copy stays pinned
    for name in (ENTRIES, HEAD):
        (ledger / name).unlink()
    forget_pin(ledger)
    assert read_ledger(ledger) == [] and len(read_ledger(copy)) == 5
    assert json.loads(pin_path(copy).read_text())["paths"] == [str(copy.resolve())]
    older = _snapshot(copy)
    append_entry(copy, {"kind": "review"})
    _put_back(copy, older)
    with pytest.raises(PinMismatch, match="1 entry missing"):
        read_ledger(copy)


def test_two_hosts_writing_one_ledger_each_catch_a_rollback(tmp_path):
    """Two hosts append to one shared ledger and releases folder with one key, each
    with its own pin beside its copy of the key. A rollback of the entry host B appended: B is behind its pin;
    host A never saw the entry, so its pin cannot tell, and the cross-check of releases/ (the release B
    published, which the ledger no longer records) is what blocks there."""
    import os

    from spatial_release.ledger import load_signing_key

    key_a = signing_key_path()
    load_signing_key(key_a)  # created on first use
    key_b = tmp_path / "host-b" / key_a.name
    key_b.parent.mkdir(mode=0o700)
    for suffix in ("", ".pub"):
        (key_b.parent / (key_a.name + suffix)).write_bytes((key_a.parent / (key_a.name + suffix)).read_bytes())
    os.chmod(key_b, 0o600)
    folder, releases = tmp_path / "ledger", tmp_path / "releases"
    for host, period in ((key_a, "2018-01"), (key_b, "2018-02"), (key_a, "2018-03")):
        _publish_folder(releases, append_entry(folder, {"kind": "release", "dataset": "d", "period": period}, host))
    older = _snapshot(folder)
    _publish_folder(releases, append_entry(folder, {"kind": "release", "dataset": "d", "period": "2018-04"}, key_b))
    _put_back(folder, older)
    with pytest.raises(PinMismatch, match="1 entry missing"):
        Ledger(folder, signing_key=key_b).read()
    entries = Ledger(folder, signing_key=key_a).read()
    assert len(entries) == 3  # host A's pin is at the third entry: the rollback is behind host B's only
    with pytest.raises(ReleasesMismatch, match="2018-04 is a published release the ledger does not record"):
        Ledger(folder, releases, signing_key=key_a).checked_releases()


def test_forget_pin_never_signs_an_edited_pin_again(ledger, tmp_path):
    copy = tmp_path / "elsewhere"
    shutil.copytree(ledger, copy)
    append_entry(copy, {"kind": "review"})
    path = pin_path(copy)
    path.write_text(json.dumps({**json.loads(path.read_text()), "entries": 2}))  # lowered by hand
    for name in (ENTRIES, HEAD):
        (ledger / name).unlink()
    with pytest.raises(PinMismatch, match="signature does not verify"):
        forget_pin(ledger)


def test_a_legit_second_ledger_elsewhere_has_its_own_pin(ledger, tmp_path):
    other = tmp_path / "elsewhere" / "ledger"
    append_entry(other, {"kind": "release", "dataset": "d", "period": "2018-01"})
    assert len(read_ledger(other)) == 1 and pin_path(other) != pin_path(ledger)
    assert json.loads(pin_path(other).read_text())["genesis"] == read_ledger(other)[0]["hash"]
    forget_pin(other)  # forgetting one ledger's pin leaves the other's
    assert not pin_path(other).exists() and pin_path(ledger).exists()


def test_forget_pin_of_a_deleted_ledger_and_of_one_still_there(ledger):
    forget_pin(ledger)  # by its genesis
    assert not pin_path(ledger).exists()
    with Ledger(ledger).locked():
        pass
    path = pin_path(ledger)
    for name in (ENTRIES, HEAD):
        (ledger / name).unlink()
    with pytest.raises(PinMismatch, match="4 entries missing"):  # deleted where it was pinned
        read_ledger(ledger)
    forget_pin(ledger)  # no genesis left: by the path its pin records
    assert not path.exists() and read_ledger(ledger) == []


def _legacy_pin(folder: Path, entries: int) -> Path:
    """A pin as written before pins were keyed by genesis: named by the path's hash, no `genesis`."""
    import base64
    import hashlib

    from spatial_release.ledger import key_id, load_signing_key, pins_folder
    from spatial_release.ledger.pin import _signed_bytes

    key = load_signing_key(signing_key_path(), create=False)
    body = {
        "ledger": str(folder.resolve()),
        "entries": entries,
        "head": read_ledger(folder)[entries - 1]["hash"],
        "pinned_at": "2018-01-01T00:00:00+00:00",
        "signer": key_id(key.public_key()),
    }
    body["signature"] = base64.b64encode(key.sign(_signed_bytes(body))).decode()
    path = pins_folder() / f"{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:32]}.json"
    path.write_text(json.dumps(body))
    return path


def test_a_path_keyed_pin_from_before_is_read_and_migrated(ledger):
    legacy = _legacy_pin(ledger, 4)
    forget_genesis = pin_path(ledger)
    forget_genesis.unlink()
    assert len(read_ledger(ledger)) == 4  # compared as this ledger's own pin
    older = _snapshot(ledger)
    with Ledger(ledger).locked():  # migrated: the genesis-keyed pin replaces it
        pass
    assert forget_genesis.exists() and not legacy.exists()
    append_entry(ledger, {"kind": "review"})
    _put_back(ledger, older)
    with pytest.raises(PinMismatch, match="1 entry missing"):
        read_ledger(ledger)
    forget_pin(ledger)
    _legacy_pin(ledger, 4)
    lines = _lines(ledger)
    _write(ledger, lines[:3])
    (ledger / HEAD).write_text(f"3 {json.loads(lines[2])['hash']}\n")
    with pytest.raises(PinMismatch, match="1 entry missing"):  # a ledger behind its path-keyed pin
        read_ledger(ledger)


def test_an_edited_pin_is_refused(ledger):
    # lowering the pinned count would let an older copy pass: the pin is signed
    path = pin_path(ledger)
    pin = json.loads(path.read_text())
    path.write_text(json.dumps({**pin, "entries": 2, "head": read_ledger(ledger)[1]["hash"]}))
    with pytest.raises(PinMismatch, match="signature does not verify"):
        read_ledger(ledger)
    path.write_text("{not json")
    with pytest.raises(PinMismatch, match="malformed"):
        read_ledger(ledger)


# ---------------------------------------------------------------- staging folders are evidence, never deleted


def _staging(releases: Path, period: str, files: dict[str, str]) -> Path:
    folder = releases / "d" / f".{period}.publishing"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_a_publication_crashed_before_its_ledger_entry_is_kept_aside(ledger, tmp_path, capsys):
    """Negative control: the next run used to delete such a folder; it is now moved aside, owner-only,
    reported, and kept (a crash before the append published nothing, but the folder may be evidence)."""
    releases = tmp_path / "releases"
    entries = read_ledger(ledger)
    for entry in entries:
        _publish_folder(releases, entry)
    staging = _staging(releases, "2018-09", {PENDING: "{}", "cells.parquet": "tables"})
    assert recover_interrupted(releases, entries) == []
    [kept] = (releases / "d").glob(".2018-09.publishing.abandoned-*")
    assert not staging.exists() and (kept / "cells.parquet").read_text() == "tables"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    assert str(kept) in capsys.readouterr().err
    check_releases(entries, releases)  # not a release: reported, not a mismatch
    assert str(kept) in capsys.readouterr().err
    assert recover_interrupted(releases, entries) == [] and kept.exists()  # nothing finishes or deletes it


def test_a_published_release_hidden_under_its_staging_name_blocks(ledger, tmp_path):
    """A staging folder holding release.json that the ledger does not record: the release was published
    (release.json is written after the append) and its entry is gone. Blocked, kept where it is."""
    releases = tmp_path / "releases"
    entries = read_ledger(ledger)
    for entry in entries[:3]:
        _publish_folder(releases, entry)
    hidden = releases / "d" / ".2018-04.publishing"
    _publish_folder(releases, entries[3])
    (releases / "d" / "2018-04").rename(hidden)
    rolled_back = entries[:3]  # what an older ledger (without its pin) says
    with pytest.raises(ReleasesMismatch, match="holds a published release"):
        recover_interrupted(releases, rolled_back)
    with pytest.raises(ReleasesMismatch, match=r"\.2018-04\.publishing holds a published release"):
        check_releases(rolled_back, releases)
    assert (hidden / "release.json").exists()


def test_a_staging_folder_beside_its_published_release_blocks(ledger, tmp_path):
    releases = tmp_path / "releases"
    entries = read_ledger(ledger)
    for entry in entries:
        _publish_folder(releases, entry)
    staging = _staging(releases, "2018-02", {PENDING: "{}"})
    with pytest.raises(ReleasesMismatch, match="sits beside"):
        recover_interrupted(releases, entries)
    assert staging.exists() and (releases / "d" / "2018-02" / "release.json").exists()


def test_release_entries_are_typed_and_a_signed_entry_missing_a_field_is_reported_as_corrupt(tmp_path):
    ledger = tmp_path / "typed"
    append_entry(
        ledger,
        {
            "kind": "release",
            "dataset": "d",
            "period": "2018-01",
            "population": "bikes",
            "inputs": ["a" * 64],
            "risk": {"release_figure": 0.01},
        },
    )
    append_entry(ledger, {"kind": "review", "dataset": "d"})
    append_entry(ledger, {"kind": "release", "dataset": "d", "period": "2018-02"})
    handle = Ledger(ledger)
    first, second = handle.releases("d")
    assert (first.seq, first.key, first.population, first.inputs, first.release_figure) == (
        0,
        ("d", "2018-01"),
        "bikes",
        ("a" * 64,),
        0.01,
    )
    assert (second.seq, second.population, second.inputs, second.release_figure) == (2, "d", (), None)
    assert handle.recorded("d", "2018-02") == second and handle.recorded("d", "2018-03") is None
    # the gate cannot count a release that records no figure as having spent nothing
    from spatial_release.history import spent_figures

    assert spent_figures([first]) == [0.01]
    with pytest.raises(LedgerCorrupt, match="records no risk figure"):
        spent_figures([first, second])
    # a release entry, validly signed, whose period is not a string: a clear ledger error, not a KeyError
    append_entry(ledger, {"kind": "release", "dataset": "d", "period": 2018})
    with pytest.raises(LedgerCorrupt, match=r"ledger entry 3 .*'period' is int, expected str"):
        handle.releases("d")
