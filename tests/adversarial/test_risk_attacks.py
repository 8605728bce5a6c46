"""Attacks on the risk gate: an adversary chosen to flatter the figure, and one budget split across
programmes that count the same units."""

from __future__ import annotations

import pytest
import yaml

from conftest import PROJECT_ROOT
from spatial_release.risk.landscape import LandscapeError, load_landscape


def _landscape(tmp_path, **fields) -> object:
    data = {"version": 1, "points": 4, "population": {"table": "population.csv"}, **fields}
    path = tmp_path / "landscape.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("panel, adversary", [("whole", "journalist"), ("sample", "prosecutor")])
def test_an_adversary_that_does_not_fit_the_panel_is_refused(tmp_path, panel, adversary):
    """Negative control: a whole fleet gated with a journalist figure (the census crowd a bike does not hide
    in) made 0.0043 out of prosecutor figures of 0.17 to 0.91; the landscape now refuses that pairing."""
    path = _landscape(tmp_path, panel=panel, adversary=adversary)
    with pytest.raises(LandscapeError, match=f"{path}.*panel '{panel}'"):
        load_landscape(path)


def test_a_landscape_must_say_who_is_in_the_panel(tmp_path):
    path = _landscape(tmp_path, adversary="prosecutor")
    with pytest.raises(LandscapeError, match="field 'panel'"):
        load_landscape(path)


def test_the_shipped_landscapes_fit_their_panels():
    bikes, _ = load_landscape(PROJECT_ROOT / "policies/landscapes/jersey-city.yaml")
    assert (bikes.panel, bikes.adversary) == ("whole", "prosecutor")  # every bike of the fleet is in the trips
    demo, _ = load_landscape(PROJECT_ROOT / "policies/landscapes/demo.yaml")
    assert (demo.panel, demo.adversary) == ("sample", "journalist")  # subscribers among residents
