"""Audit once, certify after: the audit gives the same verdicts with 1 and N
workers, the protection step's certificate verifies without an LP, and a tampered certificate is never
trusted: (a) a witness point that violates a published equation, (b) an input changed after the audit,
(c) a primary missing from the certificate, (d) a bound widened beyond its witness; each makes the
verifier re-solve, and on a pattern that leaks, fail."""

import json
from dataclasses import replace

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
from shapely.geometry import box
from support.fixture import CELL_B, CELL_C, cell_id
from support.tables import INPUTS, assert_same_pattern_and_certificate, copy_table

from spatial_release import stages
from spatial_release.fileio import sha256_file
from spatial_release.period import Period
from spatial_release.release import RELEASE_FILES
from spatial_release.suppression import audit as audit_module
from spatial_release.suppression.audit import Criterion, audit, default_workers
from spatial_release.suppression.certificate import NO_POINT, Certificate, verify
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.protection import protect
from spatial_release.suppression.table import EQ, PRIMARY, PUBLISHED, SECONDARY, Relation, Table

K = 5


def many_components(groups: int = 40, seed: int = 7) -> Table:
    """`groups` independent 3 x 3 tables (cells, row and column totals, a group total): with every group
    total published and large, each group's withheld cells form components of their own."""
    rng = np.random.default_rng(seed)
    table = Table()
    for g in range(groups):
        cells = rng.integers(1, 12, size=(3, 3))
        cells[rng.integers(0, 3), rng.integers(0, 3)] = rng.integers(1, K)  # at least one primary

        def node(name: str, value: int, g: int = g) -> int:
            status = PRIMARY if 1 <= value < K else PUBLISHED
            return table.add("x", f"g{g}:{name}", 0, int(value), status)

        leaf = {(i, j): node(f"c{i}{j}", cells[i, j]) for i in range(3) for j in range(3)}
        rows = [node(f"r{i}", cells[i].sum()) for i in range(3)]
        cols = [node(f"k{j}", cells[:, j].sum()) for j in range(3)]
        total = node("t", cells.sum())
        for i in range(3):
            table.relations.append(Relation(EQ, rows[i], tuple(leaf[(i, j)] for j in range(3))))
        for j in range(3):
            table.relations.append(Relation(EQ, cols[j], tuple(leaf[(i, j)] for i in range(3))))
        table.relations.append(Relation(EQ, total, tuple(rows)))
        table.relations.append(Relation(EQ, total, tuple(cols)))
    return table


@pytest.fixture(scope="module")
def certified():
    """A protected many-component table and its certificate (the protection step's audit)."""
    table = many_components()
    log = protect(table, K, {}, ProtectionMethod.sweep())
    assert log.audit is not None and log.audit.passed
    return table, Certificate.build(table, log.audit, INPUTS)


def certified_audit(table: Table, certificate: Certificate, inputs=INPUTS):
    """What the check does: verify, then solve only the components the certificate does not cover."""
    verification = verify(table, certificate, inputs, Criterion(K))
    again = verification.to_resolve()
    result = audit(table, K, primaries=again) if again else None
    passed = not verification.errors and (result is None or result.passed)
    return passed, verification, result


def leaky(table: Table, certificate: Certificate) -> tuple[Table, int, int]:
    """The pattern with one necessary secondary published again (a buggy candidate whose certificate a
    forger re-hashed): returns the table, the secondary and a primary it leaves unprotected."""
    for secondary in table.secondaries():
        broken = copy_table(table)
        broken.status[secondary] = PUBLISHED
        result = audit(broken, K, workers=1)
        if not result.passed:
            return broken, secondary, result.failures()[0].node
    raise AssertionError("no secondary of the pattern is necessary")


# ---- all cores: same verdicts whatever the worker count -------------------------------------------


@pytest.mark.slow
def test_verdicts_and_bounds_identical_with_1_and_2_workers(monkeypatch):
    monkeypatch.setattr(audit_module, "PARALLEL_MIN_NODES", 0)  # small table: use the pool anyway
    monkeypatch.setattr(audit_module, "PACK_NODES", 60)  # several jobs, so that both workers get some
    table = many_components(groups=60, seed=3)
    for name in table.secondaries():
        table.status[name] = PUBLISHED
    one = audit(table, K, workers=1)
    two = audit(table, K, workers=2)
    assert two.workers == 2 and one.workers == 1
    assert one.components == two.components > 20
    assert one.intervals == two.intervals  # node, value, bounds, verdict, binding figures, kind
    assert one.witnesses == two.witnesses
    assert one.errors == two.errors and not one.passed  # primary suppression alone leaks


def test_packing_components_changes_no_verdict_and_no_failing_bound(monkeypatch):
    """Components packed into one model (audit.PACK_NODES) are a disjoint union: the same verdict for every
    primary as one model per component, the same bounds where it fails (optimal bounds), and witness points
    that are feasible points of the whole table (the certificate verifier accepts them)."""
    table = many_components(groups=60, seed=3)
    for name in table.secondaries():
        table.status[name] = PUBLISHED
    results = {}
    for pack in (1, 10_000):
        monkeypatch.setattr(audit_module, "PACK_NODES", pack)
        results[pack] = audit(table, K, workers=1)
    alone, packed = results[1], results[10_000]
    assert len(audit_module.packs(table)) == 1 and packed.components == alone.components > 20
    assert [(i.node, i.passed, i.failing) for i in alone.intervals] == [
        (i.node, i.passed, i.failing) for i in packed.intervals
    ]
    assert [(i.node, i.lo, i.up) for i in alone.intervals if not i.passed] == [
        (i.node, i.lo, i.up) for i in packed.intervals if not i.passed
    ]
    assert alone.failures() and not packed.errors
    # every component without a failing primary is certified by the packed audit's witness points
    verification = verify(table, Certificate.build(table, packed, INPUTS), INPUTS, Criterion(K))
    failing = {i.node for i in packed.intervals if not i.passed}
    expected = {
        c
        for c, nodes in enumerate(verification.components)
        if any(table.status[n] == PRIMARY for n in nodes) and not failing & set(nodes)
    }
    assert not verification.errors and set(verification.certified) == expected


@pytest.mark.slow
def test_pattern_and_certificate_identical_with_1_and_2_workers(monkeypatch):
    monkeypatch.setattr(audit_module, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(audit_module, "PACK_NODES", 60)
    protected = []
    for workers in ("1", "2"):
        monkeypatch.setenv("SPATIAL_RELEASE_AUDIT_WORKERS", workers)
        table = many_components(groups=50, seed=11)
        log = protect(table, K, {}, ProtectionMethod.sweep())
        assert log.audit is not None and log.audit.workers == int(workers)
        protected.append((table, log))
    assert_same_pattern_and_certificate(protected)


def test_workers_setting(monkeypatch):
    monkeypatch.delenv("SPATIAL_RELEASE_AUDIT_WORKERS", raising=False)
    import os

    assert default_workers() == (os.cpu_count() or 1)
    monkeypatch.setenv("SPATIAL_RELEASE_AUDIT_WORKERS", "3")
    assert default_workers() == 3
    for bad in ("0", "two"):
        monkeypatch.setenv("SPATIAL_RELEASE_AUDIT_WORKERS", bad)
        with pytest.raises(ValueError, match="SPATIAL_RELEASE_AUDIT_WORKERS"):
            default_workers()


# ---- the certificate verifies without an LP --------------------------------------------------------


def test_an_honest_certificate_certifies_every_component(certified, monkeypatch):
    table, certificate = certified
    monkeypatch.setattr(audit_module.ComponentModel, "__init__", lambda *a, **k: pytest.fail("solved an LP"))
    verification = verify(table, certificate, INPUTS, Criterion(K))
    assert verification.rejected is None and not verification.unverified and not verification.errors
    assert len(verification.certified) == certificate.primaries["component"].nunique() > 20
    assert {i.node for i in verification.intervals} == set(table.primaries())
    assert all(i.lo <= i.value - 1 and i.up >= max(K, i.value + 1) for i in verification.intervals)


def test_the_certificate_round_trips_through_its_files(certified, tmp_path):
    table, certificate = certified
    certificate.write(tmp_path / "cert")
    again = Certificate.read(tmp_path / "cert")
    pd.testing.assert_frame_equal(again.primaries, certificate.primaries)
    assert not verify(table, again, INPUTS, Criterion(K)).unverified
    # a table file altered after the header was written: the whole certificate is unreadable
    again.points.assign(value=again.points["value"] + 1).to_parquet(
        tmp_path / "cert" / "certificate_points.internal.parquet"
    )
    with pytest.raises(ValueError, match="sha256"):
        Certificate.read(tmp_path / "cert")


# ---- negative controls: a tampered certificate is never trusted ------------------------------------


def _point_of(certificate: Certificate, node: int, which: str) -> int:
    return int(certificate.primaries.set_index("node").loc[node, f"{which}_point"])


def test_a_witness_altered_to_violate_an_equation_is_rejected(certified):
    """(a) On the honest pattern the component is re-solved (and passes on its own merits); on a leaking
    pattern whose certificate was forged to keep the old witness valid-looking, the check fails."""
    table, certificate = certified
    primary = table.primaries()[0]
    pid = _point_of(certificate, primary, "lo")
    points = certificate.points.copy()
    first = points.index[points["point"] == pid][0]
    points.loc[first, "value"] += 1  # one figure moved alone: its row and column no longer add up
    tampered = replace(certificate, points=points)
    passed, verification, result = certified_audit(table, tampered)
    assert verification.invalid_points >= 1 and verification.unverified
    assert "not a feasible integral point" in next(iter(verification.unverified.values()))
    assert passed and result is not None and result.components >= 1  # re-solved, not trusted

    broken, secondary, victim = leaky(table, certificate)
    # the forger drops the now-published secondary from every point, so no point moves a published figure
    forged_points = certificate.points[certificate.points["node"] != secondary]
    forged = replace(certificate, points=forged_points)
    passed, verification, result = certified_audit(broken, forged)
    assert not passed and victim in verification.to_resolve()
    assert victim in {i.node for i in result.failures()}


def test_a_figure_listed_twice_in_one_point_is_rejected(certified):
    """A point that gives one figure two values has no single meaning. Forgery: the primary's up-point row
    y becomes two rows, v - 1 then y + 1; their moves still add up to the old one (every relation still
    balances when summed), while reading the point as {figure: last value} claims the wider bound y + 1.
    Such a point is never a witness."""
    table, certificate = certified
    primary = table.primaries()[0]
    v = table.value[primary]
    pid = _point_of(certificate, primary, "up")
    points = certificate.points
    at = points.index[(points["point"] == pid) & (points["node"] == primary)]
    assert len(at) == 1
    y = int(points.loc[at[0], "value"])
    pair = pd.DataFrame({"point": [pid, pid], "node": [primary, primary], "value": [v - 1, y + 1]})
    doubled = pd.concat([points.loc[: at[0] - 1], pair, points.loc[at[0] + 1 :]], ignore_index=True)
    doubled = doubled.astype(points.dtypes.to_dict())
    primaries = certificate.primaries.copy()
    primaries.loc[primaries["node"] == primary, "up"] = float(y + 1)
    verification = verify(table, replace(certificate, points=doubled, primaries=primaries), INPUTS, Criterion(K))
    assert verification.invalid_points >= 1
    assert any(primary in verification.components[c] for c in verification.unverified)


def test_moves_that_wrap_around_int64_do_not_balance_a_relation():
    """Forgery by overflow: in a published total over six withheld figures, the primary's up-point claims 3
    units more, one sibling 3 fewer, and four siblings each 2^62 more: the moves add up to 0 modulo 2^64,
    which an int64 sum would accept. In exact integers the total is broken, and the point is no witness."""
    table = Table()
    children = [table.add("x", f"c{i}", 0, v, PRIMARY if v < K else SECONDARY) for i, v in enumerate([2, 6, 6, 6, 6, 6])]
    total = table.add("x", "t", 0, 32, PUBLISHED)
    table.relations.append(Relation(EQ, total, tuple(children)))
    result = audit(table, K, workers=1)
    assert result.passed
    honest = Certificate.build(table, result, INPUTS)
    assert not verify(table, honest, INPUTS, Criterion(K)).unverified
    primary = children[0]
    pid = _point_of(honest, primary, "up")
    forged = {primary: 5, children[1]: 3, **{c: 6 + 2**62 for c in children[2:6]}}
    assert sum(v - table.value[n] for n, v in forged.items()) == 2**64  # 0 modulo 2^64, not 0
    points = honest.points
    rows = pd.DataFrame({"point": pid, "node": list(forged), "value": list(forged.values())})
    tampered_points = pd.concat([points[points["point"] != pid], rows], ignore_index=True).astype(points.dtypes.to_dict())
    primaries = honest.primaries.copy()
    primaries.loc[primaries["node"] == primary, "up"] = 5.0
    verification = verify(table, replace(honest, points=tampered_points, primaries=primaries), INPUTS, Criterion(K))
    assert verification.invalid_points >= 1 and verification.unverified


def test_a_changed_input_hash_rejects_the_whole_certificate(certified):
    """(b) Candidate cells edited after the audit: every component is re-solved; the leak is found."""
    table, certificate = certified
    broken, _, victim = leaky(table, certificate)
    changed = {**INPUTS, "candidate": "edited"}
    passed, verification, result = certified_audit(broken, certificate, changed)
    assert verification.rejected == "inputs changed since the audit: candidate"
    assert not verification.certified
    assert not passed and victim in {i.node for i in result.failures()}


def test_a_primary_missing_from_the_certificate_is_re_solved(certified):
    """(c)"""
    table, certificate = certified
    primary = table.primaries()[3]
    tampered = replace(certificate, primaries=certificate.primaries[certificate.primaries["node"] != primary])
    passed, verification, result = certified_audit(table, tampered)
    assert list(verification.unverified.values()) == ["a withheld primary the certificate does not cover"]
    assert primary in verification.to_resolve() and passed and primary in {i.node for i in result.intervals}

    broken, secondary, victim = leaky(table, certificate)
    keep = certificate.primaries["node"] != victim
    forged = replace(
        certificate,
        primaries=certificate.primaries[keep],
        points=certificate.points[certificate.points["node"] != secondary],
    )
    passed, verification, result = certified_audit(broken, forged)
    assert not passed and victim in {i.node for i in result.failures()}


def test_a_bound_widened_without_a_witness_is_rejected(certified):
    """(d) The recorded bound no longer matches its witness (or the witness shows no protection)."""
    table, certificate = certified
    primaries = certificate.primaries.copy()
    row = primaries.index[0]
    primaries.loc[row, "lo"] -= 3  # wider than the witness shows
    passed, verification, _ = certified_audit(table, replace(certificate, primaries=primaries))
    assert "a bound its witness does not attain" in verification.unverified.values() and passed

    broken, secondary, victim = leaky(table, certificate)
    forged_primaries = certificate.primaries.copy()
    at = forged_primaries.index[forged_primaries["node"] == victim][0]
    # the forger claims protection with a point that is certainly feasible (the true table: no figure
    # moved) and bounds that meet the criterion
    empty = int(certificate.points["point"].max()) + 1
    forged_primaries.loc[at, ["lo", "up", "lo_point", "up_point"]] = [broken.value[victim] - 1, 10**6, empty, empty]
    forged_points = pd.concat(
        [
            certificate.points[certificate.points["node"] != secondary],
            pd.DataFrame({"point": [empty], "node": [victim], "value": [broken.value[victim]]}),
        ],
        ignore_index=True,
    )
    forged = replace(certificate, primaries=forged_primaries, points=forged_points)
    passed, verification, result = certified_audit(broken, forged)
    assert not passed and victim in verification.to_resolve()
    assert victim in {i.node for i in result.failures()}


def test_a_missing_witness_is_re_solved(certified):
    table, certificate = certified
    primaries = certificate.primaries.copy()
    primaries.loc[primaries.index[1], "up_point"] = NO_POINT
    passed, verification, result = certified_audit(table, replace(certificate, primaries=primaries))
    assert len(verification.unverified) == 1 and passed and result.components == 1


# ---- the stages: the check and publication verify instead of solving -------------------------------

PERIOD = Period.parse("2018-Q1")
BUCKET = pd.Timestamp("2018-01-10T05:00:00Z")


@pytest.mark.slow
def test_check_and_publication_verify_the_protection_steps_certificate(tmp_path, fixture_policy):
    ctx = stages.ReleaseContext(fixture_policy, PERIOD, tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    area = ctx.area
    assert (area.root / "audit_certificate" / "certificate.internal.json").is_file()
    outcome = stages.check_suppression_audit(ctx)
    assert outcome.passed and outcome.figures["verified_by"] == "certificate"
    assert outcome.figures["certified_share"] == 1.0 and outcome.figures["re_solved_share"] == 0.0
    assert "verified from the protection step's certificate" in outcome.summary
    internal = json.loads((area.root / "audit.internal.json").read_text())
    assert internal["certificate"]["re_solved_components"] == 0 and internal["lps_solved"] == 0
    [audit_outcome] = [o for o in stages.run_guarantees(ctx) if o.name == "suppression_audit"]
    assert audit_outcome.passed and audit_outcome.figures["verified_by"] == "certificate"

    # (b) on the stage: a candidate file edited after the audit (manifest re-signed): solved again, and
    # the edit (the lonely device's cell C published: B beside it is recovered) is caught
    cells = gpd.read_parquet(area.candidate / "cells.parquet")
    corner = CELL_C
    extra = gpd.GeoDataFrame(
        {"cell_id": [cell_id(corner)], "bucket_start": [BUCKET], "n_devices": [1]},
        geometry=[box(corner[0], corner[1], corner[0] + 1000, corner[1] + 1000)],
        crs=cells.crs,
    )
    pd.concat([cells, extra], ignore_index=True).to_parquet(area.candidate / "cells.parquet", index=False)
    manifest = stages.read_manifest(area)
    replace(manifest, sha256={n: sha256_file(area.candidate / n) for n in RELEASE_FILES}).write(area.candidate)
    outcome = stages.check_suppression_audit(ctx)
    internal = json.loads((area.root / "audit.internal.json").read_text())
    assert internal["certificate"]["rejected"].startswith("inputs changed since the audit: candidate/cells.parquet")
    assert internal["certificate"]["certified_components"] == 0
    assert not outcome.passed
    assert {o.get("area_id") for o in outcome.offending} >= {cell_id(CELL_B)}


def test_an_unbounded_upper_bound_is_witnessed_by_a_point_beyond_the_criterion():
    """Nothing published caps the primary: the LP's max is unbounded, a ray is no point to check, so the
    audit finds a point at max(k, v + 1) and the verifier accepts up = inf on that point only."""
    table = Table()
    total = table.add("x", "t", 0, 10, SECONDARY)
    a = table.add("x", "a", 0, 2, PRIMARY)
    b = table.add("x", "b", 0, 8, SECONDARY)
    table.relations.append(Relation(EQ, total, (a, b)))
    result = audit(table, K, optimal_bounds=True, workers=1)
    [interval] = result.intervals
    assert interval.up == float("inf") and result.witness_lps == 1
    lo_point, up_point = result.witnesses[a]
    assert lo_point is not None and up_point is not None
    assert up_point[a] >= K and lo_point.get(a, 2) <= 1
    certificate = Certificate.build(table, result, INPUTS)
    verification = verify(table, certificate, INPUTS, Criterion(K))
    assert verification.certified == [0] and verification.intervals[0].up == float("inf")
    # the same point cannot back a finite bound it does not attain
    forged = certificate.primaries.assign(up=float(up_point[a] + 5))
    assert verify(table, replace(certificate, primaries=forged), INPUTS, Criterion(K)).unverified


@pytest.mark.slow
def test_publication_reuses_the_checks_audit_verdict_only_for_byte_identical_inputs(tmp_path, fixture_policy, monkeypatch):
    """The publish step re-evaluates every guarantee; the audit's verdict is reused from the check when the
    inputs, the structure, the certificate, the check's own outputs and the code are byte-identical, and
    verified again otherwise. Negative controls: each of those changed makes the audit run again."""
    from spatial_release.stages import checks, reuse
    from spatial_release.suppression import release_system
    from spatial_release.suppression.table import Chain

    ctx = stages.ReleaseContext(fixture_policy, PERIOD, tmp_path / "work")
    stages.run_ingest(ctx)
    stages.run_counts(ctx)
    stages.run_protect(ctx)
    area = ctx.area
    verified = []
    real = checks.certify_published

    def counted(*a, **k):
        verified.append(1)
        return real(*a, **k)

    monkeypatch.setattr(checks, "certify_published", counted)

    first = stages.check_suppression_audit(ctx)
    assert first.passed and len(verified) == 1 and "reused_verdict" not in first.figures
    [again] = [o for o in stages.run_guarantees(ctx) if o.name == "suppression_audit"]
    assert again.passed and again.figures["reused_verdict"] is True and len(verified) == 1
    assert again.figures["verified_by"] == "certificate" and "reused" in again.summary

    def verified_again() -> bool:
        before = len(verified)
        assert stages.check_suppression_audit(ctx).passed
        return len(verified) == before + 1

    # (a) the code changed
    monkeypatch.setattr(reuse, "code_digest", lambda: "other code")
    assert verified_again()
    monkeypatch.undo()
    monkeypatch.setattr(checks, "certify_published", counted)
    assert verified_again()  # the real code again: its verdict was overwritten by the other code's
    assert not verified_again()
    # (b) the check's intervals file was removed
    (area.root / "audit_intervals.internal.parquet").unlink()
    assert verified_again() and not verified_again()
    # (c) a certificate file edited (one byte appended; it still reads)
    certificate = area.root / "audit_certificate" / "certificate.internal.json"
    certificate.write_text(certificate.read_text() + " ")
    assert verified_again() and not verified_again()
    # (d) the structure answers differently (a zone file moved a cell to another parent), same files otherwise
    structure = ctx.structure
    chain = structure.chains[0]
    moved = cell_id(CELL_B)
    real_parent = chain.parent_of[0]

    def parent_of(area: str) -> str:
        return "elsewhere" if area == moved else real_parent(area)

    changed = replace(
        structure,
        chains=(Chain(chain.levels, (parent_of, *chain.parent_of[1:]), chain.children_count), *structure.chains[1:]),
    )
    true_cells, true_margins = stages.read_true_counts(area)
    assert release_system.structure_digest(changed, true_cells, true_margins, ctx.zeros) != release_system.structure_digest(
        structure, true_cells, true_margins, ctx.zeros
    )
    ctx._cache["structure"] = changed
    assert checks.audit_digest(ctx, [], true_cells, true_margins) != checks.audit_digest(
        stages.ReleaseContext(fixture_policy, PERIOD, tmp_path / "work"), [], true_cells, true_margins
    )
    # (e) a forged verdict file (digest of other inputs) is never trusted
    ctx = stages.ReleaseContext(fixture_policy, PERIOD, tmp_path / "work")
    saved = area.root / reuse.MEMO
    data = json.loads(saved.read_text())
    data["results"][checks.AUDIT_VERDICT]["digest"] = "0" * 64
    saved.write_text(json.dumps(data))
    assert verified_again() and not verified_again()
    # (f) a manifest that no longer matches the candidate refuses it on the reuse path too
    manifest = stages.read_manifest(area)
    replace(manifest, sha256={n: "0" * 64 for n in RELEASE_FILES}).write(area.candidate)
    with pytest.raises(checks.CandidateChanged):
        stages.check_suppression_audit(ctx)


def test_the_code_digest_is_taken_at_import_and_void_once_the_code_on_disk_changes(tmp_path, monkeypatch):
    """A process that keeps running the code it imported (a Dagster code server after an upgrade), or imports a
    module after the files changed, must neither reuse a saved result nor save one: the digest is the one
    taken at import while the files and libraries on disk still hash to it, and None after."""
    from spatial_release import codeversion
    from spatial_release.stages import reuse

    package = tmp_path / "package"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.py").write_text("y = 2\n")
    before = codeversion.digest_of_files(package)
    (package / "sub" / "b.py").write_text("y = 3\n")
    assert codeversion.digest_of_files(package) != before  # any byte of any file changes it
    assert reuse.code_digest() == codeversion.CODE_DIGEST  # unchanged on disk: the import's digest
    memo = reuse.Memo(tmp_path / reuse.MEMO, "a candidate")
    digest = reuse.digest_of({"x": 1})
    memo.save("result", digest, {"figure": 1})
    assert memo.load("result", digest) == {"figure": 1}
    assert reuse.Memo(memo.path, "another candidate").load("result", digest) is None  # keyed by the candidate

    monkeypatch.setattr(codeversion, "digest_of_files", lambda *a: "upgraded on disk")
    assert reuse.code_digest() is None and reuse.digest_of({"x": 1}) is None
    assert memo.load("result", reuse.digest_of({"x": 1})) is None
    memo.save("result", reuse.digest_of({"x": 1}), {"figure": 2})  # nothing saved, and the old result removed
    assert "result" not in json.loads(memo.path.read_text())["results"]
    monkeypatch.undo()
    monkeypatch.setattr(codeversion, "library_versions", lambda: {"numpy": "another"})
    assert reuse.code_digest() is None  # a library upgraded under the process
