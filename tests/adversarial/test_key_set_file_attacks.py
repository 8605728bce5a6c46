"""Attacks on the coded key set files read by the advantage gate (the default risk model): a file cut short
(its metadata kept) must not give fewer key sets silently, and a file cut mid-byte must be refused naming it.
The gate runs the same checks on a file as the uniqueness window does, and the publish step's gate reads the
risk step's kept file, so an edited kept file is refused there too, never gated as it is."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest
from support.key_sets import rewritten_key_set_file
from support.releases import protected_candidate

from spatial_release.risk import keysets
from spatial_release.stages import advantage as advantage_stage
from spatial_release.stages import keys as keys_stage
from spatial_release.stages import risk as risk_stage
from spatial_release.stages.advantage import read_key_sets

# Whole releases: left out of the fast tier (pytest -m "not slow").
pytestmark = pytest.mark.slow


@pytest.fixture
def kept(tmp_path, fixture_policy):
    ctx = protected_candidate(fixture_policy, tmp_path)
    keys_stage.write_risk_areas(ctx)
    assert keys_stage.keep_released_keys(ctx, None) is not None
    return ctx


is_unit = lambda f: f["u"].notna() & f["k"].isna()  # noqa: E731
is_pair = lambda f: f["u"].notna() & f["k"].notna()  # noqa: E731
EDITS = {
    "half_the_pairs_cut": lambda f: f.drop(f.index[is_pair(f)][len(f.index[is_pair(f)]) // 2 :]),
    "one_pair_cut": lambda f: f.drop(f.index[is_pair(f)][-1]),
    "a_unit_name_row_cut": lambda f: f[~(is_unit(f) & (f["u"] == 0))],
    "a_pair_code_out_of_range": lambda f: f.assign(
        u=f["u"].where(~(is_pair(f) & (f.index == f.index[is_pair(f)][0])), 10**6)
    ),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_advantage_gate_refuses_a_coded_file_that_does_not_hold_what_it_says(kept, tmp_path, edit):
    zones = kept.risk_zones
    sets, _, _ = read_key_sets(kept.area.unit_keys, zones)  # the unedited file reads whole
    counts = keysets.coded_file_counts(kept.area.unit_keys)
    assert counts is not None
    assert len(sets.unit_keys) == counts["pairs"]
    bad = rewritten_key_set_file(kept.area.unit_keys, tmp_path / f"{edit}.parquet", EDITS[edit])
    assert keysets.coded_file_counts(bad) == counts  # its metadata kept
    with pytest.raises(ValueError, match=f"{bad}: not a valid coded key set file"):
        read_key_sets(bad, zones)


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_check_on_the_rows_read_finds_what_the_scan_of_the_file_finds(kept, tmp_path, edit):
    """The advantage gate checks the rows it has read (`check_coded_table`), the ranged road scans the file
    (`check_coded_file`): the same refusal, word for word, and both accept the unedited file."""
    columns = ["u", "k", "name", "cell_id"]
    good = kept.area.unit_keys
    counts = keysets.coded_file_counts(good)
    assert counts is not None
    keysets.check_coded_table(good, pq.read_table(good, columns=columns), counts)
    assert keysets.check_coded_file(good) == counts
    bad = rewritten_key_set_file(good, tmp_path / f"{edit}.parquet", EDITS[edit])
    with pytest.raises(ValueError, match="not a valid coded key set file") as scanned:
        keysets.check_coded_file(bad)
    with pytest.raises(ValueError, match="not a valid coded key set file") as in_memory:
        keysets.check_coded_table(bad, pq.read_table(bad, columns=columns), counts)
    assert str(in_memory.value) == str(scanned.value)


def test_a_key_set_file_cut_mid_byte_is_refused_naming_it(kept, tmp_path):
    data = kept.area.unit_keys.read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])
    zones = kept.risk_zones
    with pytest.raises(ValueError, match=f"{cut}: not a readable key set file"):
        read_key_sets(cut, zones)
    with pytest.raises(ValueError, match=f"{cut}: not a readable key set file"):
        risk_stage.window_key_sets(kept, cut, [], [])


def test_a_coded_file_of_another_version_is_refused_by_the_advantage_gate(kept, tmp_path):
    table = pq.read_table(kept.area.unit_keys)
    other = tmp_path / "version.parquet"
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, keysets.FILE_FORMAT: b"2"}), other)
    with pytest.raises(ValueError, match=f"{other}: coded key set file of version"):
        read_key_sets(other, lambda cells: pd.Series(cells.to_numpy(), index=cells.to_numpy()))


@pytest.mark.parametrize("edit", ["one_pair_cut", "a_unit_name_row_cut"])
def test_the_ranged_road_checks_a_coded_file_before_reading_it(kept, tmp_path, edit):
    """Held: the ranged estimate numbers every part first, each coded file checked (`keysets._number`)."""
    bad = rewritten_key_set_file(kept.area.unit_keys, tmp_path / f"{edit}.parquet", EDITS[edit])
    with pytest.raises(ValueError, match=f"{bad}: not a valid coded key set file"):
        risk_stage.window_key_sets(kept, bad, [], [], ranges_above=1)
    assert risk_stage.window_key_sets(kept, kept.area.unit_keys, [], [], ranges_above=1).units > 0


def test_a_key_set_file_of_another_period_is_refused_by_the_advantage_gate(kept, tmp_path):
    """Held: the key sets of another period (here the same file with its keys' bucket year changed) name keys
    the candidate does not publish; the gate fails closed, naming the file."""
    from spatial_release.risk.landscape import load_landscape

    other = rewritten_key_set_file(
        kept.area.unit_keys,
        tmp_path / "other_period.parquet",
        lambda f: f.assign(name=f["name"].where(f["u"].notna(), f["name"].str.replace("@2018-", "@2017-"))),
    )
    assert keysets.check_coded_file(other)  # a well-formed file
    landscape, _ = load_landscape(kept.policy.resolve(kept.policy.risk.landscape))
    with pytest.raises(ValueError, match=f"{other}: keys without a published count in the candidate"):
        advantage_stage.candidate_advantage(kept, landscape, other)
