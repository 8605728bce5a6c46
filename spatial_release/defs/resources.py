"""Where things live: the policy, the trace files, the release, work and ledger folders.

Defaults point at the embedded demo (policies/demo.yaml, synthetic traces) inside the project folder, so
`dagster dev` and the schedule work out of the box; each can be set per run or by environment variable.
"""


import os
from pathlib import Path

import dagster as dg

from spatial_release.ledger import Ledger
from spatial_release.period import Period
from spatial_release.policy import Policy, load_policy
from spatial_release.stages import WorkArea

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _default(env: str, relative: str) -> str:
    return os.environ.get(env, str(PROJECT_ROOT / relative))


class ReleaseSettings(dg.ConfigurableResource):
    policy: str = _default("SPATIAL_RELEASE_POLICY", "policies/demo.yaml")
    traces: list[str] = []
    releases_dir: str = _default("SPATIAL_RELEASE_RELEASES", "releases")
    work_dir: str = _default("SPATIAL_RELEASE_WORK", "work")
    ledger_dir: str = _default("SPATIAL_RELEASE_LEDGER", "ledger")
    alerts_dir: str = _default("SPATIAL_RELEASE_ALERTS", "alerts")

    def load_policy(self) -> Policy:
        return load_policy(self.policy)

    def work_area(self, policy: Policy, period: Period) -> WorkArea:
        return WorkArea.for_release(Path(self.work_dir), policy, period)

    def ledger(self) -> Ledger:
        return Ledger(Path(self.ledger_dir))
