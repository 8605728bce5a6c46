"""The policy's `protection` block: k-anonymity stays the default; `method: dp` is validated field by field,
and an error names the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fixture import policy_dict, write_policy
from support.paths import PROJECT_ROOT

from spatial_release.policy import DpProtection, PolicyError, load_policy

DP = {
    "method": "dp",
    "epsilon": 1.0,
    "delta": 1e-6,
    "max_buckets": 4,
    "max_areas": 1,
    "seed": 7,
    "budget": {"epsilon": 4.0, "delta": 1e-5},
}


def dp_policy_dict(**protection) -> dict:
    data = policy_dict("x.csv")
    data["protection"] = {**DP, **protection}
    return data


def _error_for(tmp_path: Path, data: dict) -> str:
    path = write_policy(tmp_path, data)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert str(path) in str(caught.value)
    return str(caught.value)


def test_kanon_is_the_default_and_can_be_named(tmp_path):
    assert load_policy(write_policy(tmp_path, policy_dict("x.csv"))).protection.method == "kanon"
    data = policy_dict("x.csv")
    data["protection"] = {"method": "kanon"}
    assert load_policy(write_policy(tmp_path, data)).protection.method == "kanon"


def test_dp_policy_loads_with_its_loss_and_budget(tmp_path):
    policy = load_policy(write_policy(tmp_path, dp_policy_dict()))
    assert isinstance(policy.protection, DpProtection)
    assert policy.protection.loss == (1.0, 1e-6) and policy.protection.budget_loss == (4.0, 1e-5)
    zcdp = dp_policy_dict(accounting="zcdp", epsilon=None, rho=0.1, budget={"rho": 0.5, "delta": 1e-5})
    del zcdp["protection"]["epsilon"]
    protection = load_policy(write_policy(tmp_path, zcdp)).protection
    assert isinstance(protection, DpProtection) and protection.loss == (0.1, 1e-6)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda p: p.pop("epsilon"), "epsilon is required under accounting 'approx'"),
        (lambda p: p.update(rho=0.5), "rho is not used under accounting 'approx'"),
        (lambda p: p.update(epsilon=-1), "protection.dp.epsilon"),
        (lambda p: p.update(delta=1.5), "protection.dp.delta"),
        (lambda p: p.update(max_buckets=0), "protection.dp.max_buckets"),
        (lambda p: p.update(seed="sometimes"), "protection.dp.seed"),
        (lambda p: p.update(epsilon=5.0), "exceeds the population's budget"),
        (lambda p: p.pop("budget"), "protection.dp.budget"),
        (lambda p: p.update(method="laplace"), "protection"),
        (lambda p: p.update(colour="blue"), "protection.dp.colour"),
    ],
)
def test_bad_dp_block_names_file_and_field(tmp_path, change, words):
    data = dp_policy_dict()
    change(data["protection"])
    assert words in _error_for(tmp_path, data)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d["suppression"].update(zeros="zeros.csv"), "no structural zeros"),
        (lambda d: d["protection"].update(compare=[{"rung": "5h", "max_buckets": 1}]), "protection.compare[0].rung"),
    ],
)
def test_dp_refuses_what_it_cannot_protect(tmp_path, change, words):
    data = dp_policy_dict()
    change(data)
    (tmp_path / "zeros.csv").write_text("cell_id\n")
    assert words in _error_for(tmp_path, data)


def test_the_shipped_dp_programme_blocks_on_the_dp_guarantees():
    """policies/jc-bikes-dp.yaml: its graph's blocking checks on the candidate are the DP ones; the k floor and the
    suppression audit are replaced by the mechanism's guarantee."""
    from spatial_release.definitions import defs as load_definitions

    graph = load_definitions().resolve_asset_graph()
    checks = {key.name for key in graph.asset_check_keys if key.asset_key.path[0] == "jc_bikes_dp"}
    assert {"withheld_absent", "no_identifiers", "dp_mechanism", "privacy_budget", "risk_budget"} <= checks
    assert not {"k_floor", "suppression_audit", "suppression_budget", "structural_zeros_hold"} & checks
    assert load_policy(PROJECT_ROOT / "policies" / "jc-bikes-dp.yaml").protection.method == "dp"
