"""The stages' contracts: one release context per run, the cadence rule in the policy, typed stage results."""

import pytest
from support.fixture import fixture_pings, policy_dict, write_policy

from spatial_release.defs.catalogue import programme_for
from spatial_release.defs.execution import execute_release
from spatial_release.period import Period
from spatial_release.policy import PolicyError, load_policy


def test_a_policy_refuses_a_period_of_the_other_cadence(tmp_path, fixture_policy):
    fixture_policy.check_period(Period.parse("2018-Q1"))
    with pytest.raises(PolicyError, match="release period is a quarter; give a quarter like 2018-Q1, not '2018-01'"):
        fixture_policy.check_period(Period.parse("2018-01"))
    monthly = load_policy(write_policy(tmp_path, policy_dict("traces.csv", period="month"), name="monthly.yaml"))
    monthly.check_period(Period.parse("2018-01"))
    with pytest.raises(PolicyError, match="release period is a month; give a month like 2018-01"):
        monthly.check_period(Period.parse("2018-Q1"))


def test_a_quarterly_policy_has_no_monthly_partition(tmp_path):
    """The graph's partitions come from the policy's cadence, so a month of a quarterly programme cannot
    even be asked for (the old shared monthly job accepted a quarterly policy)."""
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    programme = programme_for(write_policy(tmp_path, policy_dict(str(traces))))  # a quarterly programme
    settings = {
        "releases_dir": str(tmp_path / "releases"),
        "work_dir": str(tmp_path / "work"),
        "ledger_dir": str(tmp_path / "ledger"),
        "alerts_dir": str(tmp_path / "alerts"),
    }
    with pytest.raises(PolicyError, match="a quarter like 2018-Q1"):
        execute_release(programme, "2018-02", settings)
    assert not (tmp_path / "work" / "fixture").exists()  # refused before anything is written


def test_settings_read_the_environment_when_built_not_at_import(monkeypatch, tmp_path):
    from spatial_release.defs.resources import CountingEngine, ReleaseSettings

    monkeypatch.setenv("SPATIAL_RELEASE_WORK", str(tmp_path / "late-work"))
    monkeypatch.setenv("SPATIAL_RELEASE_ENGINE", "spark")
    assert ReleaseSettings().work_dir == str(tmp_path / "late-work")  # set after the module was imported
    assert CountingEngine().engine == "spark"
    monkeypatch.delenv("SPATIAL_RELEASE_WORK")
    assert ReleaseSettings().work_dir.endswith("/work")  # the project default


@pytest.mark.slow
def test_typed_stage_results_round_trip_their_json(tmp_path, fixture_policy):
    """The stage files are the serialisation of their types: reading a file back gives the same result,
    and writing it again gives the same JSON."""
    from spatial_release import stages

    ctx = stages.ReleaseContext(fixture_policy, Period.parse("2018-Q1"), tmp_path / "work")
    results = [(stages.run_ingest(ctx), ctx.area.ingest), (stages.run_counts(ctx), ctx.area.counts)]
    stages.run_protect(ctx)
    results.append((stages.read_manifest(ctx.area), ctx.area.candidate))
    for result, folder in results:
        again = type(result).read(folder)
        assert again == result and again.to_json() == result.to_json()
