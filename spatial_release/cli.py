"""`spatial-release`: a thin command line over the same Dagster job the UI runs, so the same checks block.

Exit codes (`spatial_release.errors`):
  0  published (or, for `audit` and `ledger verify`, passed)
  1  blocked: a blocking check, the risk gate or a guarantee refused publication, the period is already
     published, another run owns the work area, or the ledger does not verify (edited, forged, truncated)
  2  user error: a bad policy or a file it names, a missing or unreadable trace file or one without a
     mapped column, a malformed period, one of the other cadence, one not over yet or outside the policy's
     first_period/last_period, a folder that is not a release, an --out or --ledger that is a file, a
     --memory-limit DuckDB does not read (all checked before any work starts; a file only the run can
     judge, such as a zones file that is not a geometry, fails its step with exit 2 too)
  3  internal error: a bug or an environment failure (a full disk is named, with what the next run does);
     the cause is printed in one line, the traceback only with --debug (`spatial-release --debug release
     ...`), which also lets Dagster's console log print each failed step's stack
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from spatial_release.errors import Blocked, ExitCode, UserError, is_disk_full, kind_of
from spatial_release.ledger import forget_pin
from spatial_release.memory import avoid_hugepage_stalls
from spatial_release.period import Period
from spatial_release.run_outcome import Failure, RunOutcome

if TYPE_CHECKING:
    from spatial_release.release.record import RiskRecord
    from spatial_release.stages import ProtectionSummary, ReleaseRecord

DEMO_MARKER = ".spatial-release-demo"


def _settings_config(args: argparse.Namespace) -> dict:
    from spatial_release.defs.resources import ReleaseSettings

    defaults = ReleaseSettings()
    out = Path(args.out).resolve() if args.out else None
    return {
        "traces": [str(Path(t).resolve()) for t in (args.traces or [])],
        "releases_dir": str(out / "releases") if out else defaults.releases_dir,
        "work_dir": str(out / "work") if out else defaults.work_dir,
        "ledger_dir": str(Path(args.ledger).resolve()) if args.ledger else defaults.ledger_dir,
        "alerts_dir": str(out / "alerts") if out else defaults.alerts_dir,
    }


def _check_folder(option: str, folder: Path) -> None:
    """`folder` is a folder or can be made one: its nearest existing ancestor is a folder this process may
    write in. Checked before the run, which would otherwise fail after ingest with a Python error."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{option} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{option} {folder}: cannot write in {existing} (permission denied)")


def check_folders(args: argparse.Namespace, config: dict) -> None:
    """The folders of a release (`--out`, `--ledger`, and the four the settings resolve to, from --out or
    the environment) are folders that can be written, before any work starts."""
    for option in ("out", "ledger"):
        if getattr(args, option):
            _check_folder(f"--{option}", Path(getattr(args, option)).resolve())
    for key in ("releases_dir", "work_dir", "ledger_dir", "alerts_dir"):
        _check_folder(f"the {key.removesuffix('_dir')} folder", Path(config[key]))


def check_counting(counting: dict | None) -> None:
    """The DuckDB memory limit (`--memory-limit`, else SPATIAL_RELEASE_DUCKDB_MEMORY_LIMIT) is one DuckDB
    reads; asking DuckDB itself keeps the accepted forms exactly the counting step's."""
    import duckdb

    from spatial_release.defs.resources import CountingEngine

    given = (counting or {}).get("duckdb_memory_limit")
    limit = given or CountingEngine(**(counting or {})).duckdb_memory_limit
    if not limit:
        return
    con = duckdb.connect()
    try:
        con.execute("SET memory_limit = '" + limit.replace("'", "''") + "'")
    except duckdb.Error as exc:
        option = "--memory-limit" if given else "SPATIAL_RELEASE_DUCKDB_MEMORY_LIMIT"
        problem = str(exc).splitlines()[0].split(": ", 1)[-1]
        raise UserError(f"{option} {limit!r} is not a memory size such as 2GB or 512MB ({problem})") from None
    finally:
        con.close()


def _failures(result) -> tuple[Failure, ...]:
    """Every failed blocking check with its offending rows (blocked), and every failed step with its reason:
    a step that refused on purpose (dg.Failure) is blocked; otherwise its root cause's class says the kind."""
    failures = []
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            meta = {k: v.value for k, v in evaluation.metadata.items()}
            failures.append(
                Failure(
                    "check",
                    evaluation.check_name,
                    meta.get("summary", ""),
                    tuple(meta.get("offending") or ()),
                    evaluation.asset_key.to_user_string(),
                )
            )
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            data = event.step_failure_data
            refused = data.user_failure_data
            if refused is not None and refused.description:
                meta = {k: v.value for k, v in refused.metadata.items()}
                failures.append(Failure("step", event.step_key, refused.description, tuple(meta.get("offending") or ())))
                continue
            cause = _innermost(data.error)
            checked = cause is not None and cause.cls_name == "DagsterAssetCheckFailedError"
            if checked and any(f.kind == "check" for f in failures):
                continue  # the step that stops on a failed blocking check: that check is named above
            kind = ExitCode.INTERNAL if cause is None else (ExitCode.BLOCKED if checked else kind_of(cause.cls_name))
            failures.append(
                Failure(
                    "step",
                    event.step_key,
                    root_cause(data.error),
                    exit_code=kind,
                    traceback=data.error.to_string() if data.error else "",
                )
            )
    return tuple(failures)


def _innermost(error):
    while error is not None and error.cause is not None:
        error = error.cause
    return error


def root_cause(error) -> str:
    """The innermost error message: Dagster wraps the domain error that names the file and field."""
    error = _innermost(error)
    return error.message.strip() if error is not None else ""


def _named_disk_full(failure: Failure, config: dict) -> Failure:
    """A step that failed on a full disk, named as such with what the next run does about it (an OSError's
    class and errno said nothing of either; the run's alert says the same, `defs.alerts`)."""
    if failure.kind != "step" or not is_disk_full(failure.message):
        return failure
    if failure.name.endswith("published_release"):
        where = (
            f"while publishing (the release folder under {config['releases_dir']}, its ledger entry at "
            f"{config['ledger_dir']})"
        )
        then = (
            "the next run finishes a publication the ledger recorded (and reports the period published) or, "
            "if it recorded none, publishes afresh"
        )
    else:
        where, then = f"in step {failure.name} (work area under {config['work_dir']})", "nothing was published"
    return replace(
        failure,
        message=f"no space left on device {where}: {failure.message}. Free space on that "
        f"device and run the release again: {then}",
    )


def run_release(
    policy: str,
    period: str,
    traces: list[str] | None = None,
    out: str | None = None,
    ledger: str | None = None,
    counting: dict | None = None,
    debug: bool = False,
) -> RunOutcome:
    """Run the release of `policy` for one period in process, with the same jobs the UI runs (its
    programme's release job, then its publish job), and return its RunOutcome (published, release folder,
    record, failures).

    policy: the policy file. period: `2018-Q1`, or `2018-01` for a policy with `period: month`.
    traces: trace files or globs (default: the policy's `source.paths`, or its synthetic generator).
    out: folder for releases/, work/ and alerts/ (default: the `settings` resource's defaults).
    ledger: the ledger folder (default: the project's `ledger/`). counting: the counting engine resource's
    config (engine, spark_master, duckdb_memory_limit). debug: print each failed step's stack on the console
    (otherwise the first line of its error only).

    Before the run starts, a bad policy, a malformed period or one of the other cadence, a period not over
    or outside the policy's first_period/last_period, a missing or unreadable trace file, an output or
    ledger folder that is a file and a memory limit DuckDB does not read raise a UserError (nothing is written).
    What stops the run itself is in the outcome's `failures`, never raised."""
    from spatial_release import stages
    from spatial_release.defs.catalogue import programme_for
    from spatial_release.defs.execution import environment_instance, execute_release
    from spatial_release.defs.partitions import check_among_partitions, check_declared_bounds
    from spatial_release.defs.resources import ReleaseSettings
    from spatial_release.release import release_dir
    from spatial_release.traces.ingest import check_trace_files

    args = argparse.Namespace(policy=policy, traces=traces, out=out, ledger=ledger)
    config = _settings_config(args)
    parsed = Period.parse(period)
    programme = programme_for(args.policy)  # a bad policy is a usage error, reported before any run starts
    loaded = programme.programme.policy
    loaded.check_period(parsed)  # so is a period of the other cadence
    check_declared_bounds(loaded, parsed)  # and one not over, or outside the policy's first/last period
    if not traces:  # the policy's own files: the period must be one of the programme's periods they make
        check_among_partitions(loaded, parsed)
    check_trace_files(loaded, parsed, config["traces"])  # so is a missing or unreadable trace file
    check_folders(args, config)  # and an --out or --ledger that is a file
    check_counting(counting)  # and a memory limit the counting step would refuse
    try:  # a published period is refused before any run: no run, no red candidate in the UI
        stages.refuse_if_published(
            stages.ReleaseContext(loaded, parsed, Path(config["work_dir"])),
            ReleaseSettings(**config).ledger(),
            Path(config["releases_dir"]),
        )
    except stages.AlreadyPublished as published:
        return RunOutcome(False, failures=(Failure("step", "validated_pings", str(published)),))
    # the period becomes a partition of the programme (in the UI too, with DAGSTER_HOME set) as it is released
    run = execute_release(programme, parsed.label, config, counting, environment_instance(), tracebacks=debug)
    if not run.success:
        failures = tuple(_named_disk_full(f, config) for result in run.results for f in _failures(result))
        if not failures and run.publish is not None:  # another run published the period in between
            failures = (
                Failure(
                    "step",
                    "published_release",
                    f"{loaded.name} {parsed.label} was published by another run meanwhile; nothing written",
                ),
            )
        ingest = stages.WorkArea.for_release(Path(config["work_dir"]), loaded, parsed).ingest
        files = tuple(stages.IngestSummary.read(ingest).files) if (ingest / stages.IngestSummary.FILE).exists() else ()
        return RunOutcome(False, failures=failures, alerts=run.alerts, input_files=files)
    target = release_dir(Path(config["releases_dir"]), loaded, parsed)
    # The operator's summary also shows internal figures (withheld cells and units) from the work area;
    # they are printed to the operator's terminal, never written beside the release.
    area = stages.WorkArea.for_release(Path(config["work_dir"]), loaded, parsed)
    return RunOutcome(True, target, stages.ReleaseRecord.read(target), internal=stages.read_manifest(area).summary)


def _privacy_summary(record: ReleaseRecord, risk: RiskRecord) -> list[str]:
    """A DP release's lines: the mechanism (its guarantee replaces the k floor and the audit) and the budget."""
    p = record.privacy or {}
    loss = f"epsilon {p.get('epsilon'):.4g}" if p.get("accounting") == "approx" else f"rho {p.get('rho'):.4g}"
    return [
        f"privacy   OpenDP {p.get('mechanism')}: {loss}, delta {p.get('delta'):.3g}, scale {p.get('scale'):.4g} "
        f"(95 % of the noise within +/-{p.get('interval95'):.3g}), threshold {p.get('threshold')}; the k floor "
        "and the LP audit are replaced by the mechanism's guarantee",
        f"budget    {risk.status}: {risk.reason}",
    ]


def _summary(record: ReleaseRecord, internal: ProtectionSummary, folder: Path) -> str:
    from spatial_release.report.page import uniqueness_label

    counts, inputs, audit, risk, entry = record.counts, record.input, record.audit, record.risk, record.ledger_entry
    if risk is not None and entry is not None and record.privacy is not None:
        return "\n".join(
            [
                f"release   {folder}",
                f"dataset   {record.dataset} {record.period} (policy v{record.policy.version}, differential privacy "
                f"over {record.unit}, {record.measure}, buckets {record.bucket})",
                f"cells     {counts.published_cells} published, margins {counts.published_margins} published",
                f"checks    {', '.join(f'{k}: {v}' for k, v in record.checks.items())}",
                *_privacy_summary(record, risk),
                f"ledger    entry {entry[:16]}",
            ]
        )
    if audit is None or risk is None or entry is None:
        raise ValueError(f"{folder}: a published release's record has its audit, risk and ledger entry")
    return "\n".join(
        [
            f"release   {folder}",
            f"dataset   {record.dataset} {record.period} (policy v{record.policy.version}, "
            f"k={record.k} over {record.unit}, {record.measure}, buckets {record.bucket})",
            f"input     {inputs.pings_read} pings read, {inputs.pings_rejected} quarantined, "
            f"{inputs.pings_outside_geometry} outside the geometry",
            f"cells     {counts.published_cells} published (smallest count {counts.smallest_published_count}), "
            f"{internal.primary_cells} withheld below k, {internal.secondary_cells} withheld as complements, "
            f"{counts.structural_zero_cells_published} structural zeros",
            f"margins   {counts.published_margins} published, {internal.withheld_margins} withheld",
            f"withheld  {internal.unit_counts_withheld} of {internal.unit_counts_total} unit counts at the "
            f"{record.bucket} bucket ({internal.share_withheld:.2%})"
            + (
                ", some shown at a coarser rung (the suppression budget counts those as shown)"
                if any("@" in level for level in counts.published_by_level or {})
                else ""
            )
            + "; withheld figures are internal: release.json does not carry them",
            f"checks    {', '.join(f'{k}: {v}' for k, v in record.checks.items())}",
            f"audit     {'passed' if audit.passed else 'FAILED'}: {audit.criterion}",
            f"risk      {risk.status}: worst zone {risk.worst_zone} {risk.release_figure:.4f} ({risk.measure}), "
            f"cumulative {risk.cumulative:.4f}"
            + (f"; {uniqueness_label(risk)}: {risk.upper_bound:.4f}" if risk.upper_bound is not None else ""),
            *([f"warning   {risk.warning}"] if risk.warning else []),
            f"ledger    entry {entry[:16]}",
        ]
    )


def _counting_config(args: argparse.Namespace) -> dict:
    config = {"engine": args.engine}
    if args.spark_master:
        config["spark_master"] = args.spark_master
    if args.memory_limit:
        config["duckdb_memory_limit"] = args.memory_limit
    return config


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=["duckdb", "spark"],
        default=os.environ.get("SPATIAL_RELEASE_ENGINE", "duckdb"),
        help="counting engine (default duckdb; spark needs pip install '.[spark]' and Java)",
    )
    parser.add_argument("--spark-master", help="Spark master URL, e.g. spark://host:7077 (default local[*])")
    parser.add_argument("--memory-limit", help="DuckDB memory limit for counting, e.g. 2GB (it spills past it)")


def _file_legend(outcome: RunOutcome) -> list[str]:
    """For the operator's terminal only: which file each "input file i of n" in the messages is."""
    text, n = "\n".join(outcome.messages), len(outcome.input_files)
    return [
        f"input file {i} of {n} is {path}"
        for i, path in enumerate(outcome.input_files, 1)
        if f"input file {i} of {n}" in text
    ]


def _report(outcome: RunOutcome, debug: bool) -> int:
    """Print the summary of a published release, or why the run did not publish; return the exit code."""
    if outcome.published:
        record, internal, folder = outcome.record, outcome.internal, outcome.release_dir
        assert record is not None and internal is not None and folder is not None, "a published run has all three"
        print(_summary(record, internal, folder))
    else:
        print("\n".join(outcome.messages), file=sys.stderr)
        print("\n".join(_file_legend(outcome)), file=sys.stderr)
        for failure in outcome.failures:
            if debug and failure.traceback:
                print(failure.traceback, file=sys.stderr)
    return outcome.exit_code


def cmd_release(args: argparse.Namespace) -> int:
    """`release`: run the release job for --policy and --period (see run_release); exit 0 published,
    1 blocked, 2 a user error, 3 an internal failure."""
    return _report(
        run_release(args.policy, args.period, args.traces, args.out, args.ledger, _counting_config(args), args.debug),
        args.debug,
    )


def _project_root() -> Path:
    return Path(__file__).resolve().parents[1]


def cmd_demo(args: argparse.Namespace) -> int:
    """`demo`: generate synthetic traces and publish policies/demo.yaml's 2018-Q1 into --out (releases/,
    work/, alerts/ and its own ledger/), with the engine options of `release`. --out is replaced only if an
    earlier demo made it (exit 2 otherwise); exit codes as `release`."""
    out = Path(args.out).resolve()
    if out.exists():
        if not (out / DEMO_MARKER).exists():
            print(f"{out} exists and was not made by `spatial-release demo`; choose another --out", file=sys.stderr)
            return 2
        # the demo regenerates everything (a published release is never overwritten): its ledger is deleted on
        # purpose, so its pin goes too, or the new empty ledger would read as a rollback
        forget_pin(out / "ledger")
        shutil.rmtree(out)
    try:
        out.mkdir(parents=True)
    except OSError as exc:  # a folder the user cannot write: their mistake, not ours
        raise UserError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    (out / DEMO_MARKER).write_text("made by spatial-release demo\n")
    policy = _project_root() / "policies" / "demo.yaml"
    print(f"generating synthetic traces and publishing {policy.name} 2018-Q1 into {out} ...")
    started = time.perf_counter()
    # the demo keeps its own ledger beside its releases: the project's ledger/ is for real programmes
    outcome = run_release(str(policy), "2018-Q1", None, str(out), str(out / "ledger"), _counting_config(args), args.debug)
    code = _report(outcome, args.debug)
    if outcome.published:
        print(f"wall time {time.perf_counter() - started:.1f} s")
    return code


def cmd_generate(args: argparse.Namespace) -> int:
    """`generate`: write synthetic pings (--persons, --seed, --start, --days) to --out, CSV or Parquet by
    its suffix (`traces.synthetic`)."""
    from datetime import date

    from spatial_release.traces.synthetic import SyntheticConfig, generate_pings, write_pings

    try:
        start = date.fromisoformat(args.start)
    except ValueError:
        raise UserError(f"--start {args.start!r} is not a date like 2018-01-01") from None
    config = SyntheticConfig(persons=args.persons, seed=args.seed, start=start, days=args.days)
    frame = generate_pings(config)
    try:
        write_pings(frame, Path(args.out))
    except OSError as exc:
        raise UserError(f"--out {args.out}: cannot write the traces ({exc.strerror})") from None
    print(f"wrote {len(frame)} pings of {args.persons} persons to {args.out}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """`audit RELEASE_DIR`: re-run the attacker LP (Fischetti and Salazar 2001, `suppression.audit`) on a
    published folder against the true counts kept in the work area; under differential privacy, which the LP
    audit does not apply to, verify the mechanism recorded against the policy, unselected keys absent, no
    identifiers and the inputs withheld instead (`stages.audit_dp_release`). --policy: the policy file (default
    policies/<dataset>.yaml; its sha256 must be the record's, else exit 2); --work: the work folder (default
    beside releases/); --ledger: for the releases of `suppression.audit_with` datasets. Exit 0 passed, 1
    failed or the files do not match their record, 2 not a release folder or no true counts."""
    from spatial_release import stages
    from spatial_release.policy import load_policy

    folder = Path(args.release_dir).resolve()
    if not (folder / "release.json").is_file():
        raise UserError(f"{folder}: not a release folder (it has no release.json)")
    try:
        record = stages.verify_release_files(folder)
    except stages.ReleaseTampered as exc:
        print(f"audit FAILED: {exc}", file=sys.stderr)
        return 1
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        print(f"audit FAILED: {folder / 'release.json'} is not a readable release record (altered?)", file=sys.stderr)
        return 1
    policy = load_policy(args.policy or _project_root() / "policies" / f"{record.dataset}.yaml")
    if policy.sha256 != record.policy.sha256:
        print(
            f"error: {policy.path} is not the policy this release was made with (sha256 {record.policy.sha256[:12]}...)",
            file=sys.stderr,
        )
        return 2
    work = Path(args.work).resolve() if args.work else folder.parents[2] / "work"
    ctx = stages.ReleaseContext(policy, Period.parse(record.period), work)
    area = ctx.area
    if not (area.counts / "cell_counts.parquet").exists():
        print(f"error: no true counts under {area.counts}; give --work", file=sys.stderr)
        return 2
    if policy.protection.method == "dp":
        return _audit_dp(ctx, folder)
    from spatial_release.defs.resources import ReleaseSettings
    from spatial_release.history import expired
    from spatial_release.ledger import Ledger
    from spatial_release.suppression.verdicts import AuditSummary

    ledger = Ledger(Path(args.ledger).resolve() if args.ledger else Path(ReleaseSettings().ledger_dir))
    published = stages.Published(ledger, folder.parents[1])
    # Past its key retention a release's per-unit artefacts were deleted on purpose: re-auditing it must not
    # write its per-primary intervals back.
    entry = ledger.recorded(record.dataset, record.period) if ledger.folder.is_dir() else None
    retained = entry is None or policy.risk is None or not expired(policy, entry, datetime.now(UTC))
    # The intervals the publication was gated on are recorded in its ledger entry (stages.carried): a re-audit
    # that wrote its own over them would block every later release of the dataset.
    intervals = area.root / "audit_intervals.internal.parquet"
    kept = intervals.exists()
    outcome = stages.check_suppression_audit(ctx, release=folder, published=published, keep_intervals=retained and not kept)
    internal = AuditSummary.read(area.root)  # the operator's own figures
    print(
        f"audit of {folder}: {'PASSED' if outcome.passed else 'FAILED'}: {outcome.summary} "
        f"({internal.primaries_audited} withheld primaries audited in {internal.components} components, "
        f"{internal.lps_solved} LPs)"
    )
    for row in outcome.offending[:20]:
        print(f"    offending: {json.dumps(row, default=str)}")
    if not retained:
        print("per-primary intervals not kept: the release is past its key retention")
    elif kept:
        print(f"per-primary intervals of the publication (internal, never publish; not rewritten): {intervals}")
    else:
        print(f"per-primary intervals (internal, never publish): {intervals}")
    return 0 if outcome.passed else 1


def _audit_dp(ctx, folder: Path) -> int:
    """`audit` of a DP release: what its guarantee rests on (`stages.audit_dp_release`), not the LP audit."""
    from spatial_release import stages

    outcomes = stages.audit_dp_release(ctx, folder)
    passed = all(o.passed for o in outcomes)
    print(
        f"audit of {folder}: {'PASSED' if passed else 'FAILED'}: differential privacy release; checks "
        + ", ".join(f"{o.name} {'passed' if o.passed else 'FAILED'}" for o in outcomes)
        + "; the k-anonymity LP audit does not apply (no figure is withheld for being below k: the mechanism's "
        "guarantee replaces it)"
    )
    for outcome in outcomes:
        if not outcome.passed:
            print(f"    {outcome.name}: {outcome.summary}")
            for row in outcome.offending[:20]:
                print(f"    offending: {json.dumps(row, default=str)}")
    return 0 if passed else 1


def cmd_ledger_verify(args: argparse.Namespace) -> int:
    """Chain, signatures (under the trusted public key only) and HEAD; with --releases, the cross-check of
    the release folders against the ledger; with --work, the work files later releases read against the
    sha256 their entries record. Any problem, malformed files included, is "does NOT verify" with the
    entry's line (exit 1), never a traceback."""
    from spatial_release.defs.resources import ReleaseSettings
    from spatial_release.ledger import LedgerError, check_releases, read_ledger, trusted_public_key
    from spatial_release.stages.carried import WorkFilesMismatch, verify_work_folders

    folder = Path(args.ledger or ReleaseSettings().ledger_dir).resolve()
    if not folder.is_dir():  # a mistyped path must not read as "verifies: 0 entries"
        print(f"error: {folder} is not a ledger folder (no such directory)", file=sys.stderr)
        return 2
    try:
        key = trusted_public_key(Path(args.public_key) if args.public_key else None)
        entries = read_ledger(folder, key)
        if args.releases:
            check_releases(entries, Path(args.releases).resolve())
        compared = verify_work_folders(entries, Path(args.work).resolve()) if args.work else 0
    except (LedgerError, WorkFilesMismatch, OSError) as exc:
        print(f"ledger {folder} does NOT verify: {exc}", file=sys.stderr)
        return 1
    checked = f", every release folder under {Path(args.releases).resolve()} matches" if args.releases else ""
    if args.work:
        checked += f", {compared} work file(s) under {Path(args.work).resolve()} match their entries"
    print(f"ledger {folder} verifies: {len(entries)} entries, head {entries[-1]['hash'][:16] if entries else '-'}{checked}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The `spatial-release` argument parser: demo, release, audit, ledger verify, generate; `--debug`
    before or after the command."""
    parser = argparse.ArgumentParser(prog="spatial-release", description=__doc__.splitlines()[0])
    debug_help = "print the traceback of an internal error (exit 3)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    common = argparse.ArgumentParser(add_help=False)  # --debug after the command too; SUPPRESS keeps the top one
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="generate sample traces and publish a release", parents=[common])
    demo.add_argument("--out", default="demo-output", help="folder for traces, work files and the release")
    _add_engine_options(demo)
    demo.set_defaults(func=cmd_demo)

    release = sub.add_parser("release", help="run the release job for one policy and period", parents=[common])
    release.add_argument("--policy", required=True)
    release.add_argument(
        "--period", required=True, help="a quarter such as 2018-Q1 (or a month, 2018-01, for policies with period: month)"
    )
    release.add_argument("--traces", nargs="+", help="trace files or globs (default: the policy's source.paths)")
    release.add_argument("--out", help="output folder: releases/ and work/ go under it")
    release.add_argument("--ledger", help="ledger folder")
    _add_engine_options(release)
    release.set_defaults(func=cmd_release)

    audit = sub.add_parser(
        "audit",
        help="independent audit of a release folder (the LP audit; under DP, the mechanism's record)",
        parents=[common],
    )
    audit.add_argument("release_dir")
    audit.add_argument("--policy", help="policy file (default: policies/<dataset>.yaml, sha256 checked)")
    audit.add_argument("--work", help="work folder holding the true counts (default: <out>/work beside releases/)")
    audit.add_argument("--ledger", help="ledger folder, for the releases of suppression.audit_with datasets")
    audit.set_defaults(func=cmd_audit)

    ledger = sub.add_parser("ledger", help="the release ledger")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True)
    verify = ledger_sub.add_parser(
        "verify", help="verify the chain and signatures; report the first bad entry", parents=[common]
    )
    verify.add_argument("--ledger", help="ledger folder (default: the project's ledger/)")
    verify.add_argument(
        "--public-key",
        help="the trusted Ed25519 public key (PEM); default "
        "$SPATIAL_RELEASE_PUBLIC_KEY, else the .pub beside the signing key",
    )
    verify.add_argument("--releases", help="releases folder to cross-check against the ledger")
    verify.add_argument(
        "--work", help="work folder whose files later releases read (key sets, memberships, intervals) to check"
    )
    verify.set_defaults(func=cmd_ledger_verify)

    generate = sub.add_parser("generate", help="write synthetic ping traces (CSV or Parquet by suffix)", parents=[common])
    generate.add_argument("--out", required=True)
    generate.add_argument("--persons", type=int, default=3000)
    generate.add_argument("--seed", type=int, default=20180101)
    generate.add_argument("--start", default="2018-01-01")
    generate.add_argument("--days", type=int, default=90)
    generate.set_defaults(func=cmd_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; return its exit code (see the module docstring). A UserError prints `error: ...`
    (2), a Blocked `blocked: ...` (1), anything else `internal error: ...` with its cause (3), in one line;
    `--debug` adds the traceback."""
    args = build_parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    avoid_hugepage_stalls()  # the command line's process is the pipeline's own (spatial_release.memory)
    try:
        return args.func(args)
    except Blocked as exc:  # an untrustworthy ledger or a second release: blocked, not usage
        print(f"blocked: {exc}", file=sys.stderr)
        return exc.exit_code
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the command line's last resort: the cause, not a traceback
        if debug:
            traceback.print_exc()
        print(
            f"internal error: {type(exc).__name__}: {str(exc).strip() or repr(exc)}"
            f"{'' if debug else ' (run with --debug for the traceback)'}",
            file=sys.stderr,
        )
        return ExitCode.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
