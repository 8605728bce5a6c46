"""Trajectory recovery benchmark: `risk.attack.recover_trajectories` on one release's view (the main
geometry's cells at the policy's bucket, as `stages.advantage._recovery_runs` builds it, with the landscape's
adversary as `recovery_success` builds it). Prints the CPU time (getrusage of this process) and the wall time
of the recovery alone, and a sha256 of the recovered (traj, step, area), so that two versions of the code can
be shown to recover the same trajectories. The view is built once from the work area (read only) and kept in
`--cache`; later runs read it from there.

    python bench/recovery_bench.py --policy P.yaml --work WORK --period 2018-Q1 [--cache view.npz] [--profile]
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from spatial_release.risk.attack import AttackParams, ReleaseView, recover_trajectories

FIELDS = ("xy", "figure_step", "figure_area", "figure_count", "totals", "daytime")


def build(policy_path: str, work: str, period: str) -> tuple[ReleaseView, AttackParams]:
    from spatial_release.period import Period
    from spatial_release.policy.loading import load_policy
    from spatial_release.risk.landscape import load_landscape
    from spatial_release.stages import attack as stages_attack
    from spatial_release.stages.advantage import advantage_params
    from spatial_release.stages.context import ReleaseContext, risk_spec

    policy = load_policy(policy_path)
    ctx = ReleaseContext(policy, Period.parse(period), Path(work))
    landscape, _ = load_landscape(policy.resolve(risk_spec(policy).landscape))
    p = advantage_params(landscape)
    params = AttackParams(points=p.points, draws=p.draws, seed=p.seed)  # as recovery_success builds them
    view = stages_attack.attack_inputs(ctx, ctx.risk_zones, None, False, None).view
    return view, params


def load(args: argparse.Namespace) -> tuple[ReleaseView, AttackParams]:
    cache = Path(args.cache)
    if not cache.exists():
        view, params = build(args.policy, args.work, args.period)
        np.savez(
            cache,
            **{f: getattr(view, f) for f in FIELDS if getattr(view, f) is not None},
            meta=np.array([view.steps, int(view.additive), view.day_lag or 0, params.points, params.draws, params.seed]),
        )
    data = np.load(cache, allow_pickle=False)
    steps, additive, lag, points, draws, seed = (int(v) for v in data["meta"])
    view = ReleaseView(
        steps,
        data["xy"],
        data["figure_step"],
        data["figure_area"],
        data["figure_count"],
        data["totals"],
        bool(additive),
        data["daytime"] if "daytime" in data else None,
        lag or None,
    )
    return view, AttackParams(points=points, draws=draws, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--work", required=True, help="the work root holding the release's work area")
    parser.add_argument("--period", required=True)
    parser.add_argument("--cache", default="recovery-view.npz", help="where the view is kept between runs")
    parser.add_argument("--profile", action="store_true", help="cProfile the recovery instead of timing it")
    args = parser.parse_args()
    view, params = load(args)
    # the compiled kernels load (or compile) on their first call, once per process: not part of a recovery
    first = view.figure_step < 48
    recover_trajectories(
        replace(
            view,
            steps=min(view.steps, 48),
            figure_step=view.figure_step[first],
            figure_area=view.figure_area[first],
            figure_count=view.figure_count[first],
            totals=view.totals[:48],
            daytime=None if view.daytime is None else view.daytime[:48],
        ),
        params,
    )
    print(f"steps {view.steps} areas {view.areas} figures {len(view.figure_area)} params {params}", flush=True)
    if args.profile:
        import cProfile
        import pstats
        import tempfile

        profile = str(Path(tempfile.mkdtemp()) / "recovery.prof")
        cProfile.runctx("recover_trajectories(view, params)", globals(), {"view": view, "params": params}, profile)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    rec = recover_trajectories(view, params)
    wall = time.perf_counter() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    digest = hashlib.sha256()
    for a in (rec.traj, rec.step, rec.area):
        digest.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    print(
        f"trajectories {rec.trajectories} points {len(rec.traj)} cpu {cpu:.2f} wall {wall:.2f} sha256 {digest.hexdigest()}"
    )


if __name__ == "__main__":
    main()
