"""The auxiliary landscape: what outsiders are assumed to know, versioned as a reviewed YAML file."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spatial_release.risk.estimator import RiskParams


class LandscapeError(ValueError):
    pass


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
    adversary: Literal["prosecutor", "journalist"] = "prosecutor"
    population: PopulationSource | None = None

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
        fields = "; ".join(f"field '{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors())
        raise LandscapeError(f"{path}: invalid landscape: {fields}") from None
    return landscape, hashlib.sha256(raw).hexdigest()


def landscape_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
