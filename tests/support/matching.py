"""Key sets built from (owner, key) pairs for the tests of the best matches (`risk.attack.best_matches`,
`risk.kernels.best_slice` and `targets_best_slice`): owners with no key and keys nobody holds are kept as
empty rows, so that the codes run over 0..n-1 on both sides."""

from __future__ import annotations

import numpy as np

from spatial_release.risk.attack import _padded
from spatial_release.risk.estimator import KeySets


def pair_key_sets(pairs: set[tuple[int, int]], n_owners: int, n_keys: int) -> KeySets:
    ordered = sorted(pairs)
    owner = np.array([p[0] for p in ordered], dtype=np.int64)
    key = np.array([p[1] for p in ordered], dtype=np.int64)
    zone = np.array(["z"] * n_keys, dtype=object)
    if not ordered:
        return KeySets(zone, np.zeros(n_owners + 1, np.int64), owner, np.zeros(n_keys + 1, np.int64), owner)
    sets = KeySets.from_codes(owner, key, zone)
    if sets.keys < n_keys:  # keys nobody holds at the end
        pad = np.full(n_keys - sets.keys, sets.key_offsets[-1])
        sets = KeySets(zone, sets.unit_offsets, sets.unit_keys, np.concatenate([sets.key_offsets, pad]), sets.key_units)
    return _padded(sets, n_owners)
