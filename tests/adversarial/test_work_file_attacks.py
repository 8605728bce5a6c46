"""The files of a published release's work area that later releases and reviews read (key sets,
memberships, key areas, audit intervals, candidate tables) are held to the sha256 its ledger entry records,
so that permuting the unit names of 2018-Q1's key set file cannot make 2018-Q2 publish with other risk
figures. Each kind of file is edited (names permuted, truncated, replaced by
another release's file) and the next release must be refused by the check `earlier_work_files`, naming the
file; the unedited programme publishes."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.releases import build_two_quarter_q1, copy_programme, release_period, sign_as, write_ledger_entries

from spatial_release import stages
from spatial_release.fileio import sha256_file
from spatial_release.guarantees import CheckOutcome
from spatial_release.ledger import ENTRIES, Ledger, LedgerCorrupt, ReleaseEntry, forget_pin
from spatial_release.period import Period
from spatial_release.policy import load_policy
from spatial_release.stages.carried import CARRIED
from spatial_release.stages.checks import earlier_work_files_outcome
from spatial_release.stages.context import Published

# Whole releases (2018-Q2 published for the negative control): left out of the fast tier (pytest -m "not slow").
pytestmark = pytest.mark.slow

Q1, Q2 = "2018-Q1", "2018-Q2"
KEYS = "risk/unit_keys.internal.parquet"
MEMBERSHIP = "counts/membership.internal.parquet"
INTERVALS = "audit_intervals.internal.parquet"


@pytest.fixture(scope="module")
def published_q2(release_cache, tmp_path_factory) -> Path:
    """The negative control: the unedited programme publishes 2018-Q2 (and its files are another release's).
    A copy of the run's published 2018-Q1 (conftest.published_q1), signed with its key; a test that reads its
    ledger signs as it (`sign_as`)."""
    with pytest.MonkeyPatch.context() as patch:
        root = release_cache.copy(
            "two-quarter-q1", build_two_quarter_q1, tmp_path_factory.mktemp("control") / "programme", patch
        )
        assert release_period(root, root / "policy.yaml", Q2) == 0
    return root


@pytest.fixture
def programme(published_q1) -> Path:
    """The run's published 2018-Q1 (conftest.published_q1: the test's own copy, signed with its key)."""
    forget_pin(published_q1 / "ledger")  # each test's copy starts its ledger's pin over, as before
    return published_q1


def _area(root: Path, period: str) -> Path:
    return root / "out/work/fixture" / period


def _entries(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "ledger" / ENTRIES).read_text().splitlines()]


def _check(root: Path) -> CheckOutcome:
    """The check `earlier_work_files` as the guarantees run it for 2018-Q2."""
    ctx = stages.ReleaseContext(load_policy(root / "policy.yaml"), Period.parse(Q2), root / "out/work")
    releases = root / "out/releases"
    return stages.check_earlier_work_files(ctx, Published(Ledger(root / "ledger", releases), releases))


def _permute_names(path: Path, column: str, rows: pa.Array | None = None) -> None:
    """Rotate the values of `column` (of the rows `rows` selects, all by default) by one, keeping the schema
    and its metadata: the same names, each on another unit's rows."""
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    where = [i for i, keep in enumerate(rows.to_pylist() if rows is not None else [True] * len(values)) if keep]
    assert len({values[i] for i in where}) > 1, "nothing to permute"
    rotated = [values[i] for i in where[1:] + where[:1]]
    for i, value in zip(where, rotated):
        values[i] = value
    index = table.schema.get_field_index(column)
    table = table.set_column(index, table.schema.field(index), pa.array(values, table.schema.field(index).type))
    pq.write_table(table, path)


def _truncate_rows(path: Path) -> None:
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows // 2), path)


def _truncate_bytes(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_the_unedited_programme_records_its_work_files_and_publishes(published_q2, monkeypatch):
    """Each release entry records the sha256 of every carried file its work area holds (re-derived here by
    hashing the files); 2018-Q2 passed the check and published."""
    sign_as(published_q2, monkeypatch)
    entries = [e for e in _entries(published_q2) if e["kind"] == "release"]
    assert [e["period"] for e in entries] == [Q1, Q2]
    for entry in entries:
        area = _area(published_q2, entry["period"])
        held = {name for name in CARRIED if (area / name).is_file()}
        assert {KEYS, MEMBERSHIP, INTERVALS, "candidate/cells.parquet"} <= held
        assert entry["work_files"] == {name: sha256_file(area / name) for name in held}
    outcome = _check(published_q2)
    assert outcome.passed and outcome.name == "earlier_work_files", outcome.summary


def test_permuted_unit_names_in_the_key_sets_block_the_next_release(programme, capsys):
    """The issue's case through the command line: the coded key set file keeps its format (it still passes
    the file's own checks), its unit names rotated; the next release is refused by the named check."""
    keys = _area(programme, Q1) / KEYS
    table = pq.read_table(keys)
    _permute_names(keys, "name", pa.compute.is_null(table.column("k")))
    assert pq.read_schema(keys).metadata == table.schema.metadata  # still a coded key set file
    assert release_period(programme, programme / "policy.yaml", Q2) == 1
    err = capsys.readouterr().err
    assert "earlier_work_files" in err and f"{Q1}/{KEYS}" in err and "does not match the sha256" in err, err
    assert not (programme / "out/releases/fixture" / Q2).exists()


EDITS = {
    "names permuted": lambda path, column: _permute_names(path, column),
    "rows truncated": lambda path, column: _truncate_rows(path),
    "bytes truncated": lambda path, column: _truncate_bytes(path),
}
FILES = {KEYS: "name", MEMBERSHIP: "unit", INTERVALS: None, "candidate/cells.parquet": "cell_id"}


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_each_kind_of_edit_of_each_work_file_fails_the_check(programme, name, edit):
    path = _area(programme, Q1) / name
    column = FILES[name] or pq.read_schema(path).names[0]
    if edit == "names permuted" and len(set(pq.read_table(path).column(column).to_pylist())) < 2:
        column = next(c for c in pq.read_schema(path).names if len(set(pq.read_table(path).column(c).to_pylist())) > 1)
    EDITS[edit](path, column)
    outcome = _check(programme)
    assert not outcome.passed and outcome.name == "earlier_work_files"
    assert str(path) in outcome.summary and "ledger entry 0" in outcome.summary


@pytest.mark.parametrize("name", [KEYS, MEMBERSHIP, INTERVALS])
def test_a_work_file_replaced_by_another_releases_fails_the_check(programme, published_q2, name):
    """2018-Q2's file (a valid file of the same kind, of the same devices) put in 2018-Q1's place."""
    theirs = _area(published_q2, Q2) / name
    assert sha256_file(theirs) != sha256_file(_area(programme, Q1) / name)
    shutil.copyfile(theirs, _area(programme, Q1) / name)
    outcome = _check(programme)
    assert not outcome.passed and str(_area(programme, Q1) / name) in outcome.summary


def test_a_work_file_removed_within_retention_fails_and_after_it_passes(programme):
    (_area(programme, Q1) / KEYS).unlink()
    outcome = _check(programme)
    assert not outcome.passed and "missing within its key retention" in outcome.summary
    ctx = stages.ReleaseContext(load_policy(programme / "policy.yaml"), Period.parse(Q2), programme / "out/work")
    entries = Ledger(programme / "ledger").releases("fixture")
    assert ctx.policy.risk is not None
    later = datetime.now(UTC) + timedelta(days=ctx.policy.risk.key_retention_days + 1)
    assert earlier_work_files_outcome(ctx, entries, later).passed  # the retention deletes per-unit files on purpose


def test_the_risk_step_refuses_an_edited_earlier_key_set_itself(published_q2, tmp_path, monkeypatch):
    """Without the check before it (a notebook, a review): the risk step reads the window's key set files
    only after comparing them with their entries."""
    root = copy_programme(published_q2, tmp_path / "programme")
    sign_as(root, monkeypatch)
    forget_pin(root / "ledger")
    ctx = stages.ReleaseContext(load_policy(root / "policy.yaml"), Period.parse(Q2), root / "out/work")
    ledger = Ledger(root / "ledger", root / "out/releases")
    q1 = ledger.releases("fixture")[:1]
    stages.assess_risk(ctx, ledger, ctx.area.unit_keys, q1)  # unedited: assessed
    _truncate_rows(_area(root, Q1) / KEYS)
    with pytest.raises(stages.WorkFilesMismatch, match=f"earlier_work_files failed: .*{Q1}/{KEYS}"):
        stages.assess_risk(ctx, ledger, ctx.area.unit_keys, q1)
    with pytest.raises(stages.WorkFilesMismatch, match="earlier_work_files failed"):
        stages.review_programme(ctx.policy, ledger, root / "out/work")


def test_an_entry_recorded_before_the_digests_is_read_unverified_and_says_so(programme):
    """Entries written before work files were recorded still read; the check accepts them and names them
    (they have nothing to compare with); the same entry with digests is compared."""
    ctx = stages.ReleaseContext(load_policy(programme / "policy.yaml"), Period.parse(Q2), programme / "out/work")
    signed = next(e for e in _entries(programme) if e["kind"] == "release")
    older = ReleaseEntry.from_entry({k: v for k, v in signed.items() if k != "work_files"})
    assert older.work_files is None
    _truncate_rows(_area(programme, Q1) / KEYS)
    outcome = earlier_work_files_outcome(ctx, [older], datetime.now(UTC))
    assert outcome.passed and f"({Q1}) are read unverified" in outcome.summary
    assert not earlier_work_files_outcome(ctx, [ReleaseEntry.from_entry(signed)], datetime.now(UTC)).passed


@pytest.mark.parametrize("work_files", [["a"], {"risk/x": 1}, "digest"])
def test_a_malformed_work_files_field_is_a_corrupt_entry(programme, work_files):
    signed = next(e for e in _entries(programme) if e["kind"] == "release")
    with pytest.raises(LedgerCorrupt, match="'work_files'"):
        ReleaseEntry.from_entry({**signed, "work_files": work_files})


def test_a_recorded_name_outside_the_work_area_fails(programme):
    ctx = stages.ReleaseContext(load_policy(programme / "policy.yaml"), Period.parse(Q2), programme / "out/work")
    signed = next(e for e in _entries(programme) if e["kind"] == "release")
    entry = ReleaseEntry.from_entry({**signed, "work_files": {"../../../policy.yaml": "0" * 64}})
    outcome = earlier_work_files_outcome(ctx, [entry], datetime.now(UTC))
    assert not outcome.passed and "outside its work area" in outcome.summary


def test_a_re_audit_of_a_published_release_keeps_the_intervals_its_entry_records(programme, capsys):
    """`spatial-release audit` of a published release solves from scratch; it used to write its intervals over
    the ones the publication was gated on, which the ledger entry now records (the next release would block)."""
    from spatial_release import cli

    intervals = _area(programme, Q1) / INTERVALS
    before = sha256_file(intervals)
    # the copy's policy is the one the release was made with, byte for byte (it names its traces relatively)
    argv = ["audit", str(programme / "out/releases/fixture" / Q1), "--policy", str(programme / "policy.yaml")]
    assert cli.main([*argv, "--work", str(programme / "out/work"), "--ledger", str(programme / "ledger")]) == 0
    assert "of the publication" in capsys.readouterr().out
    assert sha256_file(intervals) == before and _check(programme).passed


def test_ledger_verify_with_the_work_folder_names_an_edited_work_file(programme, capsys):
    """As `ledger verify --releases` does for a published file: an auditor's check of the work files."""
    from spatial_release import cli

    argv = ["ledger", "verify", "--ledger", str(programme / "ledger"), "--work", str(programme / "out/work")]
    assert cli.main(argv) == 0
    held = len([n for n in CARRIED if (_area(programme, Q1) / n).is_file()])
    assert f"{held} work file(s) under {(programme / 'out/work').resolve()} match" in capsys.readouterr().out
    _permute_names(_area(programme, Q1) / MEMBERSHIP, "unit")
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "does NOT verify" in err and f"{Q1}/{MEMBERSHIP} does not match the sha256" in err


# --- hidden variants: digests rewritten, files swapped or linked, a work area deleted ---------------------------


def test_an_edited_work_file_with_its_digest_rewritten_in_the_entry_blocks(programme, capsys):
    """Whoever edits a key set file and writes its new sha256 into the entry, re-hashing the entry and HEAD
    (everything but the signature, which needs the key), is refused by the ledger itself before any check."""
    from spatial_release.ledger import entry_hash

    keys = _area(programme, Q1) / KEYS
    _permute_names(keys, "name", pa.compute.is_null(pq.read_table(keys).column("k")))
    entries = _entries(programme)
    entries[0]["work_files"][KEYS] = sha256_file(keys)
    entries[0]["hash"] = entry_hash(entries[0])
    write_ledger_entries(programme, entries)
    assert release_period(programme, programme / "policy.yaml", Q2) == 1
    assert "signature does not verify" in capsys.readouterr().err
    assert not (programme / "out/releases/fixture" / Q2).exists()


def test_two_releases_work_files_swapped_fail_the_check_naming_both(published_q2, tmp_path, monkeypatch):
    """2018-Q1's and 2018-Q2's key set files put in each other's place (each a valid file of the programme):
    the next period's check names both."""
    root = copy_programme(published_q2, tmp_path / "programme")
    sign_as(root, monkeypatch)
    forget_pin(root / "ledger")
    first, second = _area(root, Q1) / KEYS, _area(root, Q2) / KEYS
    held = first.read_bytes()
    shutil.copyfile(second, first)
    second.write_bytes(held)
    ctx = stages.ReleaseContext(load_policy(root / "policy.yaml"), Period.parse("2018-Q3"), root / "out/work")
    releases = root / "out/releases"
    outcome = stages.check_earlier_work_files(ctx, Published(Ledger(root / "ledger", releases), releases))
    assert not outcome.passed and outcome.name == "earlier_work_files"
    named = " ".join(p["problem"] for p in outcome.offending)
    assert str(first) in named and str(second) in named and "ledger entry 1" in named


def test_a_work_file_linked_to_a_copy_elsewhere_is_held_to_the_copys_content(programme, tmp_path):
    """The key set file replaced by a link to a file of the right digest at another path passes (it holds
    what the entry records); the copy edited afterwards fails, naming the path the entry records."""
    keys = _area(programme, Q1) / KEYS
    elsewhere = tmp_path / "elsewhere.parquet"
    shutil.copyfile(keys, elsewhere)
    keys.unlink()
    keys.symlink_to(elsewhere)
    assert _check(programme).passed
    _truncate_rows(elsewhere)
    outcome = _check(programme)
    assert not outcome.passed and str(keys) in outcome.summary


def test_the_whole_work_area_of_an_earlier_release_deleted_within_retention_fails(programme):
    shutil.rmtree(_area(programme, Q1))
    outcome = _check(programme)
    assert not outcome.passed and "missing within its key retention" in outcome.summary
    assert outcome.figures["files_compared"] >= 4 and len(outcome.offending) == outcome.figures["files_compared"]
