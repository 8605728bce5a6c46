"""The auxiliary landscape: what outsiders are assumed to know, versioned as a reviewed YAML file."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from spatial_release.configfile import MAX_POPULATION_BYTES, ConfigFileError, load_yaml, read_config
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
        "(a telco's subscribers among residents)"
    )
    adversary: Adversary
    population: PopulationSource | None = None

    @model_validator(mode="after")
    def _adversary_fits_the_panel(self) -> Landscape:
        # The adversary is not a free choice: it follows from who is in the panel. When the panel is the
        # whole population, the outsider knows the target is in the data (prosecutor); a journalist figure
        # would divide the risk by a census crowd the target does not hide in.
        if self.panel == "whole" and self.adversary is not Adversary.PROSECUTOR:
            raise ValueError(
                "panel 'whole' (every unit is in the data) needs adversary 'prosecutor': the "
                "outsider knows the target is in the data"
            )
        if self.panel == "sample" and self.adversary is not Adversary.JOURNALIST:
            raise ValueError(
                "panel 'sample' needs adversary 'journalist', with the public population the panel is drawn from"
            )
        if self.adversary is Adversary.JOURNALIST and self.population is None:
            raise ValueError("adversary 'journalist' needs 'population' (the public crowd the panel is drawn from)")
        return self

    def params(self) -> RiskParams:
        return RiskParams(points=self.points, draws=self.draws, seed=self.seed, threshold=self.threshold)


def load_landscape(path: Path) -> tuple[Landscape, str]:
    """The landscape and the sha256 of its bytes (the sensor watches that hash), read as the policy's check
    read it: a bounded read of a regular file and the strict YAML loader, quoting nothing of the file."""
    try:
        raw = read_config(path, "landscape")
        landscape = Landscape.model_validate(load_yaml(raw, path, "landscape", quote=False))
    except ConfigFileError as exc:
        raise LandscapeError(str(exc)) from None
    except ValidationError as exc:
        fields = "; ".join(
            (f"field '{'.'.join(map(str, e['loc']))}': " if e["loc"] else "") + e["msg"] for e in exc.errors()
        )
        raise LandscapeError(f"{path}: invalid landscape: {fields}") from None
    return landscape, hashlib.sha256(raw).hexdigest()


def population_table_path(landscape_path: Path, landscape: Landscape) -> Path | None:
    """The population table the landscape at `landscape_path` names (relative to it), or None; symlinks are
    not resolved, so messages name what the landscape names (the read follows them)."""
    if landscape.population is None or not landscape.population.table:
        return None
    return landscape_path.parent / landscape.population.table


def read_population_table(landscape_path: Path, landscape: Landscape) -> dict[str, float] | None:
    """Public population per zone from the landscape's `population.table` (None when it names none): a
    bounded read of a regular file (a symlink to /dev/zero ran out of memory, a FIFO hung, and both only after
    counting and protection had run), then columns `zone` and `population`, the latter numbers. Raises
    LandscapeError naming the landscape, the field and the table, never quoting the table's content."""
    target = population_table_path(landscape_path, landscape)
    if target is None:
        return None
    where = f"{landscape_path}: field 'population.table'"
    try:
        raw = read_config(target, "population table", MAX_POPULATION_BYTES)
    except ConfigFileError as exc:
        raise LandscapeError(f"{where}: {exc}") from None
    try:
        table = pd.read_csv(io.BytesIO(raw), dtype={"zone": str})
        population = table["population"].astype(float)
        zones = table["zone"]
    except (ValueError, KeyError, pd.errors.ParserError, UnicodeDecodeError):
        raise LandscapeError(
            f"{where}: {target} is not a population table (a CSV with columns 'zone' and "
            "'population', a number on every row)"
        ) from None
    return dict(zip(zones, population))


def landscape_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
