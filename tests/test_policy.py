import os
import threading
from pathlib import Path

import pytest
import yaml
from support.fixture import K, policy_dict, write_policy
from support.paths import PROJECT_ROOT
from support.releases import release

from spatial_release.configfile import MAX_DEPTH, MAX_POPULATION_BYTES, MAX_ZEROS_BYTES, StrictLoader
from spatial_release.errors import PeriodError
from spatial_release.period import Period
from spatial_release.policy import MAX_CONFIG_BYTES, PolicyError, load_policy
from spatial_release.policy.model import MAX_K


@pytest.mark.parametrize("name", sorted(p.name for p in (PROJECT_ROOT / "policies").glob("*.yaml")))
def test_shipped_policies_load(name):
    """Under the strict YAML loader too (no yes/no, merge keys or aliases in them or their landscapes)."""
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
        # a folder of the zone database: ZoneInfo raised IsADirectoryError, an internal error (exit 3)
        (lambda d: d["time"].update(timezone="America"), "field 'time.timezone'"),
        (lambda d: d["source"].update(timezone="America"), "field 'source.timezone'"),
        # the host's zone, not an IANA name: the same policy gave other instants on another machine
        (lambda d: d["source"].update(timezone="localtime"), "field 'source.timezone'"),
        (lambda d: d["time"].update(timezone="localtime"), "field 'time.timezone'"),
        (lambda d: d["source"].pop("lat"), "field 'source'"),
        (lambda d: d["geometry"].update(parents_m=[1500]), "field 'geometry.grid'"),
        (lambda d: d["geometry"].update(kind="hexagons"), "field 'geometry'"),
        (lambda d: d.update(colour="blue"), "field 'colour'"),
        (lambda d: d["suppression"].update(budget=1.5), "field 'suppression.budget'"),
        (lambda d: d["source"].update(max_rejected_share=-0.1), "field 'source.max_rejected_share'"),
        # a grid of size_m metres needs a projected CRS in metres: in EPSG:4326 it was a grid of 500 degrees
        (lambda d: d["geometry"].update(crs="EPSG:4326"), "field 'geometry.grid.crs'"),
        (lambda d: d["geometry"].update(crs="EPSG:2263"), "field 'geometry.grid.crs'"),  # New York, US feet
        (lambda d: d["geometry"].update(crs="EPSG:999999"), "field 'geometry.grid.crs'"),
    ],
)
def test_bad_policy_names_file_and_field(tmp_path, change, field):
    data = policy_dict("x.csv")
    change(data)
    assert field in _error_for(tmp_path, data)


def test_trips_need_both_ends(tmp_path):
    data = policy_dict("x.csv")
    data["source"] = {
        "format": "trips",
        "unit": "bike",
        "timezone": "UTC",
        "origin": {"time": "t0", "lon": "x0", "lat": "y0"},
    }
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
    assert (q.start.isoformat(), q.end.isoformat()) == ("2018-01-01", "2018-04-01")
    assert Period.parse("2018-Q4").end.isoformat() == "2019-01-01"
    start, end = q.utc_window("America/New_York")
    assert start.isoformat() == "2018-01-01T05:00:00+00:00" and end.isoformat() == "2018-04-01T04:00:00+00:00"
    with pytest.raises(ValueError):
        Period.parse("2018-Q5")
    for label in ("0000-Q1", "9999-Q4", "1899-12"):  # outside the years the pipeline handles
        with pytest.raises(PeriodError, match="the year must be between"):
            Period.parse(label)


@pytest.mark.parametrize(
    "label",
    [
        "\uff12\uff10\uff11\uff18-Q1",
        "\u0662\u0660\u0661\u0668-Q1",
        "2018-Q\uff11",
        "\uff12\uff10\uff11\uff18-01",
        "2018-Q1\n",
        "2018-01\n",
        "2018-Q1\r\n",
        " 2018-Q1",
    ],
)
def test_period_is_ascii_digits_matched_whole(label):
    """Python's \\d takes any Unicode digit and `$` matches before a final newline, so these would be
    periods; a fullwidth one would publish a release folder the publish step then cannot find."""
    with pytest.raises(PeriodError, match="neither a quarter"):
        Period.parse(label)


def test_bad_strptime_format_names_file_and_item(tmp_path):
    data = policy_dict("x.csv")
    data["source"]["time_formats"] = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %Q"]
    message = _error_for(tmp_path, data)
    assert "field 'source.time_formats[1]'" in message and "%Q" in message
    assert "time_formats[0]" not in message


@pytest.mark.parametrize("spec", ["%Y-%m-%d %H:%M:%S UTC", "%Y-%m-%d %H:%M:%S+00:00", "%d/%m/%Y %H:%M GMT"])
def test_a_time_zone_spelt_as_literal_text_is_refused(tmp_path, spec):
    """'... UTC' as literal text would be matched and ignored, so 03:00 UTC would be read as 03:00 New York
    time (a wrong bucket, exit 0). Such a format must name its zone with %Z or %z."""
    data = policy_dict("x.csv")
    data["source"]["time_formats"] = ["%Y-%m-%d %H:%M:%S", spec]
    message = _error_for(tmp_path, data)
    assert "field 'source.time_formats[1]'" in message and "%Z" in message


@pytest.mark.parametrize("spec", ["%Y-%m-%d %H:%M:%S %Z", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S"])
def test_formats_that_read_their_zone_or_have_none_are_accepted(tmp_path, spec):
    data = policy_dict("x.csv")
    data["source"]["time_formats"] = [spec]
    assert load_policy(write_policy(tmp_path, data)).source.time_formats == [spec]


@pytest.mark.parametrize(
    "text, key, line",
    [
        ("k: 5\nk: 2\n", "k", 2),
        ("source:\n  unit: device\n  timezone: UTC\n  unit: gender\n", "unit", 4),
    ],
)
def test_duplicate_key_is_an_error_naming_file_and_key(tmp_path, text, key, line):
    path = tmp_path / "dup.yaml"
    path.write_text("name: fixture\nversion: 1\n" + text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert str(path) in message and f"duplicate key '{key}' on line {line + 2}" in message


def _refused_line(tmp_path: Path, old: str, new: str) -> str:
    """The PolicyError of the fixture policy with its line `old` replaced by the lines `new`; it names the
    file and the line where `new` starts."""
    text = yaml.safe_dump(policy_dict("x.csv"), sort_keys=False)
    assert old in text
    path = write_policy(tmp_path, policy_dict("x.csv"))
    path.write_text(text.replace(old, new, 1))
    line = text[: text.index(old)].count("\n") + 1
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert str(path) in message and f"line {line}" in message, message
    return message


@pytest.mark.parametrize("value", ["1:0", "0x2", "010", "1_0", "0b11", ".inf"])
def test_yaml_11_numbers_are_refused_not_read_as_other_numbers(tmp_path, value):
    """YAML 1.1 reads `k: 1:0` as k = 60 (sexagesimal) and `k: 0x2` as 2. The strict
    loader reads plain scalars as YAML 1.2 does, and refuses those YAML 1.1 would read as another number."""
    message = _refused_line(tmp_path, f"k: {K}\n", f"k: {value}\n")
    assert "field 'k'" in message


@pytest.mark.parametrize("value", ["yes", "No", "on", "OFF"])
def test_yaml_11_booleans_are_refused(tmp_path, value):
    message = _refused_line(tmp_path, "measure: presence\n", f"measure: {value}\n")
    assert "field 'measure'" in message and "boolean" in message


def test_yaml_merge_keys_are_refused(tmp_path):
    """`<<: {k: 2}` would set k without a `k:` line a reviewer would see."""
    message = _refused_line(tmp_path, f"k: {K}\n", "<<: {k: 2}\n")
    assert "field '<<'" in message and "merge keys" in message


def test_yaml_anchors_and_aliases_are_refused(tmp_path):
    message = _refused_line(tmp_path, "time:\n", "x-defaults: &t\n  bucket: 1h\ntime:\n")
    assert "field 'x-defaults'" in message and "aliases" in message
    message = _refused_line(tmp_path, f"k: {K}\n", "k: *five\n")
    assert "field 'k'" in message


@pytest.mark.parametrize(
    "value",
    [
        '!!int "4_0"',
        '!!int "1:0"',
        '!!int "0x4"',
        '!!int "0o4"',
        '!!int "0b100"',
        "!!float 3",
        '!!str "3"',
        "!local 3",
        "! 3",
    ],
)
def test_explicit_yaml_tags_are_refused(tmp_path, value):
    """`k: !!int "4_0"` would load as k = 40 (Python's int() reads underscores) and `!!int "0x4"` raise
    ValueError (exit 3, internal error). Every explicit tag is refused, naming the line."""
    message = _refused_line(tmp_path, f"k: {K}\n", f"k: {value}\n")
    assert "field 'k'" in message and "explicit tags" in message


@pytest.mark.parametrize(
    "nested", ["deep: " + "[" * 100_000 + "]" * 100_000 + "\n", "deep: " + "{a: " * 3_000 + "1" + "}" * 3_000 + "\n"]
)
def test_deep_nesting_is_refused_before_it_is_composed(tmp_path, nested):
    """100,000 nested lists (or 3,000 mappings) must not raise RecursionError (exit 3). Past
    MAX_DEPTH levels the loader refuses, naming the file and the line, without recursing further."""
    message = _refused_line(tmp_path, "time:\n", nested + "time:\n")
    assert f"nested deeper than {MAX_DEPTH} levels" in message


def test_nesting_up_to_the_bound_and_a_tagged_landscape(tmp_path):
    """A list nested MAX_DEPTH - 1 levels under the top-level mapping still parses (the bound is not off by
    one); a landscape is read with the same loader, so a tag there is refused too, quoting no content."""
    text = "deep: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"
    assert yaml.load(text, Loader=StrictLoader)["deep"] is not None
    with pytest.raises(yaml.YAMLError, match="nested deeper"):
        yaml.load("deep: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n", Loader=StrictLoader)
    block = "deep:\n" + "".join("  " * i + "a:\n" for i in range(1, 40)) + "  " * 40 + "b: 1\n"
    with pytest.raises(yaml.YAMLError, match=f"line {MAX_DEPTH}, .*nested deeper"):  # block style too
        yaml.load(block, Loader=StrictLoader)
    path = write_policy(tmp_path, policy_dict("x.csv"))
    (tmp_path / "landscape.yaml").write_text((tmp_path / "landscape.yaml").read_text() + 'seed: !!int "4_0"\n')
    with pytest.raises(PolicyError, match=r"field 'risk.landscape'.*line \d+: an explicit tag") as caught:
        load_policy(path)
    assert "4_0" not in str(caught.value)


def test_a_tagged_policy_exits_2_on_the_command_line(tmp_path, capsys):
    path = write_policy(tmp_path, policy_dict("x.csv"))
    path.write_text(path.read_text().replace(f"k: {K}\n", 'k: !!int "0x4"\n'))
    code = release(path, tmp_path, "2018-01", traces=[tmp_path / "x.csv"])
    err = capsys.readouterr().err
    assert code == 2 and str(path) in err and "explicit tags" in err and "internal error" not in err


def test_yaml_12_values_still_load(tmp_path):
    """What the strict loader reads like YAML 1.1 did: decimal ints and floats (1e-1 too), true/false,
    null; quoted YAML 1.1 traps are text."""
    data = policy_dict("x.csv")
    data["source"]["missing_unit_values"] = ["yes", "1:0"]
    text = yaml.safe_dump(data, sort_keys=False).replace("budget: 0.9", "budget: 9e-1")
    path = write_policy(tmp_path, data)
    path.write_text(text)
    policy = load_policy(path)
    assert policy.suppression.budget == 0.9 and policy.source.missing_unit_values == ["yes", "1:0"]


def test_an_absurd_k_is_refused_at_load(tmp_path):
    """k = 10**23 must not load and then block the run after ingest with "no risk estimate"."""
    assert "field 'k'" in _error_for(tmp_path, policy_dict("x.csv", k=10**23))
    assert "field 'k'" in _error_for(tmp_path, policy_dict("x.csv", k=MAX_K + 1))
    assert load_policy(write_policy(tmp_path, policy_dict("x.csv", k=MAX_K))).k == MAX_K


def test_audit_with_names_a_programme_beside_the_policy(tmp_path):
    """`audit_with: [nope]` must not be accepted and audit with nothing."""
    data = policy_dict("x.csv")
    data["suppression"]["audit_with"] = ["nope"]
    message = _error_for(tmp_path, data)
    assert "field 'suppression.audit_with[0]'" in message and "'nope'" in message
    write_policy(tmp_path, policy_dict("x.csv", name="nope"), name="nope.yaml")
    data["suppression"]["audit_with"] = ["nope", "fixture"]  # a sibling programme, and itself
    assert load_policy(write_policy(tmp_path, data)).suppression.audit_with == ["nope", "fixture"]


def _unreadable_message(path: Path) -> str:
    """load_policy's error for `path`, in a thread: a FIFO opened for reading would block it forever."""
    errors: list[str] = []

    def load() -> None:
        try:
            load_policy(path)
        except PolicyError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), f"loading {path} hangs"
    [message] = errors
    return message


def test_a_policy_that_is_no_regular_file_or_too_large_is_refused(tmp_path):
    """`--policy /dev/zero` must not be read until the process is OOM-killed."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as file:
        file.truncate(MAX_CONFIG_BYTES + 1)  # sparse: costs no disk
    specials = [Path("/dev/zero")] if Path("/dev/zero").exists() else []
    for path in [*specials, fifo, tmp_path]:
        message = _unreadable_message(path)
        assert str(path) in message and "not a regular file" in message, message
    message = _unreadable_message(huge)
    assert str(huge) in message and "larger than the 4 MiB" in message


@pytest.mark.parametrize(
    "section, field, limit", [("risk", "landscape", MAX_CONFIG_BYTES), ("suppression", "zeros", MAX_ZEROS_BYTES)]
)
def test_files_a_policy_names_are_bounded(tmp_path, section, field, limit):
    huge = tmp_path / "huge"
    with huge.open("wb") as file:
        file.truncate(limit + 1)
    data = policy_dict("x.csv")
    data[section][field] = str(huge)
    message = _error_for(tmp_path, data)
    assert f"field '{section}.{field}'" in message and "larger than" in message
    data[section][field] = "/dev/zero"
    assert f"field '{section}.{field}'" in _error_for(tmp_path, data)


@pytest.mark.parametrize(
    "section, field, value",
    [
        ("suppression", "zeros", "no-such-zeros.csv"),
        ("risk", "landscape", "landscapes/no-such.yaml"),
        ("risk", "landscape", "."),
    ],
)
def test_missing_zeros_or_landscape_file_is_found_at_load(tmp_path, section, field, value):
    data = policy_dict("x.csv")
    data[section][field] = value
    message = _error_for(tmp_path, data)
    assert f"field '{section}.{field}'" in message and str((tmp_path / value).resolve()) in message


SECRET = "s3cr3t-token-4711"


@pytest.mark.parametrize(
    "section, field, content",
    [
        ("suppression", "zeros", f"{SECRET}:x:0:0\nroot:/root\n"),
        ("suppression", "zeros", f"device,when\n{SECRET},2018-01-10\n"),
        ("risk", "landscape", f"{SECRET}: [unclosed\n"),
        ("risk", "landscape", f"{SECRET}:x:0:0:root\n"),
        ("risk", "landscape", f"version: 1\n{SECRET}: 3\n"),
        ("risk", "landscape", f"version: 1\n{SECRET}: 1:0\n"),  # refused by the strict loader: line only
        ("risk", "landscape", f"version: 1\nx: {SECRET}\nx: 2\n"),
    ],
)
def test_a_wrong_zeros_or_landscape_path_never_echoes_that_file(tmp_path, section, field, content):
    other = tmp_path / "private.txt"
    other.write_text(content)
    data = policy_dict("x.csv")
    data[section][field] = str(other)
    message = _error_for(tmp_path, data)
    assert f"field '{section}.{field}'" in message and str(other) in message
    assert SECRET not in message


def _population_table_is(tmp_path: Path, make) -> tuple[Path, Path]:
    """The fixture policy, its landscape's population.csv replaced by what `make(path)` puts there."""
    policy = write_policy(tmp_path, policy_dict("x.csv"))
    table = tmp_path / "population.csv"
    table.unlink()
    make(table)
    return policy, table


def _sparse(size: int):
    def make(path: Path) -> None:
        with path.open("wb") as file:
            file.truncate(size)  # sparse: costs no disk

    return make


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
        (os.mkfifo, "not a regular file"),
        (lambda p: p.mkdir(), "not a regular file"),
        (_sparse(MAX_POPULATION_BYTES + 1), "larger than the 64 MiB"),
        (lambda p: None, "cannot read"),
        (lambda p: p.write_text(f"{SECRET},when\n1,2\n"), "not a population table"),
        (lambda p: p.write_text(f"zone,population\n1km,{SECRET}\n"), "not a population table"),
    ],
)
def test_the_population_table_of_the_landscape_is_checked_at_load(tmp_path, make, problem):
    """The table a landscape names (`population: {table: ...}`), read without a bound or a type check, would
    let a symlink to /dev/zero run out of memory, a 20 GB sparse file raise MemoryError and a FIFO hang, all
    after counting and protection (exit 3). It is read at policy load, bounded, a regular file only, and
    never quoted."""
    if make is os.mkfifo and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    policy, table = _population_table_is(tmp_path, make)
    message = _unreadable_message(policy)
    assert str(policy) in message and "field 'risk.landscape'" in message and "population.table" in message
    assert str(table) in message and problem in message and SECRET not in message, message


def test_a_population_table_on_dev_zero_exits_2_before_any_work(tmp_path, fixture_traces, capsys):
    policy, _ = _population_table_is(tmp_path, lambda p: p.symlink_to("/dev/zero"))
    policy.write_text(policy.read_text().replace("x.csv", str(fixture_traces)))
    code = release(policy, tmp_path, "2018-01", traces=[fixture_traces])
    err = capsys.readouterr().err
    assert code == 2 and "population.table" in err and "not a regular file" in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))


def test_a_good_population_table_is_read_as_the_risk_stage_reads_it(tmp_path):
    from spatial_release.risk.landscape import load_landscape, read_population_table

    load_policy(write_policy(tmp_path, policy_dict("x.csv"), population=7))
    landscape, _ = load_landscape(tmp_path / "landscape.yaml")
    population = read_population_table(tmp_path / "landscape.yaml", landscape)
    assert population and set(population.values()) == {7.0}


def test_missing_unit_values_default_and_override(tmp_path):
    policy = load_policy(write_policy(tmp_path, policy_dict("x.csv")))
    assert {"NULL", "NA", "nan", "-"} <= set(policy.source.missing_unit_values)
    data = policy_dict("x.csv")
    data["source"]["missing_unit_values"] = ["unknown", "-1"]
    assert load_policy(write_policy(tmp_path, data)).source.missing_unit_values == ["unknown", "-1"]
    data["source"]["missing_unit_values"] = "unknown"
    assert "field 'source.missing_unit_values'" in _error_for(tmp_path, data)
