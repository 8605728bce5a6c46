"""A regular city and its release of cell x day counts at threshold k, as the advantage gate reads it (published
key sets, key names, counts, the zones each unit was truly in)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from spatial_release.risk.estimator import KeySets

K = 5
START = pd.Timestamp("2018-01-01", tz="UTC")


def regular_city(n_units: int, cells: int, days: int, seed: int, decoys: int = 0) -> pd.DataFrame:
    """Each unit at home every day and at work most days; decoys at one random place a day."""
    rng = np.random.default_rng(seed)
    home, work = rng.integers(cells, size=n_units), rng.integers(cells, size=n_units)
    rows = []
    for u in range(n_units):
        for d in range(days):
            rows.append((f"u{u:05d}", int(home[u]), d))
            if rng.random() < 0.6:
                rows.append((f"u{u:05d}", int(work[u]), d))
    for j in range(decoys):
        rows += [(f"z{j:05d}", int(rng.integers(cells)), d) for d in range(days)]
    return pd.DataFrame(rows, columns=["unit", "cell", "day"]).drop_duplicates()


def day_release(traces: pd.DataFrame, k: int = K, zone_cells: int = 5):
    """The published key sets of a release of cell x day counts at threshold k (no complements: the key sets
    are what is published), the key names, their counts, the true zones of each unit, and the unit names."""
    f = traces.copy()
    stamp = (START + pd.to_timedelta(f["day"], unit="D")).dt.strftime("%Y-%m-%dT%H:%MZ")
    f["key"] = "c" + f["cell"].astype(str) + "@" + stamp
    f["zone"] = "z" + (f["cell"] // zone_cells).astype(str)
    counts = f.groupby("key")["unit"].nunique()
    published = counts[counts >= k]
    shown = f[f["key"].isin(published.index)]
    unit_codes, units = pd.factorize(shown["unit"], sort=True)
    key_codes, keys = pd.factorize(shown["key"], sort=True)
    zone_of_key = shown.groupby("key")["zone"].first().reindex(keys).to_numpy(dtype=object)
    sets = KeySets.from_codes(unit_codes.astype(np.int64), key_codes.astype(np.int64), zone_of_key)
    names = np.asarray(keys, dtype=object)
    true = f[["unit", "zone"]].drop_duplicates()
    code = pd.Index(units).get_indexer(true["unit"])
    hidden = (code[code >= 0].astype(np.int64), true["zone"].to_numpy(dtype=object)[code >= 0])
    return sets, names, published.reindex(keys).to_numpy(), hidden, units


def city_release(n_units: int, cells: int, days: int, seed: int):
    """A regular city released as one zone: key sets, key names, counts, true zones."""
    sets, names, counts, hidden, _ = day_release(regular_city(n_units, cells, days, seed), zone_cells=cells)
    return sets, names, counts, hidden
