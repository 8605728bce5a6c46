"""What the release assets show in the Dagster UI: markdown and numeric metadata from the stages' typed
results (public figures only; figures about withheld cells stay in the work area).

Figures are rounded to 4 significant digits for reading; the exact values stay in release.json and the work
area. Every risk figure names its adversary in its label, and the metadata keys are the same for every
release of a programme, so Dagster plots each of them over the programme's partitions.
"""

from __future__ import annotations

from spatial_release import stages
from spatial_release.policy.model import RiskSpec
from spatial_release.release import PublicFrontier, RiskRecord
from spatial_release.report import markdown_table
from spatial_release.report.page import frontier_table, uniqueness_label
from spatial_release.risk import public_ratio
from spatial_release.stages.results import ZoneFigures

SIGNIFICANT = 4
ZONE_DIGITS = 2


def readable(value: float | None) -> float | None:
    """`value` rounded to 4 significant digits (None stays None)."""
    return None if value is None else float(f"{value:.{SIGNIFICANT}g}")


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.{SIGNIFICANT}g}"


def _zone_figure(value: float | None) -> str:
    return "-" if value is None else f"{public_ratio(value, ZONE_DIGITS):g}"


LEDGER_PREFIX = 16  # hex digits of a ledger entry's hash, as the command line and `ledger verify` show it


def ledger_entry_shown(entry: str | None) -> str:
    """A ledger entry's hash as a metadata value: its first 16 hex digits. The whole 64 set the width of the
    asset page's metadata table past its panel at 1280 px, cutting off every entry beside it (the review's);
    the whole hash is in release.json, the ledger and the release page's markdown."""
    return "-" if entry is None else entry[:LEDGER_PREFIX]


def k_anonymity_report(counts: stages.PublicCounts, k: int) -> str:
    """What the release shows, from its public counts only: figures about withheld cells (how many, how
    many units they hold) would be facts outside the audited system, so they stay in the work area."""
    rows = [
        ("k (inclusive: n >= k published)", k),
        ("smallest published count", counts.smallest_published_count),
        ("published cells (non-zero)", counts.published_cells),
        ("structural zeros published", counts.structural_zero_cells_published),
        ("margins published", counts.published_margins),
    ]
    # per level and time rung (`tract@1w`: tract figures of the ladder's week rung), as the files show them
    rows += [(f"published at {level}", n) for level, n in (counts.published_by_level or {}).items()]
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


def headroom(risk: RiskRecord, spec: RiskSpec | None) -> dict[str, float | None]:
    """Both ceilings and what is left under each: per release (the worst zone's figure) and cumulative."""
    if spec is None:
        return {}
    per_release = None if risk.release_figure is None else spec.per_release_ceiling - risk.release_figure
    cumulative = None if risk.cumulative is None else spec.cumulative_ceiling - risk.cumulative
    return {
        "per_release_ceiling": spec.per_release_ceiling,
        "per_release_headroom": per_release,
        "cumulative_ceiling": spec.cumulative_ceiling,
        "cumulative_headroom": cumulative,
    }


def risk_metadata(risk: RiskRecord, spec: RiskSpec | None) -> dict[str, str | float | None]:
    """Risk metadata: the zones by name (`risk_worst_zone`, `risk_upper_bound_zone`), every figure under a key
    naming its adversary and what it is (`risk_journalist_worst_zone_figure`, `..._uniqueness_upper_bound`),
    and the warning when there is one."""
    adversary = risk.adversary
    figures = {
        f"risk_{adversary}_worst_zone_figure": risk.release_figure,
        f"risk_{adversary}_pooled": risk.pooled,
        f"risk_{adversary}_cumulative": risk.cumulative,
        **{f"risk_{adversary}_{name}": value for name, value in headroom(risk, spec).items()},
        f"risk_{adversary}_uniqueness_upper_bound": risk.upper_bound,
    }
    zones = {"risk_worst_zone": str(risk.worst_zone)}
    if risk.upper_bound is not None:
        zones["risk_upper_bound_zone"] = str(risk.upper_bound_zone)
    return {
        "risk_adversary": adversary,
        **zones,
        **{key: readable(value) for key, value in figures.items() if value is not None},
        **({"risk_warning": risk.warning} if risk.warning else {}),
    }


# What each model's gated figure is, and why the gate reads it (shown above the per-zone table).
GATE_EXPLAINED = {
    "attack": (
        "The gate reads the **attacks**: per zone, the share of targets that simulated adversaries re-identify "
        "from the published tables (trajectory recovery, then linkage with the adversary's known points, and "
        "membership inference), the worst attack's; the release figure is the worst zone's. A success rate over "
        "targets is a mean by construction: the expected share of the zone's units that the adversary gets "
        "right, which is what the ceilings bound."
    ),
    "advantage": (
        "The gate reads the **advantage**: what the release adds. Each attacker (membership inference against the "
        "thresholds, for every unit; the regularity guesses of the target's other places, for sampled targets) "
        "runs on this release and on the release without the target, with the same known points; a target's "
        "advantage is the difference, under its strongest attacker. Per zone the gate reads the upper confidence "
        "bound of the 95th percentile over targets, and the share of the zone's public population whose advantage "
        "is over the ceiling (never a mean: padding the data dilutes a mean). success with / without: the "
        "regularity attacker's success on this release and without the target, at the same percentile."
    ),
    "uniqueness": (
        "The gate reads the **uniqueness** model: per zone, the mean over its units of 1/n, where n is the number "
        "of units whose published keys contain the adversary's known points (the probability that a random "
        "target of the zone is singled out); the release figure is the worst zone's."
    ),
}
COLUMNS_EXPLAINED = (
    "How to read the zone table. The uniqueness columns assume the adversary recovers every trajectory "
    "perfectly from the tables (an upper bound): *mean* is the probability of singling out a random unit of "
    "the zone, *share at risk* the share of its units whose mean is over the threshold, and *worst* the largest "
    "1/n of any single unit and draw. A worst of 1 says that some unit's known points are shared by no other "
    "unit's keys: over a quarter of day buckets some trajectory is always unique, so a gate on the worst unit "
    "would refuse every release; the mean bounds the expected share singled out, and under the attack model "
    "the gate reads what an adversary actually recovers from aggregates. The prosecutor knows the unit is in "
    "the data; the journalist does not (journalist = prosecutor x the zone's share of the public population)."
)


def _zone_rows(risk: stages.RiskAssessment, attack: bool) -> list[str]:
    # No unit count per zone: a zone's count is not necessarily a published figure (it stays in risk.json).
    # Two significant digits, rounded up: an exact per-zone ratio (227/228) names the zone's unit count.
    def order(z: ZoneFigures) -> float:
        return -(z.attack_success or 0.0) if attack else -z.prosecutor_mean

    rows = []
    for z in sorted(risk.zones, key=order)[:30]:
        cells = [_zone_figure(z.attack_success), _zone_figure(z.attack_linkage), _zone_figure(z.attack_membership)]
        cells = cells if attack else []
        cells += [_zone_figure(z.prosecutor_mean), _zone_figure(z.prosecutor_at_risk), _zone_figure(z.prosecutor_worst)]
        rows.append(f"| {z.zone} | " + " | ".join([*cells, _zone_figure(z.journalist_mean)]) + " |")
    return rows


ADVANTAGE_COLUMNS = ["zone", "targets", "success without", "success with", "advantage", "advantage (upper bound)"]
ADVANTAGE_COLUMNS += ["strongest attacker", "count classifier", "exposed share of public population", "uniqueness bound"]


def advantage_table(risk: stages.RiskAssessment) -> str:
    """release.json's risk.zones as a table: the same rows, figures as published (rounded up)."""
    rows = risk.record().zones or []
    table = "| " + " | ".join(ADVANTAGE_COLUMNS) + " |\n|" + "---|" * len(ADVANTAGE_COLUMNS) + "\n"
    keys = ["zone", "targets", "success_without", "success_with", "advantage", "advantage_ucb", "strongest"]
    keys += ["classifier", "exposed_share", "uniqueness_bound"]
    for row in rows:
        shown = ["all" if k == "targets" and row[k] is None else ("-" if row[k] is None else str(row[k])) for k in keys]
        table += "| " + " | ".join(shown) + " |\n"
    return table


def risk_report(risk: stages.RiskAssessment, spec: RiskSpec | None) -> str:
    """The gate's headline, what the gate reads and why, both ceilings with their headroom, and the per-zone
    table with what each column means; every figure is labelled with the adversary it assumes."""
    room = headroom(risk, spec)
    attack = risk.model == "attack"
    head = (
        f"**{risk.status}**: {risk.reason}\n\n{GATE_EXPLAINED.get(risk.model, '')}\n\n"
        f"Gated adversary: **{risk.adversary}** (panel: {risk.panel}); gated figure: {risk.measure}.\n\n"
        "| figure | adversary | value | ceiling | headroom |\n|---|---|---|---|---|\n"
        f"| worst zone `{risk.worst_zone}` (this release) | {risk.adversary} | {_figure(risk.release_figure)} | "
        f"{_figure(room.get('per_release_ceiling'))} | {_figure(room.get('per_release_headroom'))} |\n"
        f"| pooled over zones (this release) | {risk.adversary} | {_figure(risk.pooled)} | - | - |\n"
        f"| cumulative (programme) | {risk.adversary} | {_figure(risk.cumulative)} | "
        f"{_figure(room.get('cumulative_ceiling'))} | {_figure(room.get('cumulative_headroom'))} |\n"
    )
    if risk.upper_bound is not None:
        bound = uniqueness_label(risk)
        head += f"| {bound} | {risk.adversary} | {_figure(risk.upper_bound)} | - | - |\n"
    if risk.warning:
        head += f"\n**Warning**: {risk.warning}\n"
    columns = ["zone"]
    columns += ["attack: success (gated)", "attack: linkage", "attack: membership"] if attack else []
    columns += ["uniqueness: prosecutor mean", "prosecutor: share at risk", "prosecutor: worst", "journalist: mean"]
    table = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    riskiest = "attack success" if attack else "prosecutor's mean"
    if risk.model == "advantage":
        return (
            f"{head}\nPer zone (release.json risk.zones; targets 'all': every unit of the zone):\n\n{advantage_table(risk)}"
        )
    return (
        f"{head}\n{COLUMNS_EXPLAINED}\n\nPer zone, the 30 riskiest by the {riskiest}:\n\n"
        + table
        + "\n".join(_zone_rows(risk, attack))
    )


def frontier_report(rows: PublicFrontier) -> str:
    """The configurations the coarsening pass tried, finest first, or those a DP release compared at its loss
    (public part only: no figure of the ones not published)."""
    return markdown_table(*frontier_table(rows))


ADVERSARY_EXPLAINED = {
    "prosecutor": "the prosecutor knows the target's unit is in the data and holds some of its published keys",
    "journalist": "the journalist holds some published keys of a person, without knowing whether that person is "
    "in the data (the figure is weighted by the zone's share of the public population)",
}


def review_report(review: stages.Review, spec: RiskSpec | None, adversary: str) -> str:
    """The risk review as an operator reads it: a headline, the landscape and both ceilings, and one item per
    release of the population, with its verdict and its figure at publication and now, rounded to 4
    significant digits."""
    breached = sorted({b.period for b in review.breaches})
    headline = (
        f"**{len(breached)} release(s) over budget: {', '.join(breached)}**"
        if breached
        else f"**Every one of the {len(review.releases)} published release(s) is within its budget.**"
    )
    lines = [
        headline,
        "",
        f"Re-assessed under landscape `{review.landscape_sha256[:12]}` (its sha256), adversary **{adversary}**: "
        f"{ADVERSARY_EXPLAINED.get(adversary, 'as the landscape describes it')}.",
        "",
    ]
    if review.privacy is not None:
        name = "epsilon" if review.privacy["accounting"] == "approx" else "rho"
        (spent, spent_delta), (budget, budget_delta) = review.privacy["spent"], review.privacy["budget"]
        lines += [
            f"Privacy budget of the population ({review.privacy['accounting']}): {name} {_figure(spent)} "
            f"(delta {spent_delta:.3g}) spent of {_figure(budget)} (delta {budget_delta:.3g}); "
            f"{_figure(review.privacy['left'][0])} left.",
            "",
        ]
    if spec is not None:
        lines += [
            f"Ceilings: per release {_figure(spec.per_release_ceiling)}, cumulative over the population "
            f"{_figure(spec.cumulative_ceiling)}; cumulative now {_figure(review.cumulative)}.",
            "",
        ]
    # One item per release, not a table: Dagster shows this entry in the metadata table's value column, where a
    # table of eight columns is cut off at the column's edge and a list wraps.
    for row in review.releases:
        now = _figure(row.release_figure) if row.re_assessed else "(published figure counted)"
        verdict = "over budget" if row.period in breached and row.dataset == review.dataset else "within"
        lines.append(
            f"- **{row.period}** ({row.dataset}, ledger entry {row.ledger_seq}): **{verdict}**; figure at publication "
            f"{_figure(row.published_figure or row.release_figure)}, now {now}, cumulative {_figure(row.cumulative)}, "
            f"worst zone {row.worst_zone or '-'}"
        )
    return "\n".join(lines)
