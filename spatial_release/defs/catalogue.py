"""Every programme's definitions: its release graph, its risk review, and, for a policy file that does not
load, one asset that names the file and the error (so a bad file shows in the UI and fails alone)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from spatial_release.defs.alerts import build_alert_sensor, build_refusal_sensor
from spatial_release.defs.guard import build_publication_guard
from spatial_release.defs.programmes import Programme, ProgrammeError, discover, load_programme
from spatial_release.defs.release import ReleaseGraph, build_release_graph
from spatial_release.defs.resources import CountingEngine, ReleaseSettings
from spatial_release.defs.review import ReviewGraph, build_review

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProgrammeDefs:
    programme: Programme
    release: ReleaseGraph
    review: ReviewGraph

    @property
    def jobs(self) -> list:
        return [*self.release.jobs, self.review.job]

    def definitions(self) -> dg.Definitions:
        return dg.Definitions(
            assets=[*self.release.assets, self.review.asset],
            asset_checks=[*self.release.checks, self.review.check],
            jobs=self.jobs,
            schedules=[self.release.schedule, self.review.schedule],
            sensors=[self.release.publish_sensor, self.release.period_sensor, self.review.sensor],
        )

    def runnable(self) -> dg.Definitions:
        """This programme alone, with the shared resources: what the command line executes."""
        return dg.Definitions.merge(self.definitions(), shared_resources())

    def alert_sensor(self) -> dg.SensorDefinition:
        return build_alert_sensor({job.name: self.programme for job in self.jobs})


def shared_resources() -> dg.Definitions:
    return dg.Definitions(resources={"settings": ReleaseSettings(), "counting": CountingEngine()})


def build_programme(programme: Programme) -> ProgrammeDefs:
    return ProgrammeDefs(programme, build_release_graph(programme), build_review(programme))


def programme_for(policy_path: str | Path) -> ProgrammeDefs:
    """The definitions of the policy file at `policy_path` (anywhere on disk): what the command line runs."""
    return build_programme(load_programme(Path(policy_path)))


def invalid_policy_asset(error: ProgrammeError) -> dg.AssetsDefinition:
    """A stand-in graph for a policy file that does not load: its description is the error, and
    materialising it reads the file again and fails with the error until the file is fixed."""

    @dg.asset(
        name="invalid_policy_file",
        key_prefix=[error.prefix],
        group_name=error.prefix,
        kinds={"yaml"},
        description=f"THIS POLICY FILE DOES NOT LOAD: {error.path}\n\n{error.error}\n\nFix the file and "
        "reload the code location; the other programmes are not affected.",
        metadata={"policy_file": dg.MetadataValue.path(str(error.path)), "error": error.error},
    )
    def invalid_policy_file() -> None:
        try:
            load_programme(error.path)
        except Exception as exc:  # the error the file has now, whatever its kind
            raise dg.Failure(description=f"{error.path} does not load: {exc}", allow_retries=False) from None
        raise dg.Failure(
            description=f"{error.path} loads now: reload the code location to see its graph", allow_retries=False
        )

    return invalid_policy_file


@dataclass(frozen=True)
class Catalogue:
    programmes: list[ProgrammeDefs]
    errors: list[ProgrammeError]

    def job_programmes(self) -> dict[str, Programme]:
        return {job.name: p.programme for p in self.programmes for job in p.jobs}

    def definitions(self) -> dg.Definitions:
        """Every programme's graph, the stand-ins of bad files, the alert and refusal sensors over all release,
        publish and review jobs, the publication guard (sensor and job) over every programme's
        published_release, and the shared resources (configured from the environment)."""
        guard, guard_job = build_publication_guard([p.programme for p in self.programmes])
        return dg.Definitions.merge(
            *(p.definitions() for p in self.programmes),
            dg.Definitions(
                assets=[invalid_policy_asset(e) for e in self.errors],
                jobs=[guard_job] if self.programmes else [],
                sensors=(
                    [build_alert_sensor(self.job_programmes()), build_refusal_sensor(self.job_programmes()), guard]
                    if self.programmes
                    else []
                ),
                # Every job of the location (the release, publish and review jobs, "Materialize all") runs its
                # steps in the run's own process: the multiprocess default starts a process per step, each
                # loading the code location again, which costs far more than the work of most checks. The
                # heavy steps use worker processes of their own.
                executor=dg.in_process_executor,
            ),
            shared_resources(),
        )


def build_catalogue(folder: Path | None = None) -> Catalogue:
    programmes, errors = [], []
    for item in discover(folder):
        if isinstance(item, ProgrammeError):
            log.warning("policy file %s does not load: %s", item.path, item.error)
            errors.append(item)
        else:
            programmes.append(build_programme(item))
    return Catalogue(programmes, errors)
