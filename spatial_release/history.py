"""The release history a release is judged against, from the ledger: which earlier releases draw on the same
population, which of them fall in the risk window, the risk figures they spent, and when a release's per-unit
data is past its retention.

Pure functions of the policy, the period and the ledger (no work area, no Dagster): the protection, checks,
risk, publish and review steps and the command line all read the history through them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from spatial_release.ledger import Ledger, LedgerCorrupt, ReleaseEntry
from spatial_release.period import Period
from spatial_release.policy import Policy, RiskSpec


def spent_figures(entries: Iterable[ReleaseEntry]) -> list[float]:
    """The risk figure each earlier release spent of the budget. Every published release has one (the gate
    blocks a release without an estimate), so an entry without it cannot be counted as spending nothing."""
    figures = []
    for entry in entries:
        if entry.release_figure is None:
            raise LedgerCorrupt(
                entry.seq, f"release {entry.dataset} {entry.period} records no risk figure: the budget it spent is unknown"
            )
        figures.append(entry.release_figure)
    return figures


def population_releases(policy: Policy, ledger: Ledger, inputs: Iterable[str] = ()) -> list[ReleaseEntry]:
    """Every release, of any programme, drawn on the policy's population (ledger order), from a ledger read
    under its lock and cross-checked with releases/ (a deleted or truncated ledger must not reset the
    cumulative risk).

    The population is keyed on the data too: a release that read one of the same input files (by content:
    `inputs`, the sha256 of this release's files, and those the dataset's own releases recorded) is of the
    population whatever its label says, so a copy of a policy under another name and without `population:`
    spends the same budget and is audited with it."""
    entries = ledger.checked_releases()
    # A dataset's own earlier releases always count, whatever population they were recorded under: renaming
    # the population must not reset the budget.
    own = [e for e in entries if e.population == policy.population_key or e.dataset == policy.name]
    files = set(inputs) | {digest for e in own for digest in e.inputs}
    return [e for e in entries if e in own or files & set(e.inputs)]


def population_releases_before(
    policy: Policy, period: Period, ledger: Ledger, inputs: Iterable[str] = ()
) -> list[ReleaseEntry]:
    """Every release of the policy's population but (policy, period) itself (no window: a privacy budget
    counts them all)."""
    return [e for e in population_releases(policy, ledger, inputs) if e.key != (policy.name, period.label)]


def earlier_releases(policy: Policy, period: Period, ledger: Ledger, inputs: Iterable[str] = ()) -> list[ReleaseEntry]:
    """The earlier releases in the risk window: this dataset's and those of every programme that shares its
    population (a quarterly and a monthly programme over the same bikes spend one budget)."""
    entries = population_releases_before(policy, period, ledger, inputs)
    window = policy.risk.window if policy.risk else None
    return entries[-window:] if window else entries


def key_retention_days(policy: Policy) -> int:
    """How long a release's per-unit artefacts are kept: the policy's `risk.key_retention_days`, or its default
    for a policy without a risk section (a DP programme's membership files are per-unit data too)."""
    if policy.risk is None:
        return int(RiskSpec.model_fields["key_retention_days"].default)
    return policy.risk.key_retention_days


def expired(policy: Policy, entry: ReleaseEntry, now: datetime) -> bool:
    """Whether a release entry is past the policy's key retention (its per-unit data may be gone)."""
    return now - entry.recorded_at > timedelta(days=key_retention_days(policy))
