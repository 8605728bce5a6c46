"""Regularity kernel benchmark: the walk in rounds (`kernels.regularity_shares`) against the former whole walk
(`full_walk=True`) on the same knowledge sets of a real work area, alternated, the shares checked equal on every run.

The key sets are read from the work area's unit keys as the advantage stage reads them; the knowledge sets are
drawn as the gate draws them (--targets (unit, zone) entries sampled, --draws knowledge sets each, seed --seed),
and each attacker's shares are computed in the gate's pieces and threads (`advantage._regularity`). Prints, per
attacker, the median wall seconds of each road over --runs alternated runs, their ratio and the load average.

    python bench/regularity_bench.py POLICY.yaml WORK_DIR                   # 2018-Q1, 100 targets x 10 draws
    python bench/regularity_bench.py /tmp/s49/adv10.yaml /tmp/s49/run10/work --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spatial_release.period import Period  # noqa: E402
from spatial_release.policy import load_policy  # noqa: E402
from spatial_release.risk import advantage, kernels  # noqa: E402
from spatial_release.risk.estimator import KeySets  # noqa: E402
from spatial_release.stages import ReleaseContext  # noqa: E402
from spatial_release.stages.advantage import read_key_sets  # noqa: E402


def knowledge_sets(sets: KeySets, targets: int, draws: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Knowledge sets and their target units drawn as the gate draws them for a sample of its (unit, zone)
    entries."""
    entries = advantage._entries(sets, None)
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(len(entries.unit), min(targets, len(entries.unit)), replace=False))
    params = advantage.AdvantageParams()
    knowledge: list[np.ndarray] = []
    owner: list[int] = []
    for i, e in enumerate(sample.tolist()):
        anchored = bool(entries.anchors[e] > 0)
        drawn = advantage._draw(sets, int(entries.unit[e]), str(entries.zone[e]), anchored, draws, params, rng)
        knowledge += drawn
        owner += [i] * len(drawn)
    return knowledge, entries.unit[sample][np.array(owner, dtype=np.int64)].astype(np.int64)


def shares(
    sets: KeySets, guesses: kernels.Guesses, knowledge: list[np.ndarray], targets: np.ndarray, full_walk: bool
) -> np.ndarray:
    """The shares in the pieces and threads of `advantage._regularity`, by either road."""
    offsets = KeySets.offsets(np.array([len(k) for k in knowledge]))
    known = np.concatenate(knowledge).astype(np.int64)
    pieces = np.linspace(0, len(knowledge), min(len(knowledge), 4 * (os.cpu_count() or 1)) + 1).astype(np.int64)
    truth = kernels.MatchSets(sets.unit_offsets, sets.unit_keys, sets.key_offsets, sets.key_units)
    common = (guesses, offsets, known, targets, truth)

    def piece(at: int, end: int) -> np.ndarray:
        return kernels.regularity_shares(*common, at, end, full_walk=full_walk)

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return np.concatenate(list(pool.map(piece, pieces[:-1], pieces[1:])))


def timed(
    sets: KeySets, guesses: kernels.Guesses, knowledge: list[np.ndarray], targets: np.ndarray, full_walk: bool
) -> tuple[float, np.ndarray]:
    """Wall seconds and the shares of one road."""
    started = time.perf_counter()
    out = shares(sets, guesses, knowledge, targets, full_walk)
    return time.perf_counter() - started, out


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--period", default="2018-Q1")
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ctx = ReleaseContext(load_policy(args.policy), Period.parse(args.period), args.work)
    sets, names, _ = read_key_sets(ctx.area.unit_keys, ctx.risk_zones)
    knowledge, targets = knowledge_sets(sets, args.targets, args.draws, args.seed)
    guessers = advantage._guessers(advantage.KeyTimes.parse(names))
    print(f"{sets.units:,} units, {len(sets.unit_keys):,} (unit, key) pairs, {sets.keys:,} keys")
    print(f"{len(knowledge):,} knowledge sets, {args.runs} alternated runs per road, {os.cpu_count()} threads")
    print(f"load average before: {load()}")
    for name in advantage.REGULARITY:
        guesses = guessers[name]
        shares(sets, guesses, knowledge[:8], targets[:8], True)  # compiled (or read from the cache) first
        shares(sets, guesses, knowledge[:8], targets[:8], False)
        whole, rounds = [], []
        for _ in range(args.runs):
            seconds, expected = timed(sets, guesses, knowledge, targets, True)
            whole.append(seconds)
            seconds, got = timed(sets, guesses, knowledge, targets, False)
            rounds.append(seconds)
            if not np.array_equal(got, expected):
                raise SystemExit(f"{name}: the rounds' shares differ from the whole walk's")
        old, new = statistics.median(whole), statistics.median(rounds)
        print(
            f"{name:20s} whole walk {old:7.3f} s  rounds {new:7.3f} s  ratio {old / new:5.2f}x  "
            f"(runs {', '.join(f'{s:.3f}' for s in whole)} | {', '.join(f'{s:.3f}' for s in rounds)}; "
            f"mean success {float(expected.mean()):.4f}; shares equal)"
        )
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
