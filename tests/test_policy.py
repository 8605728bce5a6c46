from pathlib import Path

import pytest
import yaml

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


def test_bad_strptime_format_names_file_and_item(tmp_path):
    data = policy_dict("x.csv")
    data["source"]["time_formats"] = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %Q"]
    message = _error_for(tmp_path, data)
    assert "field 'source.time_formats[1]'" in message and "%Q" in message
    assert "time_formats[0]" not in message


@pytest.mark.parametrize("spec", ["%Y-%m-%d %H:%M:%S UTC", "%Y-%m-%d %H:%M:%S+00:00", "%d/%m/%Y %H:%M GMT"])
def test_a_time_zone_spelt_as_literal_text_is_refused(tmp_path, spec):
    """Hostile pass of issue 9: '... UTC' as literal text was matched and ignored, so 03:00 UTC was read as
    03:00 New York time (a wrong bucket, exit 0). Such a format must name its zone with %Z or %z."""
    data = policy_dict("x.csv")
    data["source"]["time_formats"] = ["%Y-%m-%d %H:%M:%S", spec]
    message = _error_for(tmp_path, data)
    assert "field 'source.time_formats[1]'" in message and "%Z" in message


@pytest.mark.parametrize("spec", ["%Y-%m-%d %H:%M:%S %Z", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%SZ",
                                  "%Y-%m-%dT%H:%M:%S"])
def test_formats_that_read_their_zone_or_have_none_are_accepted(tmp_path, spec):
    data = policy_dict("x.csv")
    data["source"]["time_formats"] = [spec]
    assert load_policy(write_policy(tmp_path, data)).source.time_formats == [spec]


@pytest.mark.parametrize("text, key, line", [
    ("k: 5\nk: 2\n", "k", 2),
    ("source:\n  unit: device\n  timezone: UTC\n  unit: gender\n", "unit", 4),
])
def test_duplicate_key_is_an_error_naming_file_and_key(tmp_path, text, key, line):
    path = tmp_path / "dup.yaml"
    path.write_text("name: fixture\nversion: 1\n" + text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert str(path) in message and f"duplicate key '{key}' on line {line + 2}" in message


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    data = policy_dict("x.csv")
    text = yaml.safe_dump(data, sort_keys=False).replace("time:\n", "time: &t\n", 1)
    path = tmp_path / "policy.yaml"
    write_policy(tmp_path, data)
    path.write_text(text + "x-copy:\n  <<: *t\n  bucket: 1h\n")
    with pytest.raises(PolicyError, match="field 'x-copy'"):  # merged, then refused as an unknown field
        load_policy(path)


@pytest.mark.parametrize("section, field, value", [
    ("suppression", "zeros", "no-such-zeros.csv"),
    ("risk", "landscape", "landscapes/no-such.yaml"),
    ("risk", "landscape", "."),
])
def test_missing_zeros_or_landscape_file_is_found_at_load(tmp_path, section, field, value):
    data = policy_dict("x.csv")
    data[section][field] = value
    message = _error_for(tmp_path, data)
    assert f"field '{section}.{field}'" in message and str((tmp_path / value).resolve()) in message


SECRET = "s3cr3t-token-4711"


@pytest.mark.parametrize("section, field, content", [
    ("suppression", "zeros", f"{SECRET}:x:0:0\nroot:/root\n"),
    ("suppression", "zeros", f"device,when\n{SECRET},2018-01-10\n"),
    ("risk", "landscape", f"{SECRET}: [unclosed\n"),
    ("risk", "landscape", f"{SECRET}:x:0:0:root\n"),
    ("risk", "landscape", f"version: 1\n{SECRET}: 3\n"),
])
def test_a_wrong_zeros_or_landscape_path_never_echoes_that_file(tmp_path, section, field, content):
    other = tmp_path / "private.txt"
    other.write_text(content)
    data = policy_dict("x.csv")
    data[section][field] = str(other)
    message = _error_for(tmp_path, data)
    assert f"field '{section}.{field}'" in message and str(other) in message
    assert SECRET not in message


def test_missing_unit_values_default_and_override(tmp_path):
    policy = load_policy(write_policy(tmp_path, policy_dict("x.csv")))
    assert {"NULL", "NA", "nan", "-"} <= set(policy.source.missing_unit_values)
    data = policy_dict("x.csv")
    data["source"]["missing_unit_values"] = ["unknown", "-1"]
    assert load_policy(write_policy(tmp_path, data)).source.missing_unit_values == ["unknown", "-1"]
    data["source"]["missing_unit_values"] = "unknown"
    assert "field 'source.missing_unit_values'" in _error_for(tmp_path, data)
