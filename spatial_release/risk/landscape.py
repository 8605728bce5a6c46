"""The auxiliary landscape: what outsiders are assumed to know, versioned as a reviewed YAML file."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from spatial_release.errors import UserError
from spatial_release.risk.estimator import RiskParams
from spatial_release.risk.figures import Adversary


class LandscapeError(UserError, ValueError):
    """A landscape file is invalid or does not fit the policy (e.g. its adversary does not match its panel)."""


class PopulationSource(BaseModel):
    """Public population per risk zone: polygons with a population column (joined to the zones by each
    polygon's representative point), or a table with columns `zone` and `population`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str | None = Field(None, description="polygons with a population column, relative to the landscape")
    value: str | None = Field(None, description="the population column, e.g. POP100")
    table: str | None = Field(None, description="CSV with zone,population, relative to the landscape file")


class Landscape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: int = Field(ge=1)
    points: int = Field(4, ge=1, description="spatio-temporal points of a trace the adversary knows")
    precision: str = Field("released (cell, bucket) keys", description="the resolution of that knowledge")
    draws: int = Field(10, ge=1)
    seed: int = 20180101
    threshold: float = Field(0.2, gt=0, le=1)
    panel: Literal["whole", "sample"] = Field(
        description="who is in the data: 'whole' when every unit an outsider could target is in it (a bike "
                    "operator's whole fleet), 'sample' when the data holds a share of a public population "
                    "(a telco's subscribers among residents)")
    adversary: Adversary
    population: PopulationSource | None = None

    @model_validator(mode="after")
    def _adversary_fits_the_panel(self) -> "Landscape":
        # The adversary is not a free choice: it follows from who is in the panel. When the panel is the
        # whole population, the outsider knows the target is in the data (prosecutor); a journalist figure
        # would divide the risk by a census crowd the target does not hide in.
        if self.panel == "whole" and self.adversary is not Adversary.PROSECUTOR:
            raise ValueError("panel 'whole' (every unit is in the data) needs adversary 'prosecutor': the "
                             "outsider knows the target is in the data")
        if self.panel == "sample" and self.adversary is not Adversary.JOURNALIST:
            raise ValueError("panel 'sample' needs adversary 'journalist', with the public population the "
                             "panel is drawn from")
        if self.adversary is Adversary.JOURNALIST and self.population is None:
            raise ValueError("adversary 'journalist' needs 'population' (the public crowd the panel is drawn from)")
        return self

    def params(self) -> RiskParams:
        return RiskParams(points=self.points, draws=self.draws, seed=self.seed, threshold=self.threshold)


def load_landscape(path: Path) -> tuple[Landscape, str]:
    """The landscape and the sha256 of its bytes (the sensor watches that hash)."""
    try:
        raw = path.read_bytes()
        landscape = Landscape.model_validate(yaml.safe_load(raw))
    except OSError as exc:
        raise LandscapeError(f"{path}: cannot read the landscape file ({exc.strerror})") from None
    except ValidationError as exc:
        fields = "; ".join((f"field '{'.'.join(map(str, e['loc']))}': " if e["loc"] else "") + e["msg"]
                           for e in exc.errors())
        raise LandscapeError(f"{path}: invalid landscape: {fields}") from None
    return landscape, hashlib.sha256(raw).hexdigest()


def landscape_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
