"""A structural-zeros list naming a grid cell in a non-canonical spelling (a leading zero) or an off-grid
corner: accepted, that id would be published as 0 in every bucket with the real cell's polygon, beside the
real cell: a false zero. Such lists are refused at load."""

from __future__ import annotations

import pytest
from support.fixture import CELL_C, cell_id, fixture_pings, policy_dict, write_policy
from support.releases import release

# Whole releases: left out of the fast tier (pytest -m "not slow").
pytestmark = pytest.mark.slow


def _release_with_zeros(tmp_path, listed: str, capsys) -> tuple[int, str]:
    traces = tmp_path / "traces.csv"
    fixture_pings().to_csv(traces, index=False)
    (tmp_path / "zeros.csv").write_text(f"cell_id\n{listed}\n")
    data = policy_dict(str(traces))
    data["suppression"]["zeros"] = "zeros.csv"
    code = release(write_policy(tmp_path, data), tmp_path)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "listed", [f"1000mE0{CELL_C[0]}N{CELL_C[1]}", f"1000mE{CELL_C[0] + 1}N{CELL_C[1]}", f"500mE{CELL_C[0]}N{CELL_C[1]}"]
)
def test_a_zeros_list_naming_no_grid_cell_exactly_is_refused(tmp_path, capsys, listed):
    code, err = _release_with_zeros(tmp_path, listed, capsys)
    assert code in (1, 2) and "not cells of the policy's geometry" in err and listed in err
    assert not (tmp_path / "out" / "releases" / "fixture" / "2018-Q1").exists()


def test_control_a_canonical_empty_cell_is_accepted(tmp_path, capsys):
    code, err = _release_with_zeros(tmp_path, cell_id((CELL_C[0] + 5000, CELL_C[1])), capsys)
    assert code == 0, err
