"""One release programme per policy file: where its graph's names come from, and which files make one.

Every `*.yaml` file directly in the policies folder (`SPATIAL_RELEASE_POLICIES`, default the project's
`policies/`) is a programme with its own asset graph under its own key prefix (the dataset's name with `-`
as `_`: `jc-bikes` -> `jc_bikes/published_release`), its own partitions (quarterly or monthly, from the
policy's `period`), jobs, schedules and sensors. A file that does not load becomes a `ProgrammeError`: its
graph is one asset that names the file and the error, and the other programmes load as usual.

Why an asset factory and not a Dagster component per policy: a policy file is already the declarative,
validated configuration (pydantic, with file-and-field errors); a component would put a second YAML layer
(`defs.yaml` per policy, scaffolded with `dg`) in front of it, so adding a programme would mean two files
and a `dg scaffold`, and a bad component file fails the whole code location. A factory over the policies
folder keeps one file per programme, lets one bad file fail alone, and is the same function the command
line calls for a policy anywhere on disk (so the command line runs the same jobs as the UI).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from spatial_release.errors import UserError
from spatial_release.policy import Policy, load_policy

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DATASET_TAG = "spatial_release/dataset"
POLICY_TAG = "spatial_release/policy"
POLICY_SHA_TAG = "spatial_release/policy_sha256"
DEFAULT_OWNERS = ["team:disclosure-control"]


def policies_folder() -> Path:
    return Path(os.environ.get("SPATIAL_RELEASE_POLICIES") or PROJECT_ROOT / "policies")


def key_prefix(name: str) -> str:
    """A dataset or file name as an asset-key prefix (letters, digits and `_` only)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


class PolicyChanged(UserError):
    """The policy file changed after its graph was built: its partitions, names and tags may be stale."""


@dataclass(frozen=True)
class Programme:
    """A loaded policy file and the names of its graph."""

    path: Path
    policy: Policy

    @property
    def prefix(self) -> str:
        return key_prefix(self.policy.name)

    @property
    def cadence(self) -> str:
        return self.policy.period

    @property
    def owners(self) -> list[str]:
        return list(self.policy.owners or DEFAULT_OWNERS)

    def key(self, name: str) -> dg.AssetKey:
        return dg.AssetKey([self.prefix, name])

    def name(self, suffix: str) -> str:
        """A job, schedule or sensor name of this programme, e.g. `jc_bikes_release_job`."""
        return f"{self.prefix}_{suffix}"

    def tags(self) -> dict[str, str]:
        """Every run of the programme carries them (Dagster run tags are strings)."""
        return {
            DATASET_TAG: self.policy.name,
            POLICY_TAG: f"{self.policy.name} v{self.policy.version}",
            POLICY_SHA_TAG: self.policy.sha256[:16],
        }

    def load(self) -> Policy:
        """The policy as a step reads it now; refused when the file changed after the graph was built, since
        the graph's partitions, tags and names come from the file as it was then."""
        policy = load_policy(self.path)
        if policy.sha256 != self.policy.sha256:
            raise PolicyChanged(
                f"{self.path} changed since the code location loaded it (sha256 "
                f"{self.policy.sha256[:12]} -> {policy.sha256[:12]}): reload the code location "
                "(Deployment > Reload) so the graph, its partitions and its tags match the file"
            )
        return policy


@dataclass(frozen=True)
class ProgrammeError:
    """A policy file that does not load; its graph shows the error instead of taking the others down."""

    path: Path
    error: str

    @property
    def prefix(self) -> str:
        return key_prefix(self.path.stem)


def load_programme(path: Path) -> Programme:
    return Programme(Path(path).resolve(), load_policy(path))


def discover(folder: Path | None = None) -> list[Programme | ProgrammeError]:
    """Every policy file of the folder as a programme, or as the error that stops it loading. Two files
    of one dataset are both refused: their graphs, ledger entries and release folders would collide."""
    folder = folder or policies_folder()
    found: list[Programme | ProgrammeError] = []
    for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
        try:
            found.append(load_programme(path))
        except (UserError, ValueError, OSError) as exc:
            found.append(ProgrammeError(path.resolve(), str(exc)))
    by_prefix: dict[str, list[Path]] = {}
    for item in found:
        by_prefix.setdefault(item.prefix, []).append(item.path)
    return [
        ProgrammeError(
            item.path,
            f"{item.path}: dataset key {item.prefix!r} is also used by "
            f"{', '.join(str(p) for p in by_prefix[item.prefix] if p != item.path)}; "
            "each policy file needs its own `name`",
        )
        if isinstance(item, Programme) and len(by_prefix[item.prefix]) > 1
        else item
        for item in found
    ]
