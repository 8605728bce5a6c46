"""A city of regular trajectories released hourly on a grid, for the attacks on aggregates (`risk.attack`)."""

from __future__ import annotations

import numpy as np

from spatial_release.risk.attack import ReleaseView


def regular_city(
    units: int,
    side: int,
    days: int,
    k: int,
    seed: int = 1,
    cell_m: float = 250.0,
    merge: int = 1,
    hours: int = 1,
    plant: bool = False,
) -> tuple[ReleaseView, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Units with a home, a workplace within three cells and their own hours, every day the same, released
    hourly (or every `hours`) on a side x side grid of `cell_m` cells (cells merged `merge` x `merge`): the
    (cell, bucket) counts >= k are published with the bucket totals. Zones are the grid's four quadrants;
    with `plant`, one more unit walks alone through a corridor east of the city (zone 'P')."""
    rng = np.random.default_rng(seed)
    home = rng.integers(0, side * side, units)
    hx, hy = home % side, home // side
    wx = np.clip(hx + rng.integers(-3, 4, units), 0, side - 1)
    wy = np.clip(hy + rng.integers(-3, 4, units), 0, side - 1)
    leave, back = rng.integers(6, 11, units), rng.integers(16, 21, units)
    t = np.arange(days * 24)
    at_work = ((t[None, :] % 24) >= leave[:, None]) & ((t[None, :] % 24) < back[:, None])
    x = np.where(at_work, wx[:, None], hx[:, None]) // merge
    y = np.where(at_work, wy[:, None], hy[:, None]) // merge
    width = side // merge + (2 if plant else 0)
    cells = y * width + x
    if plant:
        lone = (side // merge + 1) + width * ((t // 6) % (side // merge))  # a column of its own, moving
        cells = np.vstack([cells, lone[None, :]])
    unit = np.repeat(np.arange(cells.shape[0]), cells.shape[1])
    step = np.tile(t // hours, cells.shape[0])
    area = cells.ravel()
    steps = days * 24 // hours
    n_areas = width * (side // merge)
    trip = np.unique((unit * steps + step) * n_areas + area)
    unit, step, area = trip // (steps * n_areas), (trip // n_areas) % steps, trip % n_areas
    count = np.bincount(step * n_areas + area, minlength=steps * n_areas)
    shown = np.flatnonzero(count >= k)
    xy = np.array([(i % width * cell_m * merge, i // width * cell_m * merge) for i in range(n_areas)], dtype=float)
    half = side // merge / 2
    zones = np.array(
        [
            "P" if i % width >= side // merge else f"q{int(i % width >= half)}{int(i // width >= half)}"
            for i in range(n_areas)
        ],
        dtype=object,
    )
    presence = hours == 1
    totals = np.bincount(step, minlength=steps) if presence else np.full(steps, -1)
    view = ReleaseView(
        steps,
        xy,
        shown // n_areas,
        shown % n_areas,
        count[shown],
        totals,
        presence,
        day_lag=24 // hours if 24 % hours == 0 and hours < 24 else None,
    )
    return view, unit, step, area, zones
