"""The error hierarchy and the command line's exit codes: a user error is 2, a refusal 1, anything else 3
with its cause in one line (the traceback only with --debug); the job runner returns a typed RunOutcome."""

from pathlib import Path
from typing import cast

import pytest
from support.releases import release, release_argv

from spatial_release import cli
from spatial_release.errors import Blocked, ExitCode, UserError, kind_of
from spatial_release.release.record import ReleaseRecord
from spatial_release.run_outcome import Failure, RunOutcome


def test_domain_errors_have_their_kind():
    from spatial_release.geometry.zones import ZoneFileError
    from spatial_release.ledger import AlreadyRecorded, LedgerCorrupt, LedgerKeyError, ReleasesMismatch
    from spatial_release.period import Period
    from spatial_release.policy import PolicyError
    from spatial_release.policy.zeros import ZerosFileError
    from spatial_release.risk.landscape import LandscapeError
    from spatial_release.traces.ingest import IngestError

    for user in (PolicyError, IngestError, ZerosFileError, ZoneFileError, LandscapeError):
        assert issubclass(user, UserError) and issubclass(user, ValueError)  # callers catching ValueError still do
        assert kind_of(user("x")) == kind_of(user.__name__) == ExitCode.USER_ERROR
    for refused in (LedgerCorrupt, LedgerKeyError, ReleasesMismatch, AlreadyRecorded):
        assert issubclass(refused, Blocked) and kind_of(refused.__name__) == ExitCode.BLOCKED
    assert kind_of(LedgerCorrupt(0, "edited")) == ExitCode.BLOCKED  # a forged ledger blocks; it is no usage error
    assert kind_of(KeyError("x")) == kind_of("KeyError") == kind_of("NoSuchError") == ExitCode.INTERNAL
    with pytest.raises(UserError):
        Period.parse("2018-Q5")


def test_an_internal_error_exits_3_with_its_cause_and_no_traceback(monkeypatch, capsys):
    def broken(args):
        raise KeyError("n_devices")

    monkeypatch.setattr(cli, "cmd_generate", broken)
    assert cli.main(["generate", "--out", "x.parquet"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("internal error: KeyError: 'n_devices'") and "Traceback" not in err
    assert len(err.splitlines()) == 1
    for argv in (["--debug", "generate", "--out", "x.parquet"], ["generate", "--out", "x.parquet", "--debug"]):
        assert cli.main(argv) == 3
        assert "Traceback" in capsys.readouterr().err


def test_user_errors_and_refusals_outside_a_run(tmp_path, capsys):
    assert cli.main(["generate", "--out", str(tmp_path / "x.parquet"), "--start", "2018-02-30"]) == 2
    assert cli.main(["audit", str(tmp_path / "no-release")]) == 2
    assert capsys.readouterr().err.count("error: ") == 2


def test_run_outcome_exit_code_and_messages():
    stand_in = cast(ReleaseRecord, {"k": 5})  # the outcome hands its record back untouched, whatever it is
    published = RunOutcome(True, Path("/r/demo/2018-Q1"), stand_in)
    assert published.exit_code == 0 and published.messages == ["published /r/demo/2018-Q1"]
    ok, messages, record = published  # a caller that needs only these unpacks it
    assert ok and record == {"k": 5} and messages == published.messages
    check = Failure("check", "k_floor", "1 cell below k", ({"cell_id": "a"},), "protected_table")
    assert RunOutcome(False, failures=(check,)).exit_code == ExitCode.BLOCKED
    assert RunOutcome(False, failures=(check,)).messages == [
        "BLOCKED by check 'k_floor' on 'protected_table': 1 cell below k",
        '    offending: {"cell_id": "a"}',
    ]
    bug = Failure("step", "cell_counts", "KeyError: 'x'", exit_code=ExitCode.INTERNAL)
    assert RunOutcome(False, failures=(check, bug)).exit_code == ExitCode.INTERNAL
    assert RunOutcome(False).exit_code == ExitCode.INTERNAL  # failed without saying why


def test_a_policy_with_no_trace_source_is_a_user_error_before_the_run(tmp_path, capsys):
    from support.fixture import policy_dict, write_policy

    data = policy_dict("unused")
    data["source"]["paths"] = []  # no paths, no traces given, no synthetic section
    code = release(write_policy(tmp_path, data), tmp_path)
    err = capsys.readouterr().err
    assert code == 2 and "source.paths" in err and "source.synthetic" in err, err
    assert not (tmp_path / "out" / "work").exists()  # nothing started


@pytest.mark.slow
def test_a_bug_inside_the_run_exits_3_naming_the_step(tmp_path, capsys, monkeypatch):
    from support.fixture import fixture_pings, policy_dict, write_policy

    from spatial_release import guarantees

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(guarantees, "check_structural_zeros", broken)
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    policy = write_policy(tmp_path, policy_dict(str(traces)))
    outcome = cli.run_release(str(policy), "2018-Q1", out=str(tmp_path / "out"), ledger=str(tmp_path / "ledger"))
    assert not outcome.published and outcome.release_dir is None and outcome.exit_code == ExitCode.INTERNAL
    [bug] = [f for f in outcome.failures if f.exit_code == ExitCode.INTERNAL]
    assert bug.kind == "step" and "a bug" in bug.message and "ZeroDivisionError" in bug.traceback
    assert not (tmp_path / "out" / "releases" / "fixture" / "2018-Q1").exists()


def test_an_output_folder_that_cannot_be_written_is_a_user_error(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert cli.main(["generate", "--out", str(blocker / "pings.parquet"), "--persons", "5", "--days", "1"]) == 2
    assert cli.main(["demo", "--out", str(blocker / "demo")]) == 2
    err = capsys.readouterr().err
    assert err.count("error: --out") == 2 and "Traceback" not in err


def _fixture_release(tmp_path: Path, zeros: bool = False) -> list[str]:
    """`release` arguments for the fixture policy and traces in `tmp_path` (with `zeros`, a structural-zeros
    list naming a cell that holds units: the `structural_zeros_hold` check blocks)."""
    from support.fixture import CELL_A, cell_id, fixture_pings, policy_dict, write_policy

    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    data = policy_dict(str(traces))
    if zeros:
        (tmp_path / "zeros.csv").write_text(f"cell_id\n{cell_id(CELL_A)}\n")
        data["suppression"]["zeros"] = "zeros.csv"
    policy = write_policy(tmp_path, data)
    return release_argv(policy, tmp_path)


def _without(argv: list[str], option: str) -> list[str]:
    i = argv.index(option)
    return argv[:i] + argv[i + 2 :]


def test_bad_folders_memory_limits_and_years_are_user_errors_before_any_work(tmp_path, capfd):
    """A file for a folder, a memory limit that is no size and a year out of range must not run ingest and
    then exit 3 with Python frames (or raise a blocked_release alert). Each is a usage error (2), in one line,
    before anything is written."""
    argv = _fixture_release(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    cases = {
        "--out": [*_without(argv, "--out"), "--out", str(a_file)],
        "--ledger": [*_without(argv, "--ledger"), "--ledger", str(a_file)],
        "--memory-limit": [*argv, "--memory-limit", "lots"],
        "0000-Q1": [*_without(argv, "--period"), "--period", "0000-Q1"],
        "9999-Q4": [*_without(argv, "--period"), "--period", "9999-Q4"],
    }
    for name, case in cases.items():
        assert cli.main(case) == ExitCode.USER_ERROR, name
        err = capfd.readouterr().err
        assert err.startswith("error: ") and name in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "ledger").exists()


@pytest.mark.slow
def test_a_blocked_run_prints_no_stack_trace(tmp_path, capfd):
    """A blocked run prints no `Stack Trace:` blocks of Dagster's on stderr; only --debug shows them. The
    blocking check is named once, with its offending cell."""
    argv = _fixture_release(tmp_path, zeros=True)
    assert cli.main(argv) == ExitCode.BLOCKED
    err = capfd.readouterr().err
    assert "Stack Trace:" not in err and "Traceback" not in err and 'File "' not in err, err
    assert "BLOCKED by check 'structural_zeros_hold'" in err and "DagsterAssetCheckFailedError" not in err


@pytest.mark.slow
def test_a_corrupt_parquet_page_is_a_user_error_without_frames(tmp_path, capfd):
    """A Parquet file whose footer reads but whose data page does not exits 2, naming the file, with no
    Python frames on stderr."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from support.fixture import fixture_pings

    argv = _fixture_release(tmp_path)
    traces = tmp_path / "traces.parquet"
    pq.write_table(pa.Table.from_pandas(fixture_pings()), traces)
    raw = bytearray(traces.read_bytes())
    page = pq.ParquetFile(traces).metadata.row_group(0).column(0).data_page_offset
    raw[page + 20 : page + 60] = b"\xff" * 40  # the first column's data page; the footer stays readable
    traces.write_bytes(bytes(raw))
    assert cli.main([*argv, "--traces", str(traces)]) == ExitCode.USER_ERROR
    err = capfd.readouterr().err
    assert "Stack Trace:" not in err and "Traceback" not in err and 'File "' not in err, err
    assert f"{traces}: cannot read as parquet" in err


@pytest.mark.slow
def test_a_full_disk_at_the_ledger_append_is_named_and_the_next_run_finishes(tmp_path, capfd, monkeypatch):
    """ENOSPC after the ledger's entries are written, before HEAD: no traceback, and no alert that says
    "withdraw the release". The exit names the full disk and the ledger, the alert says what the next run
    does, and the next run finishes the release."""
    import errno
    import json

    from spatial_release.ledger import chain

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    argv = _fixture_release(tmp_path)
    monkeypatch.setattr(chain, "_write_head", full)
    assert cli.main(argv) == ExitCode.INTERNAL
    err = capfd.readouterr().err
    assert "Stack Trace:" not in err and "Traceback" not in err, err
    assert "no space left on device while publishing" in err and str(tmp_path / "ledger") in err
    assert "the next run finishes" in err
    [alert] = [json.loads(p.read_text()) for p in (tmp_path / "out" / "alerts").glob("*.json")]
    assert alert["kind"] == "disk_full" and alert["published"] is False
    assert "the ledger records the release" in alert["reason"]
    assert not any("withdraw" in option for option in alert["options"])
    monkeypatch.undo()
    assert cli.main(argv) == ExitCode.BLOCKED  # space is back: the publication is finished, and refused again
    assert "already published" in capfd.readouterr().err
    assert (tmp_path / "out" / "releases" / "fixture" / "2018-Q1" / "release.json").is_file()


@pytest.mark.slow
def test_an_alert_names_neither_a_trace_file_nor_a_unit_id(tmp_path):
    """An alert must quote neither a trace path nor a unit id (`Alert.build(never=...)` is given the ids).
    A per-device export `bike-e0.parquet` (e0 is a device of the fixture) whose data page is corrupt stops
    the ingest: the alert (file, e-mail and Slack text) names the file by position only."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from support.fixture import fixture_pings

    argv = _fixture_release(tmp_path)
    traces = tmp_path / "bike-e0.parquet"
    pq.write_table(pa.Table.from_pandas(fixture_pings()), traces)
    raw = bytearray(traces.read_bytes())
    page = pq.ParquetFile(traces).metadata.row_group(0).column(0).data_page_offset
    raw[page + 20 : page + 60] = b"\xff" * 40
    traces.write_bytes(bytes(raw))
    assert cli.main([*argv, "--traces", str(traces)]) != 0
    alerts = list((tmp_path / "out" / "alerts").glob("*.json"))
    assert alerts, "the failed ingest sent no alert: the check below would prove nothing"
    for path in alerts:
        text = path.read_text()
        assert "bike-e0" not in text and '"e0"' not in text, text
        assert "input file 1 of 1" in json.loads(text)["reason"]


def test_alert_masks_unit_ids_inside_words_and_trace_files_by_position():
    from spatial_release.alerts import Alert, mask_files

    reason = mask_files(
        "no pings were read from ['/data/bike-29590.csv', '/data/b.csv']", ["/data/bike-29590.csv", "/data/b.csv"]
    )
    assert "29590" not in reason and "input file 1 of 2" in reason and "input file 2 of 2" in reason
    alert = Alert.build(
        "blocked_release", "ds", "2018-Q1", "rejected_share", "device a0 and dev-29590 and a01", never={"a0", "29590"}
    )
    assert "a0 " not in alert.reason and "29590" not in alert.reason and "a01" in alert.reason
