"""The public part of the coarsening frontier (`stages.coarsen`): what release.json and the UI may show of
the configurations protection tried. Its own module so that the risk stage, which records it, and the
coarsening loop, which reads the risk stage, import in one direction."""

from __future__ import annotations

from spatial_release.dp.frontier import public_rows

FINEST = "as counted"  # the frontier's name for the policy's own bucket everywhere


def public_frontier(rows: list[dict] | None, ladder: list[str] | None = None) -> list[dict] | None:
    """What release.json may carry of the frontier: per configuration tried, how many zones were coarsened to
    which rung, whether it passed, which is this release. No zone is named (a zone coarsened holds units, and
    its cells may all be withheld) and no figure of a configuration not published (its counts and attack
    figures are facts about unpublished data)."""
    if not rows:
        return None
    if "scale" in rows[0]:  # differential privacy: configurations compared at the policy's loss
        return public_rows(rows)
    out = []
    for i, row in enumerate(rows):
        steps = list(row.get("zones_coarsened", {}).values())
        by_step = {s: steps.count(s) for s in sorted(set(steps))}
        shown = [f"{n} zone(s) at {rung_name(s, ladder)}" for s, n in by_step.items()]
        out.append({"configuration": "; ".join(shown) or FINEST, "passed": row["passed"], "published": i == len(rows) - 1})
    return out


def rung_name(step: int, ladder: list[str] | None) -> str:
    """What a zone climbed `step` steps shows: a rung of the time ladder, its parent areas, or the totals."""
    if ladder is None:
        return f"rung {step}"
    if step - 1 < len(ladder):
        return ladder[step - 1]
    return "parent areas only" if step == len(ladder) + 1 else "the totals only"
