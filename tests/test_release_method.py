"""release.json states the method that protected the release: the protection log's own description
(`ProtectionMethod.describe()`), written into the protection manifest by the protection step and taken from
there into the record, never a fixed text. A ladder release is not pruned, and its record says so (it names
no pruning); a release without a ladder is pruned, and its record names the pruning."""

from __future__ import annotations

import json

import pytest
from support.ladder import write_ladder_policy

from spatial_release.cli import run_release
from spatial_release.stages import protect as protect_stage
from spatial_release.stages.results import ProtectionManifest

# Whole releases: left out of the fast tier (pytest -m "not slow").
pytestmark = pytest.mark.slow

PRUNING = "pruning"


def _spy_on_protection(monkeypatch) -> list:
    """The protection logs of the candidate's protections (the calls that pass `withhold`; the utility
    report's baseline protection, with a ladder, does not), in order: the last one made the candidate."""
    logs = []
    protect_release = protect_stage.protect_release

    def spy(*args, **kwargs):
        protected, log, table = protect_release(*args, **kwargs)
        if "withhold" in kwargs:
            logs.append(log)
        return protected, log, table

    monkeypatch.setattr(protect_stage, "protect_release", spy)
    return logs


def _publish(policy_path, tmp_path, monkeypatch) -> tuple[str, str, dict]:
    """Publish 2018-Q1 of the policy; the record's method, the protection log's description and the
    published release.json."""
    logs = _spy_on_protection(monkeypatch)
    outcome = run_release(str(policy_path), "2018-Q1", out=str(tmp_path / "out"), ledger=str(tmp_path / "ledger"))
    assert outcome.published, [f.message for f in outcome.failures]
    assert outcome.release_dir is not None and outcome.record is not None
    assert logs, "the protection step ran no protection the spy saw: the comparison below would prove nothing"
    published = json.loads((outcome.release_dir / "release.json").read_text())
    return outcome.record.complementary_suppression, logs[-1].method.describe(), published


def test_a_plain_release_states_the_method_its_protection_ran(fixture_policy, tmp_path, monkeypatch):
    stated, ran, published = _publish(fixture_policy.path, tmp_path, monkeypatch)
    assert stated == ran == published["complementary_suppression"]
    manifest = ProtectionManifest.read(tmp_path / "out" / "work" / "fixture" / "2018-Q1" / "candidate")
    assert manifest.method == ran
    assert "Gaussian elimination" in stated and PRUNING in stated


def test_a_ladder_release_states_that_it_is_not_pruned(tmp_path, monkeypatch):
    stated, ran, published = _publish(write_ladder_policy(tmp_path).path, tmp_path, monkeypatch)
    assert stated == ran == published["complementary_suppression"]
    assert "Gaussian elimination" in stated and PRUNING not in stated
