"""What the release assets show in the Dagster UI: markdown from the stages' typed results (public figures
only; figures about withheld cells stay in the work area)."""

from spatial_release import stages


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
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


def _figure(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def risk_report(risk: stages.RiskAssessment) -> str:
    """The gate's headline and the per-zone table, every figure labelled with its adversary."""
    head = (f"**{risk.status}**: {risk.reason}\n\nAdversary: **{risk.adversary}** (panel: {risk.panel}); "
            f"gated figure: {risk.measure}. Worst zone `{risk.worst_zone}` = {_figure(risk.release_figure)}, "
            f"pooled {_figure(risk.pooled)}, cumulative {_figure(risk.cumulative)}, "
            f"headroom {_figure(risk.headroom)}\n\n")
    rows = [f"| {z.zone} | {z.units} | {_figure(z.prosecutor_mean)} | {_figure(z.prosecutor_at_risk, 3)} | "
            f"{_figure(z.prosecutor_worst)} | {_figure(z.journalist_mean)} |"
            for z in sorted(risk.zones, key=lambda z: -z.prosecutor_mean)[:30]]
    return head + ("| zone | units | prosecutor mean | prosecutor at risk | prosecutor worst | journalist mean |\n"
                   "|---|---|---|---|---|---|\n") + "\n".join(rows)
