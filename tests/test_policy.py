from pathlib import Path

import pytest

from conftest import PROJECT_ROOT, policy_dict, write_policy
from spatial_release.period import Period
from spatial_release.policy import PolicyError, load_policy


@pytest.mark.parametrize("name", ["demo.yaml", "jc-bikes.yaml"])
def test_shipped_policies_load(name):
    policy = load_policy(PROJECT_ROOT / "policies" / name)
    assert policy.k >= 2 and len(policy.sha256) == 64


def test_shipped_policies_cover_grid_and_zones():
    assert load_policy(PROJECT_ROOT / "policies/demo.yaml").geometry.kind == "grid"
    bikes = load_policy(PROJECT_ROOT / "policies/jc-bikes.yaml")
    assert bikes.geometry.kind == "zones" and bikes.unit == "devices" and bikes.count_column == "n_devices"


def _error_for(tmp_path: Path, data) -> str:
    path = write_policy(tmp_path, data)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert str(path) in message  # every error names the file
    return message


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d.update(k=1), "field 'k'"),
        (lambda d: d.update(k="five"), "field 'k'"),
        (lambda d: d.pop("unit"), "field 'unit'"),
        (lambda d: d.update(unit="people"), "field 'unit'"),
        (lambda d: d.update(measure="footfall"), "field 'measure'"),
        (lambda d: d["time"].update(bucket="90m"), "field 'time.bucket'"),
        (lambda d: d["time"].update(timezone="Mars/Olympus"), "field 'time.timezone'"),
        (lambda d: d["source"].update(timezone="Nowhere/City"), "field 'source.timezone'"),
        (lambda d: d["source"].pop("lat"), "field 'source'"),
        (lambda d: d["geometry"].update(parents_m=[1500]), "field 'geometry.grid'"),
        (lambda d: d["geometry"].update(kind="hexagons"), "field 'geometry'"),
        (lambda d: d.update(colour="blue"), "field 'colour'"),
        (lambda d: d["suppression"].update(budget=1.5), "field 'suppression.budget'"),
        (lambda d: d["source"].update(max_rejected_share=-0.1), "field 'source.max_rejected_share'"),
    ],
)
def test_bad_policy_names_file_and_field(tmp_path, change, field):
    data = policy_dict("x.csv")
    change(data)
    assert field in _error_for(tmp_path, data)


def test_trips_need_both_ends(tmp_path):
    data = policy_dict("x.csv")
    data["source"] = {"format": "trips", "unit": "bike", "timezone": "UTC",
                      "origin": {"time": "t0", "lon": "x0", "lat": "y0"}}
    assert "destination" in _error_for(tmp_path, data)


def test_not_yaml_and_not_mapping(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(PolicyError, match="expected a YAML mapping"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")


def test_periods():
    q = Period.parse("2018-Q1")
    assert (q.start.isoformat(), q.end.isoformat(), q.partition_key) == ("2018-01-01", "2018-04-01", "2018-01-01")
    assert Period.parse("2018-Q4").end.isoformat() == "2019-01-01"
    assert Period.from_partition_key("2018-04-01").label == "2018-Q2"
    start, end = q.utc_window("America/New_York")
    assert start.isoformat() == "2018-01-01T05:00:00+00:00" and end.isoformat() == "2018-04-01T04:00:00+00:00"
    with pytest.raises(ValueError):
        Period.parse("2018-Q5")
    with pytest.raises(ValueError):
        Period.from_partition_key("2018-02-01")
