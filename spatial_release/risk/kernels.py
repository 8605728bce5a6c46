"""Compiled loops of the risk estimate and the attack (numba, no GIL): the set intersections whose numpy
versions sorted or binary-searched hundreds of millions of candidates in one global array.

Each kernel works on one independent piece (a chunk of knowledge sets, a slice of trajectories) with its own
scratch arrays, so pieces run on threads, in worker processes or as Spark tasks alike (`spatial_release.tasks`).
Every kernel returns exactly what the numpy code it replaced returned (same integers, same float64
operations in the same order), so the figures and the published files do not move; `tests/test_kernels.py`
compares them with plain-numpy references (`tests/test_advantage_regularity.py` the regularity attackers' best
match with `risk.attack.best_matches`).

Compiled code does not check its indices, so every code a kernel indexes with is checked, by its wrapper before
the call or in the loop where it is read (a ValueError, where the numpy version raised an IndexError): a wrong
code must never turn into a silently wrong risk figure.

Compilation is cached on disk (numba's `cache=True`: next to this file, or in the user's cache when the
package folder is read-only); a fresh machine pays about a second per kernel once. The cache holds compiled
code only, never data.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

NO_SLOTS = np.zeros(0, dtype=np.int32)  # no key has a bitset
NO_BITS = np.zeros((0, 1), dtype=np.uint64)
# A set's count is the AND of its keys' bitsets when every key has one and the bitsets have at most this many words
# per candidate of its rarest key: at 50 M pings 9.4 s of counting against 13.0 s with bit tests only; 1 to 4 gave
# the same, 0.5 10.0 s (bench/RESULTS.md)
WORDS_PER_CANDIDATE = 2


@njit(nogil=True, cache=True)
def _intersect(a: np.ndarray, na: int, b: np.ndarray, lo: int, hi: int, out: np.ndarray) -> int:
    """a[:na] ∩ b[lo:hi] (both sorted, distinct) written to out[:m]; returns m. `out` may be `a` (a value is
    written at or before where it was read).

    Galloping: the candidates ascend, so each is looked up from where the last one was found, with steps
    doubling (1, 2, 4 ...) and then a binary search inside the last step. A candidate list of n in postings of N
    costs about n log(N / n) reads near each other, where one binary search per candidate over all N cost
    n log N reads spread across the postings."""
    m = 0
    pos = lo
    for i in range(na):
        if pos >= hi:
            break
        x = a[i]
        if b[pos] < x:
            prev = pos
            step = 1
            while pos + step < hi and b[pos + step] < x:
                prev = pos + step
                step <<= 1
            left = prev + 1
            right = min(pos + step, hi)
            while left < right:
                mid = (left + right) >> 1
                if b[mid] < x:
                    left = mid + 1
                else:
                    right = mid
            pos = left
            if pos >= hi:
                break
        if b[pos] == x:
            out[m] = x
            m += 1
            pos += 1
    return m


@njit(nogil=True, cache=True)
def _keep_set_bits(a: np.ndarray, na: int, bits: np.ndarray, out: np.ndarray) -> int:
    """The units of a[:na] whose bit is set in `bits` (one key's dense postings), written to out[:m]."""
    m = 0
    for i in range(na):
        x = a[i]
        if (bits[x >> 6] >> np.uint64(x & 63)) & np.uint64(1):
            out[m] = x
            m += 1
    return m


@njit(nogil=True, cache=True)
def _dense_bits(key_offsets: np.ndarray, key_units: np.ndarray, n_units: int, slot: np.ndarray) -> np.ndarray:
    """The bitsets over the units of the keys with a slot (`slot[key]`, -1: none), in slot order."""
    n_dense = 0
    for k in range(len(slot)):
        n_dense = max(n_dense, slot[k] + 1)
    words = (n_units + 63) // 64
    bits = np.zeros((n_dense, words), dtype=np.uint64)
    for k in range(len(key_offsets) - 1):
        s = slot[k]
        if s >= 0:
            for p in range(key_offsets[k], key_offsets[k + 1]):
                u = key_units[p]
                bits[s, u >> 6] |= np.uint64(1) << np.uint64(u & 63)
    return bits


@njit(nogil=True, cache=True)
def _widest_first_postings(key_offsets: np.ndarray, keysets: np.ndarray) -> int:
    """The longest postings list among the rows' first keys (the size of the candidates' scratch array)."""
    widest = 1
    for i in range(keysets.shape[0]):
        first = keysets[i, 0]
        widest = max(widest, key_offsets[first + 1] - key_offsets[first])
    return widest


@njit(nogil=True, cache=True)
def _narrow(
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    a: np.ndarray,
    na: int,
    key: int,
    slot: np.ndarray,
    bits: np.ndarray,
    out: np.ndarray,
) -> int:
    """a[:na] ∩ the units of `key`, written to out[:m]: a bit test per unit when the key has a bitset (a key
    most units hold), else the galloping intersection with its postings."""
    if len(slot) and slot[key] >= 0:
        return _keep_set_bits(a, na, bits[slot[key]], out)
    return _intersect(a, na, key_units, key_offsets[key], key_offsets[key + 1], out)


@njit(nogil=True, cache=True)
def _common_units(
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    keyset: np.ndarray,
    buf: np.ndarray,
    stop_at: int,
    slot: np.ndarray,
    bits: np.ndarray,
) -> int:
    """The units holding every key of `keyset` (its rarest key first), written to buf[:m]; returns m. The
    postings of the first key are intersected with the next key's, the survivors with the next, and so on;
    the intersections stop once at most `stop_at` units are left (0: never early). `slot` and `bits`: the
    keys' bitsets (`_dense_bits`; an empty `slot`: none)."""
    first = keyset[0]
    lo, hi = key_offsets[first], key_offsets[first + 1]
    if len(keyset) == 1:
        m = hi - lo
        buf[:m] = key_units[lo:hi]
        return m
    m = _narrow(key_offsets, key_units, key_units[lo:hi], hi - lo, keyset[1], slot, bits, buf)
    for c in range(2, len(keyset)):
        if m <= stop_at:
            break
        m = _narrow(key_offsets, key_units, buf, m, keyset[c], slot, bits, buf)
    return m


@njit(nogil=True, cache=True)
def _bitsets_first(keyset: np.ndarray, slot: np.ndarray, order: np.ndarray) -> np.ndarray:
    """`keyset` (rarest key first) into order[:len(keyset)]: the rarest key, then the keys with a bitset, then the
    others, each group in its order in `keyset`. The intersection is the same in any order, and a bit test per
    candidate costs a fraction of a galloping step: at 50 M pings the estimate's counting took 13.0 s against
    19.4 s with the keys in size order (bench/RESULTS.md)."""
    order[0] = keyset[0]
    j = 1
    for c in range(1, len(keyset)):
        if len(slot) and slot[keyset[c]] >= 0:
            order[j] = keyset[c]
            j += 1
    for c in range(1, len(keyset)):
        if not (len(slot) and slot[keyset[c]] >= 0):
            order[j] = keyset[c]
            j += 1
    return order[: len(keyset)]


@njit(nogil=True, cache=True)
def _anonymity_counts(
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    keysets: np.ndarray,
    slot: np.ndarray,
    bits: np.ndarray,
    exact: bool,
) -> np.ndarray:
    """max(1, number of units holding every key of the row) for every row of `keysets` (rows x width, each
    row's rarest key first), the candidates of the rarest key narrowed by the keys with a bitset first
    (`_bitsets_first`). The intersections stop at one unit left: fewer cannot change max(count, 1).
    `exact`: the number itself, 0 included, never stopping early (postings of some of the units only, whose
    counts are summed over the ranges: `risk.ranges`)."""
    rows, width = keysets.shape
    out = np.empty(rows, dtype=np.int64)
    buf = np.empty(_widest_first_postings(key_offsets, keysets), dtype=key_units.dtype)
    order = np.empty(width, dtype=np.int64)
    floor = 0 if exact else 1
    for i in range(rows):
        if width == 1:
            first = keysets[i, 0]
            out[i] = max(key_offsets[first + 1] - key_offsets[first], floor)
            continue
        keyset = _bitsets_first(keysets[i], slot, order)
        first = keyset[0]
        if _all_bitsets(keyset, slot) and bits.shape[1] <= WORDS_PER_CANDIDATE * (
            key_offsets[first + 1] - key_offsets[first]
        ):
            out[i] = max(_and_count(bits, slot, keyset), floor)
        else:
            out[i] = max(_common_units(key_offsets, key_units, keyset, buf, floor, slot, bits), floor)
    return out


@njit(nogil=True, cache=True)
def _all_bitsets(keyset: np.ndarray, slot: np.ndarray) -> bool:
    if not len(slot):
        return False
    for key in keyset:
        if slot[key] < 0:
            return False
    return True


@njit(nogil=True, cache=True)
def _popcount(x: np.uint64) -> int:
    """The set bits of a word (the classic SWAR sum, which the compiler turns into one instruction)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(nogil=True, cache=True)
def _and_count(bits: np.ndarray, slot: np.ndarray, keyset: np.ndarray) -> int:
    """The number of units holding every key of `keyset`, each with a bitset: the set bits of their AND, a word
    at a time. Where the rarest key's postings are longer than a bitset has words (at 50 M pings the keys a few
    thousand of 200,000 units hold), this reads fewer words, in order, than a bit test per candidate."""
    total = 0
    a = bits[slot[keyset[0]]]
    if len(keyset) == 4:  # the landscape's four points: one pass the compiler can unroll and vectorise
        b, c, d = bits[slot[keyset[1]]], bits[slot[keyset[2]]], bits[slot[keyset[3]]]
        for w in range(len(a)):
            total += _popcount(a[w] & b[w] & c[w] & d[w])
        return total
    words = a.copy()
    for k in range(1, len(keyset)):
        other = bits[slot[keyset[k]]]
        for w in range(len(words)):
            words[w] &= other[w]
    for w in range(len(words)):
        total += _popcount(words[w])
    return total


@njit(nogil=True, cache=True)
def _select_ties(
    touched: np.ndarray,
    seen: int,
    inter: np.ndarray,
    inter_other: np.ndarray,
    unit_offsets: np.ndarray,
    size_r: int,
    best: float,
    tie_units: np.ndarray,
) -> int:
    """The units of `touched[:seen]` whose Jaccard ties the best, into `tie_units` in the order touched (their
    count returned); every other touched unit's counts are reset to 0 (the ties' are reset once they are read)."""
    n_ties = 0
    for j in range(seen):
        unit = touched[j]
        c = inter[unit]
        if c / (size_r + (unit_offsets[unit + 1] - unit_offsets[unit]) - c) >= best - 1e-12:
            tie_units[n_ties] = unit
            n_ties += 1
        else:
            inter[unit] = 0
            inter_other[unit] = 0
    return n_ties


@njit(nogil=True, cache=True)
def _room_for(codes: np.ndarray, shared: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """`codes` and `shared`, grown (at least doubled) when they hold fewer than `size` entries."""
    if size <= len(codes):
        return codes, shared
    grow = max(len(codes), size)
    return (
        np.concatenate((codes, np.empty(grow, dtype=np.int64))),
        np.concatenate((shared, np.empty(grow, dtype=np.float64))),
    )


@njit(nogil=True, cache=True)
def _best_jaccard(touched: np.ndarray, seen: int, inter: np.ndarray, n: int, unit_offsets: np.ndarray) -> float:
    """The best Jaccard of an output of n keys with the touched units, from their overlaps in `inter`."""
    best = 0.0
    for j in range(seen):
        unit = touched[j]
        jac = inter[unit] / (n + (unit_offsets[unit + 1] - unit_offsets[unit]) - inter[unit])
        if jac > best:
            best = jac
    return best


@njit(nogil=True, cache=True)
def _best_slice(
    rec_offsets: np.ndarray,
    rec_keys: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    unit_offsets: np.ndarray,
    hidden_key: np.ndarray,
    at: int,
    end: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For the recovered trajectories at..end-1 (`rec_*`) against the units' key sets (`key_*` postings,
    `unit_offsets` for their sizes): every tie for the best Jaccard as code trajectory * units + unit (by
    trajectory, then unit), the published (not `hidden_key`) keys each tie shares, and each trajectory's best
    Jaccard and precision (share of its keys the best units hold, the largest over ties). The shared keys are
    counted per unit in a dense array reset after each trajectory: no sort of the candidate pairs."""
    n_units = max(len(unit_offsets) - 1, 1)
    n = end - at
    top = np.zeros(n)
    precision = np.zeros(n)
    # Per unit, the keys it shares with the trajectory and how many of those are hidden, side by side in int32:
    # the walk's random accesses then touch one cache line per unit and the counts of 40,000 units fit in a
    # core's L2 (two int64 arrays did not: 1.6 times slower at 10 M pings, bench/RESULTS.md). A count is at
    # most a trajectory's keys.
    counts = np.zeros((n_units, 2), dtype=np.int32)
    inter, inter_hidden = counts[:, 0], counts[:, 1]
    touched = np.empty(n_units, dtype=np.int64)
    tie_units = np.empty(n_units, dtype=np.int64)
    codes = np.empty(1024, dtype=np.int64)
    shared = np.empty(1024, dtype=np.float64)
    m = 0
    n_keys = min(len(key_offsets) - 1, len(hidden_key))
    for i in range(n):
        r = at + i
        size_r = rec_offsets[r + 1] - rec_offsets[r]
        if rec_offsets[r] < 0 or rec_offsets[r + 1] > len(rec_keys):
            raise ValueError("best matches: a trajectory's keys lie outside its array")
        seen = 0
        for p in range(rec_offsets[r], rec_offsets[r + 1]):
            key = rec_keys[p]
            if key < 0 or key >= n_keys:
                raise ValueError("best matches: a recovered key outside the key codes")
            hidden = 1 if hidden_key[key] else 0
            if key_offsets[key] < 0 or key_offsets[key + 1] > len(key_units):
                raise ValueError("best matches: a key's postings lie outside the units array")
            for q in range(key_offsets[key], key_offsets[key + 1]):
                unit = key_units[q]
                if unit < 0 or unit >= len(unit_offsets) - 1:
                    raise ValueError("best matches: a unit outside the unit codes")
                c = counts[unit, 0]
                if c == 0:
                    touched[seen] = unit
                    seen += 1
                counts[unit, 0] = c + 1
                counts[unit, 1] += hidden
        best = _best_jaccard(touched, seen, inter, size_r, unit_offsets)
        top[i] = best
        # the ties first, in the order touched, then sorted by unit: only the ties are sorted, not every unit
        # the trajectory touched (most of them share a key or two with it and are far from the best)
        n_ties = _select_ties(touched, seen, inter, inter_hidden, unit_offsets, size_r, best, tie_units)
        ties = np.sort(tie_units[:n_ties])
        codes, shared = _room_for(codes, shared, m + n_ties)
        for unit in ties:
            c = counts[unit, 0]
            codes[m] = r * n_units + unit
            shared[m] = c - counts[unit, 1]
            m += 1
            share = c / size_r
            if share > precision[i]:
                precision[i] = share
            counts[unit, 0] = 0
            counts[unit, 1] = 0
    return codes[:m].copy(), shared[:m].copy(), top, precision


@njit(nogil=True, cache=True)
def _own_best_target(
    touched: np.ndarray,
    seen: int,
    inter: np.ndarray,
    n: int,
    unit_offsets: np.ndarray,
    own: np.ndarray,
    mark: int,
    guessing: np.ndarray,
) -> tuple[float, bool]:
    """Of the touched targets (their overlaps with an output of n keys in `inter`), those of this trajectory
    (`own` at `mark`, or a guessing target): the best Jaccard, and whether any shares a key with it. `inter` is
    left all zero."""
    best = 0.0
    shares = False
    for j in range(seen):
        unit = touched[j]
        if own[unit] == mark or guessing[unit]:
            shares = True
            jac = inter[unit] / (n + (unit_offsets[unit + 1] - unit_offsets[unit]) - inter[unit])
            if jac > best:
                best = jac
        inter[unit] = 0
    return best, shares


@njit(nogil=True, cache=True)
def _targets_best_slice(
    rec_offsets: np.ndarray,
    rec_keys: np.ndarray,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    hidden_key: np.ndarray,
    target_offsets: np.ndarray,
    target_units: np.ndarray,
    linked_offsets: np.ndarray,
    linked_units: np.ndarray,
    anchor_offsets: np.ndarray,
    anchor_units: np.ndarray,
    guessing: np.ndarray,
    at: int,
    end: int,
    round_keys: int,
    checks: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`_best_slice` where only the ties that hold one of each trajectory's own targets matter: those of
    `linked_*` (per trajectory), of `anchor_*` (per key: the targets of every trajectory holding it) and the
    `guessing` ones (of every trajectory), `target_*` the postings of them all.
    A trajectory's best Jaccard with its own targets is counted first (a walk of the targets' postings); then its
    postings are walked in rounds, and a unit found strictly better than each of its targets by more than the tie
    tolerance (`_walk_unless_beaten`, its overlap counted exactly from its own keys) ends the walk: none of them
    can tie the best. Such a trajectory, and one none of its targets shares a key with, gets no pair and NaN for
    its best Jaccard and precision; one walked whole gets what `_best_slice` gives it, every tie included (a
    target's share is 1 / ties)."""
    n_units = max(len(unit_offsets) - 1, 1)
    n = end - at
    top = np.full(n, np.nan)
    precision = np.full(n, np.nan)
    inter = np.zeros(n_units, dtype=np.int32)  # as `_best_slice`'s counts: a count is at most a trajectory's keys
    touched = np.empty(n_units, dtype=np.int64)
    checked = np.zeros(n_units, dtype=np.int64)
    own = np.zeros(n_units, dtype=np.int64)
    picks = np.empty(checks, dtype=np.int64)
    tie_units = np.empty(n_units, dtype=np.int64)
    codes = np.empty(1024, dtype=np.int64)
    shared = np.empty(1024, dtype=np.float64)
    m = 0
    for i in range(n):
        r = at + i
        output = rec_keys[rec_offsets[r] : rec_offsets[r + 1]]
        size_r = len(output)
        for p in range(linked_offsets[r], linked_offsets[r + 1]):
            own[linked_units[p]] = i + 1
        for key in output:
            for p in range(anchor_offsets[key], anchor_offsets[key + 1]):
                own[anchor_units[p]] = i + 1
        seen = _walk_postings(output, size_r, 0, 1, target_offsets, target_units, inter, touched, 0)
        best_target, shares = _own_best_target(touched, seen, inter, size_r, unit_offsets, own, i + 1, guessing)
        if not shares:  # none of its targets shares a key with it: each is at 0, below any unit that does
            continue
        mark = i + 1  # the units checked for this trajectory (`checked`)
        walk = (key_offsets, key_units, hidden_key, mark, inter, touched, checked, picks, round_keys)
        seen = _walk_unless_beaten(output, size_r, best_target, unit_offsets, unit_keys, *walk)
        if seen < 0:
            continue
        best = _best_jaccard(touched, seen, inter, size_r, unit_offsets)
        top[i] = best
        codes, shared, m, precision[i] = _emit_ties(
            codes, shared, m, tie_units, r, n_units, touched, seen, inter, output, best, unit_offsets, unit_keys, hidden_key
        )
    return codes[:m].copy(), shared[:m].copy(), top, precision


@njit(nogil=True, cache=True)
def _emit_ties(
    codes: np.ndarray,
    shared: np.ndarray,
    m: int,
    tie_units: np.ndarray,
    r: int,
    n_units: int,
    touched: np.ndarray,
    seen: int,
    inter: np.ndarray,
    output: np.ndarray,
    best: float,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    hidden_key: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Append trajectory r's ties for the best Jaccard (`_select_ties`' rule, by unit) to codes and shared from
    m: the tie's code, and the published (not hidden) keys it shares with the trajectory's keys `output`; returns
    the arrays (grown when full), the new m and the trajectory's precision. `inter` is left all zero."""
    size_r = len(output)
    n_ties = _select_ties(touched, seen, inter, inter, unit_offsets, size_r, best, tie_units)  # one count array
    ties = np.sort(tie_units[:n_ties])
    codes, shared = _room_for(codes, shared, m + n_ties)
    precision = 0.0
    for unit in ties:
        c = inter[unit]
        _, shown = _sorted_overlap(output, unit_keys[unit_offsets[unit] : unit_offsets[unit + 1]], hidden_key)
        codes[m] = r * n_units + unit
        shared[m] = shown
        m += 1
        precision = max(precision, c / size_r)
        inter[unit] = 0
    return codes, shared, m, precision


@njit(nogil=True, cache=True)
def _walk_unless_beaten(
    output: np.ndarray,
    n: int,
    jac_t: float,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    hidden_key: np.ndarray,
    mark: int,
    inter: np.ndarray,
    touched: np.ndarray,
    checked: np.ndarray,
    picks: np.ndarray,
    round_keys: int,
) -> int:
    """The walk of `_ties_unless_beaten` (rounds, exact checks of the units the counts so far rank best; `checked`
    marks with `mark` the units checked for this output, whose keys are sorted) against the best target Jaccard
    `jac_t`: -1 (`inter` left all zero) when a unit matches the output strictly better than `jac_t` by more than
    the tie tolerance, else the number of units touched, `inter` holding their exact counts."""
    stride = _first_stride(n, round_keys)
    seen = _walk_postings(output, n, 0, stride, key_offsets, key_units, inter, touched, 0)
    while stride > 1:
        scale = n / ((n + stride - 1) // stride)  # the output's keys per key walked so far
        found = _promising(touched, seen, inter, scale, n, jac_t, unit_offsets, checked, mark, picks)
        if _a_sorted_pick_beats(picks, found, jac_t, output, unit_offsets, unit_keys, hidden_key, checked, mark):
            for j in range(seen):
                inter[touched[j]] = 0
            return -1
        stride //= 2
        seen = _walk_postings(output, n, stride, 2 * stride, key_offsets, key_units, inter, touched, seen)
    return seen


@njit(nogil=True, cache=True)
def _sorted_overlap(a: np.ndarray, b: np.ndarray, hidden_key: np.ndarray) -> tuple[int, int]:
    """How many keys two ascending key arrays share, and how many of those are not hidden (a merge of the two:
    no array over every key, which the linkage's slices would each have to clear)."""
    i = j = common = shown = 0
    while i < len(a) and j < len(b):
        if a[i] < b[j]:
            i += 1
        elif a[i] > b[j]:
            j += 1
        else:
            common += 1
            if not hidden_key[a[i]]:
                shown += 1
            i += 1
            j += 1
    return common, shown


@njit(nogil=True, cache=True)
def _a_sorted_pick_beats(
    picks: np.ndarray,
    found: int,
    jac_t: float,
    output: np.ndarray,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    hidden_key: np.ndarray,
    checked: np.ndarray,
    mark: int,
) -> bool:
    """`_a_pick_beats` for an output of ascending keys: each pick's overlap counted exactly by a merge of its own
    keys with the output's; each is marked checked."""
    n = len(output)
    for j in range(found):
        unit = picks[j]
        checked[unit] = mark
        c, _ = _sorted_overlap(output, unit_keys[unit_offsets[unit] : unit_offsets[unit + 1]], hidden_key)
        if jac_t < c / (n + (unit_offsets[unit + 1] - unit_offsets[unit]) - c) - TIE:
            return True
    return False


@njit(nogil=True, cache=True)
def _ascending_runs(offsets: np.ndarray, keys: np.ndarray) -> bool:
    """Whether each run keys[offsets[i]:offsets[i + 1]] is strictly ascending."""
    for i in range(len(offsets) - 1):
        for p in range(offsets[i] + 1, offsets[i + 1]):
            if keys[p] <= keys[p - 1]:
                return False
    return True


@njit(nogil=True, cache=True)
def _target_postings(key_offsets: np.ndarray, key_units: np.ndarray, is_target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The postings of every key restricted to the units `is_target` marks (offsets, units), in their order."""
    n_keys = len(key_offsets) - 1
    offsets = np.zeros(n_keys + 1, dtype=np.int64)
    for key in range(n_keys):
        kept = 0
        for q in range(key_offsets[key], key_offsets[key + 1]):
            if is_target[key_units[q]]:
                kept += 1
        offsets[key + 1] = offsets[key] + kept
    units = np.empty(offsets[n_keys], dtype=key_units.dtype)
    at = 0
    for key in range(n_keys):
        for q in range(key_offsets[key], key_offsets[key + 1]):
            if is_target[key_units[q]]:
                units[at] = key_units[q]
                at += 1
    return offsets, units


@njit(nogil=True, cache=True)
def _holders(key_offsets: np.ndarray, key_units: np.ndarray, keysets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, unit) of every unit holding every key of a row of `keysets` (rows x width, each row's rarest key
    first), by row and then unit: `_anonymity_counts` with the units themselves."""
    rows = keysets.shape[0]
    row_out = np.empty(1024, dtype=np.int64)
    unit_out = np.empty(1024, dtype=np.int64)
    buf = np.empty(_widest_first_postings(key_offsets, keysets), dtype=key_units.dtype)
    m = 0
    for i in range(rows):
        found = _common_units(key_offsets, key_units, keysets[i], buf, 0, NO_SLOTS, NO_BITS)
        while m + found > len(row_out):
            row_out = np.concatenate((row_out, np.empty(len(row_out), dtype=np.int64)))
            unit_out = np.concatenate((unit_out, np.empty(len(unit_out), dtype=np.int64)))
        for j in range(found):
            row_out[m] = i
            unit_out[m] = buf[j]
            m += 1
    return row_out[:m].copy(), unit_out[:m].copy()


@njit(nogil=True, cache=True)
def _add_counts(codes: np.ndarray, offsets: np.ndarray) -> None:
    """Count each code (0..n-1) of `codes` into offsets[code + 1] (n + 1 entries: counts before the running sum)."""
    for i in range(len(codes)):
        offsets[codes[i] + 1] += 1


@njit(nogil=True, cache=True)
def _running_sum(offsets: np.ndarray) -> None:
    for c in range(len(offsets) - 1):
        offsets[c + 1] += offsets[c]


@njit(nogil=True, cache=True)
def _counting_offsets(codes: np.ndarray, n: int) -> np.ndarray:
    """Where each code's run starts in a counting sort of `codes` (0..n-1), and the end: n + 1 offsets."""
    offsets = np.zeros(n + 1, dtype=np.int64)
    _add_counts(codes, offsets)
    _running_sum(offsets)
    return offsets


@njit(nogil=True, cache=True)
def _place(units: np.ndarray, keys: np.ndarray, at: np.ndarray, placed: np.ndarray) -> None:
    """Put each pair's key at its unit's next free place (`at`: where each unit's run continues)."""
    for i in range(len(units)):
        u = units[i]
        placed[at[u]] = keys[i]
        at[u] += 1


@njit(nogil=True, cache=True)
def _distinct_runs(placed: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, int]:
    """Sort each unit's run of `placed` and drop its repeats, compacting in place: the new offsets and how
    many keys are left."""
    n_units = len(offsets) - 1
    distinct = np.zeros(n_units + 1, dtype=np.int64)
    m = 0
    for u in range(n_units):
        run = np.sort(placed[offsets[u] : offsets[u + 1]])
        for j in range(len(run)):
            if j == 0 or run[j] != run[j - 1]:
                placed[m] = run[j]
                m += 1
        distinct[u + 1] = m
    return distinct, m


@njit(nogil=True, cache=True)
def _mark(codes: np.ndarray, seen: np.ndarray) -> None:
    for i in range(len(codes)):
        seen[codes[i]] = True


@njit(nogil=True, cache=True)
def _key_major(
    unit_offsets: np.ndarray, unit_keys: np.ndarray, n_keys: int, dtype_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The same pairs by key, each key's units ascending (a counting sort on the key, units visited in order).
    Returns the key offsets and the units (the dtype of `dtype_of`)."""
    offsets = _counting_offsets(unit_keys, n_keys)
    at = offsets[:-1].copy()
    out = np.empty(len(unit_keys), dtype=dtype_of.dtype)
    for u in range(len(unit_offsets) - 1):
        for p in range(unit_offsets[u], unit_offsets[u + 1]):
            key = unit_keys[p]
            out[at[key]] = u
            at[key] += 1
    return offsets, out


# Large key sets are turned key-major in two passes (`_key_major_blocked`): one scatter over every key reads and
# writes its next place at random in arrays far over the caches (at 50 M pings, 118 M pairs over 470,717 keys:
# 6.6-7.6 s, most of it waiting on memory). First the pairs go to their block of 2^KEY_BLOCK_BITS keys (a few
# hundred write streams), then each block is placed with its keys' next places (16 KB) in L1: 3.4-3.6 s there, the
# same arrays (blocks of 2^9 to 2^11 keys alike; 2^13: 4.1 s, 2^15: 4.5 s).
KEY_BLOCK_BITS = 11
BLOCKED_FROM = 1 << 22  # pairs; below, every array of one scatter is small enough


@njit(nogil=True, cache=True)
def _key_major_blocked(
    unit_offsets: np.ndarray, unit_keys: np.ndarray, n_keys: int, dtype_of: np.ndarray, bits: int
) -> tuple[np.ndarray, np.ndarray]:
    """`_key_major` in two passes (blocks of 2^bits keys, bits <= 16): the same offsets and units."""
    offsets = _counting_offsets(unit_keys, n_keys)
    n = len(unit_keys)
    out = np.empty(n, dtype=dtype_of.dtype)
    low = np.empty(n, dtype=np.uint16)  # each pair's key within its block
    width = 1 << bits
    mask = width - 1
    n_blocks = (n_keys + width - 1) >> bits
    block_at = np.empty(n_blocks, dtype=np.int64)
    largest = 0
    for b in range(n_blocks):
        block_at[b] = offsets[b << bits]
        largest = max(largest, offsets[min((b + 1) << bits, n_keys)] - offsets[b << bits])
    for u in range(len(unit_offsets) - 1):  # units in order: each block's pairs by unit
        for p in range(unit_offsets[u], unit_offsets[u + 1]):
            key = unit_keys[p]
            at = block_at[key >> bits]
            out[at] = u
            low[at] = key & mask
            block_at[key >> bits] = at + 1
    units = np.empty(largest, dtype=dtype_of.dtype)
    next_at = np.empty(width, dtype=np.int64)
    for b in range(n_blocks):
        first = b << bits
        last = min(first + width, n_keys)
        lo, hi = offsets[first], offsets[last]
        for i in range(lo, hi):
            units[i - lo] = out[i]
        for j in range(last - first):
            next_at[j] = offsets[first + j]
        for i in range(lo, hi):  # still by unit: each key's units ascend
            j = low[i]
            out[next_at[j]] = units[i - lo]
            next_at[j] += 1
    return offsets, out


@njit(nogil=True, cache=True)
def _allocate_states(
    pools: np.ndarray,
    pool_offsets: np.ndarray,
    slot_codes: np.ndarray,
    slot_flows: np.ndarray,
    slot_offsets: np.ndarray,
    yesterday: np.ndarray,
    regular: bool,
    result: np.ndarray,
) -> None:
    for s in range(len(pool_offsets) - 1):
        lo, hi = pool_offsets[s], pool_offsets[s + 1]
        if hi - lo == 1:  # a state of one trajectory: the first slot with a flow takes it
            for j in range(slot_offsets[s], slot_offsets[s + 1]):
                if slot_flows[j] > 0:
                    result[pools[lo]] = slot_codes[j]
                    break
            continue
        free = np.ones(hi - lo, dtype=np.bool_)
        for j in range(slot_offsets[s], slot_offsets[s + 1]):
            code, left = slot_codes[j], slot_flows[j]
            if regular and code >= 0:  # those here the day before first, each pass in pool order
                for i in range(hi - lo):
                    if left == 0:
                        break
                    if free[i] and yesterday[pools[lo + i]] == code:
                        result[pools[lo + i]] = code
                        free[i] = False
                        left -= 1
            for i in range(hi - lo):
                if left == 0:
                    break
                if free[i]:
                    result[pools[lo + i]] = code
                    free[i] = False
                    left -= 1


@njit(nogil=True, cache=True)
def _by_code(codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The positions of `codes` (0..n-1) by code, in position order within a code (the stable argsort, as a
    counting sort), and each code's offsets."""
    offsets = _counting_offsets(codes, n)
    at = offsets[:-1].copy()
    placed = np.empty(len(codes), dtype=np.int64)
    for i in range(len(codes)):
        placed[at[codes[i]]] = i
        at[codes[i]] += 1
    return placed, offsets


@njit(nogil=True, cache=True)
def _served_slots(
    flow_state: np.ndarray, flow_slot: np.ndarray, flow_size: np.ndarray, n_states: int, n_slots: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The flows as a dict built from the entries in order would hold them: the states in the order of their
    first entry; per state, its slots in the order of their first entry, a repeat adding to it, then largest
    flow first (a stable sort). Returns the states in that order, the slots, their flows and each state's
    offsets into them."""
    rank = np.full(n_states, -1, dtype=np.int64)
    order = np.empty(n_states, dtype=np.int64)
    k = 0
    for e in range(len(flow_state)):
        if rank[flow_state[e]] < 0:
            rank[flow_state[e]] = k
            order[k] = flow_state[e]
            k += 1
    entry_rank = np.empty(len(flow_state), dtype=np.int64)
    for e in range(len(flow_state)):
        entry_rank[e] = rank[flow_state[e]]
    entries, entry_offsets = _by_code(entry_rank, k)
    slot_at = np.full(n_slots, -1, dtype=np.int64)
    out_slot = np.empty(len(flow_state), dtype=np.int64)
    out_flow = np.empty(len(flow_state), dtype=np.int64)
    out_offsets = np.zeros(k + 1, dtype=np.int64)
    m = 0
    for r in range(k):
        start = m
        for p in range(entry_offsets[r], entry_offsets[r + 1]):
            slot = flow_slot[entries[p]]
            if slot_at[slot] < 0:
                slot_at[slot] = m
                out_slot[m] = slot
                out_flow[m] = flow_size[entries[p]]
                m += 1
            else:
                out_flow[slot_at[slot]] += flow_size[entries[p]]
        for q in range(start, m):
            slot_at[out_slot[q]] = -1
        if m - start > 1:
            served = np.argsort(-out_flow[start:m], kind="mergesort")
            out_slot[start:m] = out_slot[start:m][served]
            out_flow[start:m] = out_flow[start:m][served]
        out_offsets[r + 1] = m
    return order[:k], out_slot[:m], out_flow[:m], out_offsets


@njit(nogil=True, cache=True)
def _shuffle(values: np.ndarray, draws: np.ndarray, used: int) -> int:
    """Shuffle `values` in place as NumPy's Generator.permutation shuffles an arange (Fisher-Yates from the end,
    each index drawn by random_interval: a 32-bit draw under the smallest mask covering the bound, drawn again
    while above it), reading draws[used:]. Returns where the draws continue, -1 when they ran out."""
    for i in range(len(values) - 1, 0, -1):
        mask = np.uint64(i)
        for shift in (1, 2, 4, 8, 16, 32):
            mask |= mask >> np.uint64(shift)
        while True:
            if used >= len(draws):
                return -1
            drawn = np.uint64(draws[used]) & mask
            used += 1
            if drawn <= np.uint64(i):
                break
        j = np.int64(drawn)
        values[i], values[j] = values[j], values[i]
    return used


@njit(nogil=True, cache=True)
def _allocate_flows(
    flow_state: np.ndarray,
    flow_slot: np.ndarray,
    flow_size: np.ndarray,
    state_of: np.ndarray,
    n_states: int,
    slot_codes: np.ndarray,
    draws: np.ndarray,
    yesterday: np.ndarray,
    regular: bool,
    result: np.ndarray,
) -> int:
    members, member_offsets = _by_code(state_of, n_states)
    order, out_slot, out_flow, out_offsets = _served_slots(flow_state, flow_slot, flow_size, n_states, len(slot_codes))
    # each served state's trajectories, shuffled in serving order (one trajectory: nothing drawn)
    pool_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    for r in range(len(order)):
        pool_offsets[r + 1] = pool_offsets[r] + member_offsets[order[r] + 1] - member_offsets[order[r]]
    pools = np.empty(pool_offsets[-1], dtype=np.int64)
    used = 0
    for r in range(len(order)):
        lo = member_offsets[order[r]]
        pool = pools[pool_offsets[r] : pool_offsets[r + 1]]
        for i in range(len(pool)):
            pool[i] = members[lo + i]
        used = _shuffle(pool, draws, used)
        if used < 0:
            return -1
    codes = np.empty(len(out_slot), dtype=np.int64)
    for q in range(len(out_slot)):
        codes[q] = slot_codes[out_slot[q]]
    _allocate_states(pools, pool_offsets, codes, out_flow, out_offsets, yesterday, regular, result)
    return used


@njit(nogil=True, cache=True)
def _first_seen(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct int64 codes in order of first sight and each code's number among them (a hash table, open
    addressing)."""
    n = len(codes)
    size, bits = 2, 1  # a power of two at least twice the codes: short probes
    while size < 2 * n:
        size <<= 1
        bits += 1
    shift = np.uint64(64 - bits)  # Fibonacci hashing: the product's top bits
    held = np.full(size, -1, dtype=np.int64)  # the distinct code's number in each bucket (-1: empty)
    distinct = np.empty(n, dtype=np.int64)
    seen = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        c = codes[i]
        h = np.int64((np.uint64(c) * np.uint64(0x9E3779B97F4A7C15)) >> shift)
        while held[h] >= 0 and distinct[held[h]] != c:
            h = (h + 1) & (size - 1)
        if held[h] < 0:
            held[h] = k
            distinct[k] = c
            k += 1
        seen[i] = held[h]
    return distinct[:k], seen


# The regularity attackers' guesses (`risk.advantage`): the keys a known key's guesses are drawn from.
GUESS_SHIFTS = 0  # a table of keys x shifts: the same area at fixed offsets (-1: none published)
GUESS_WEEK = 1  # the same area and level at every bucket within a week
GUESS_TIME_OF_DAY = 2  # the same area and level at the same time of day (an hour either way) on every day
WEEK_MINUTES = 7 * 24 * 60
DAY_MINUTES = 24 * 60
TIE = 1e-12  # the Jaccard tolerance of a tie, as `_select_ties`


@njit(nogil=True, cache=True)
def _mark_guesses(
    mode: int,
    key: int,
    shifts: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    group: np.ndarray,
    minute: np.ndarray,
    stamp: np.ndarray,
    mark: int,
    base: int,
    out: np.ndarray,
    n: int,
) -> int:
    """Append to out[n:] the guesses from `key` not yet in the output (`stamp` below `base`), stamped `mark`;
    returns the new length."""
    if mode == GUESS_SHIFTS:
        for j in range(shifts.shape[1]):
            g = shifts[key, j]
            if g >= 0 and stamp[g] < base:
                stamp[g] = mark
                out[n] = g
                n += 1
        return n
    lo, hi = starts[group[key]], starts[group[key] + 1]
    if mode == GUESS_WEEK:
        # members sorted by start: the first at or after start - a week, then on to the last at or before + a week
        left, right = lo, hi
        while left < right:
            mid = (left + right) >> 1
            if minute[order[mid]] < minute[key] - WEEK_MINUTES:
                left = mid + 1
            else:
                right = mid
        for p in range(left, hi):
            g = order[p]
            if minute[g] > minute[key] + WEEK_MINUTES:
                break
            if stamp[g] < base:
                stamp[g] = mark
                out[n] = g
                n += 1
        return n
    for p in range(lo, hi):
        g = order[p]
        offset = ((minute[g] - minute[key]) % DAY_MINUTES + DAY_MINUTES) % DAY_MINUTES
        if (offset <= 60 or offset >= DAY_MINUTES - 60) and stamp[g] < base:
            stamp[g] = mark
            out[n] = g
            n += 1
    return n


@njit(nogil=True, cache=True)
def _overlap(unit_offsets: np.ndarray, unit_keys: np.ndarray, unit: int, stamp: np.ndarray, base: int) -> tuple[int, int]:
    """How many of `unit`'s keys the output holds (stamp >= base), and how many of them as guesses (base + 1)."""
    held = 0
    guessed = 0
    for p in range(unit_offsets[unit], unit_offsets[unit + 1]):
        s = stamp[unit_keys[p]]
        if s >= base:
            held += 1
            if s == base + 1:
                guessed += 1
    return held, guessed


@njit(nogil=True, cache=True)
def _regularity_output(
    mode: int,
    known_keys: np.ndarray,
    lo: int,
    hi: int,
    shifts: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    group: np.ndarray,
    minute: np.ndarray,
    stamp: np.ndarray,
    base: int,
    output: np.ndarray,
) -> int:
    """The output of the knowledge set known_keys[lo:hi] into output[:n] (n returned): its known keys, stamped
    `base`, then their guesses not among them, stamped base + 1."""
    n = 0
    for p in range(lo, hi):
        key = known_keys[p]
        if stamp[key] < base:
            stamp[key] = base
            output[n] = key
            n += 1
    for p in range(lo, hi):
        n = _mark_guesses(mode, known_keys[p], shifts, order, starts, group, minute, stamp, base + 1, base, output, n)
    return n


@njit(nogil=True, cache=True)
def _beaten_early(
    known_keys: np.ndarray,
    lo: int,
    hi: int,
    target: int,
    jac_t: float,
    n: int,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    stamp: np.ndarray,
    base: int,
    budget: int,
) -> bool:
    """Whether a holder of the target's rarest known key matches the output (n keys) strictly better than the
    target: then the target is no tie for the best, whatever the other units. The holders are tried until their
    keys read add up to `budget` (a share of what the whole walk of the output's postings reads)."""
    rare, fewest = -1, len(key_units) + 1
    for p in range(lo, hi):
        key = known_keys[p]
        if key_offsets[key + 1] - key_offsets[key] < fewest:
            rare, fewest = key, key_offsets[key + 1] - key_offsets[key]
    if rare < 0:
        return False
    spent = 0
    for q in range(key_offsets[rare], key_offsets[rare + 1]):
        unit = key_units[q]
        if unit != target:
            spent += unit_offsets[unit + 1] - unit_offsets[unit]
            if spent > budget:
                return False
            c, _ = _overlap(unit_offsets, unit_keys, unit, stamp, base)
            if jac_t < c / (n + (unit_offsets[unit + 1] - unit_offsets[unit]) - c) - TIE:
                return True
    return False


@njit(nogil=True, cache=True)
def _ties_of_counts(
    touched: np.ndarray, seen: int, inter: np.ndarray, n: int, jac_t: float, unit_offsets: np.ndarray
) -> int:
    """From every touched unit's exact overlap with the output (n keys) in `inter`: how many units tie for the
    best Jaccard when the target (Jaccard `jac_t`) is among them, else 0. `inter` is left all zero."""
    best = _best_jaccard(touched, seen, inter, n, unit_offsets)
    ties = 0
    for j in range(seen):
        unit = touched[j]
        c = inter[unit]
        if c / (n + (unit_offsets[unit + 1] - unit_offsets[unit]) - c) >= best - TIE:
            ties += 1
        inter[unit] = 0
    return ties if jac_t >= best - TIE else 0


@njit(nogil=True, cache=True)
def _ties_at_best(
    output: np.ndarray,
    n: int,
    jac_t: float,
    unit_offsets: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    inter: np.ndarray,
    touched: np.ndarray,
) -> int:
    """How many units tie for the best Jaccard with output[:n] when the target (Jaccard `jac_t`) is among
    them, else 0 (`_best_slice`'s ties, counted). `inter` is left all zero."""
    seen = 0
    for p in range(n):
        key = output[p]
        for q in range(key_offsets[key], key_offsets[key + 1]):
            unit = key_units[q]
            if inter[unit] == 0:
                touched[seen] = unit
                seen += 1
            inter[unit] += 1
    return _ties_of_counts(touched, seen, inter, n, jac_t, unit_offsets)


@njit(nogil=True, cache=True)
def _first_stride(n: int, round_keys: int) -> int:
    """The stride of the first round over n output keys: the largest power of two leaving at least `round_keys`
    keys in it (1: one round, the whole walk)."""
    stride = 1
    while stride * 2 * round_keys <= n:
        stride *= 2
    return stride


@njit(nogil=True, cache=True)
def _walk_postings(
    output: np.ndarray,
    n: int,
    start: int,
    step: int,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    inter: np.ndarray,
    touched: np.ndarray,
    seen: int,
) -> int:
    """Count into `inter` the units of the postings of output[start:n:step], appending the units met for the
    first time to touched[seen:]; returns the new number touched."""
    for p in range(start, n, step):
        key = output[p]
        for q in range(key_offsets[key], key_offsets[key + 1]):
            unit = key_units[q]
            if inter[unit] == 0:
                touched[seen] = unit
                seen += 1
            inter[unit] += 1
    return seen


@njit(nogil=True, cache=True)
def _promising(
    touched: np.ndarray,
    seen: int,
    inter: np.ndarray,
    scale: float,
    n: int,
    jac_t: float,
    unit_offsets: np.ndarray,
    checked: np.ndarray,
    mark: int,
    picks: np.ndarray,
) -> int:
    """The units of touched[:seen] not yet checked (`checked` below `mark`) whose counts so far, scaled to the
    whole output by `scale`, promise a Jaccard above the target's `jac_t`: the best len(picks) of them into
    `picks`, best first (their number returned). Only an order of what to check: the checks are exact."""
    width = len(picks)
    promise = np.empty(width)
    found = 0
    # A unit's promise is at most its scaled count over n (its size is at least the count it is promised), so a
    # count at most `bar` (that bound below the promise to beat by a relative 1e-9, far above rounding) is passed
    # over without reading its size or whether it was checked: most touched units share a key or two with the
    # output, and those reads, at random over every unit, were most of the scan.
    bar = jac_t * n / scale / (1.0 + 1e-9)
    for j in range(seen):
        unit = touched[j]
        if inter[unit] <= bar or checked[unit] == mark:
            continue
        size = unit_offsets[unit + 1] - unit_offsets[unit]
        c = min(inter[unit] * scale, float(size))
        jac = c / (n + size - c)
        if jac <= jac_t or (found == width and jac <= promise[width - 1]):
            continue
        at = min(found, width - 1)
        while at > 0 and promise[at - 1] < jac:
            promise[at] = promise[at - 1]
            picks[at] = picks[at - 1]
            at -= 1
        promise[at] = jac
        picks[at] = unit
        found = min(found + 1, width)
        if found == width:
            bar = max(jac_t, promise[width - 1]) * n / scale / (1.0 + 1e-9)
    return found


@njit(nogil=True, cache=True)
def _a_pick_beats(
    picks: np.ndarray,
    found: int,
    jac_t: float,
    n: int,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    stamp: np.ndarray,
    base: int,
    checked: np.ndarray,
    mark: int,
) -> bool:
    """Whether one of picks[:found] matches the output (n keys, stamped from `base`) strictly better than the
    target, its overlap counted exactly from its own keys (`_beaten_early`'s test); each is marked checked."""
    for j in range(found):
        unit = picks[j]
        checked[unit] = mark
        c, _ = _overlap(unit_offsets, unit_keys, unit, stamp, base)
        if jac_t < c / (n + (unit_offsets[unit + 1] - unit_offsets[unit]) - c) - TIE:
            return True
    return False


@njit(nogil=True, cache=True)
def _ties_unless_beaten(
    output: np.ndarray,
    n: int,
    jac_t: float,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    stamp: np.ndarray,
    base: int,
    inter: np.ndarray,
    touched: np.ndarray,
    checked: np.ndarray,
    picks: np.ndarray,
    round_keys: int,
) -> int:
    """`_ties_at_best`, its walk of the output's postings done in rounds that double the keys walked (every
    stride-th key, then the keys halfway between, down to every key). After each round but the last, the units
    whose counts so far promise the best Jaccard are checked exactly, and one strictly better than the target
    ends the walk: the target is then no tie for the best, whatever the keys not walked. A target rarely is the
    best match, and the units beating it hold so many of the output's keys that a small share of them ranks
    them near the top. The last round leaves every unit's exact count, from which the ties are counted as
    `_ties_at_best` counts them. `checked` marks the units checked for this output (`base`); `inter` is left
    all zero."""
    stride = _first_stride(n, round_keys)
    seen = _walk_postings(output, n, 0, stride, key_offsets, key_units, inter, touched, 0)
    while stride > 1:
        scale = n / ((n + stride - 1) // stride)  # the output's keys per key walked so far
        found = _promising(touched, seen, inter, scale, n, jac_t, unit_offsets, checked, base, picks)
        if _a_pick_beats(picks, found, jac_t, n, unit_offsets, unit_keys, stamp, base, checked, base):
            for j in range(seen):
                inter[touched[j]] = 0
            return 0
        stride //= 2
        seen = _walk_postings(output, n, stride, 2 * stride, key_offsets, key_units, inter, touched, seen)
    return _ties_of_counts(touched, seen, inter, n, jac_t, unit_offsets)


@njit(nogil=True, cache=True)
def _regularity_slice_full_walk(
    mode: int,
    known_offsets: np.ndarray,
    known_keys: np.ndarray,
    targets: np.ndarray,
    shifts: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    group: np.ndarray,
    minute: np.ndarray,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    at: int,
    end: int,
    probe: int,
) -> np.ndarray:
    """`_regularity_slice` with the whole walk of every output's postings (`_ties_at_best`): the reference the
    rounds are tested and measured against."""
    shares = np.zeros(end - at)
    stamp = np.zeros(len(key_offsets) - 1, dtype=np.int64)
    output = np.empty(len(key_offsets) - 1, dtype=np.int64)
    inter = np.zeros(len(unit_offsets) - 1, dtype=np.int64)
    touched = np.empty(len(unit_offsets) - 1, dtype=np.int64)
    for i in range(at, end):
        base = 2 * (i - at) + 2  # this output's stamps: base (a known key), base + 1 (a guess)
        lo, hi = known_offsets[i], known_offsets[i + 1]
        n = _regularity_output(mode, known_keys, lo, hi, shifts, order, starts, group, minute, stamp, base, output)
        target = targets[i]
        held, guessed = _overlap(unit_offsets, unit_keys, target, stamp, base)
        if guessed == 0:  # the output shows nothing of the target's the adversary did not know
            continue
        jac_t = held / (n + (unit_offsets[target + 1] - unit_offsets[target]) - held)
        walk = 0  # what the whole walk reads: the postings of the output's keys
        for p in range(n):
            walk += key_offsets[output[p] + 1] - key_offsets[output[p]]
        args = (unit_offsets, unit_keys, key_offsets, key_units, stamp, base, walk // probe)
        if _beaten_early(known_keys, lo, hi, target, jac_t, n, *args):
            continue
        ties = _ties_at_best(output, n, jac_t, unit_offsets, key_offsets, key_units, inter, touched)
        if ties:
            shares[i - at] = 1.0 / ties
    return shares


@njit(nogil=True, cache=True)
def _regularity_slice(
    mode: int,
    known_offsets: np.ndarray,
    known_keys: np.ndarray,
    targets: np.ndarray,
    shifts: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    group: np.ndarray,
    minute: np.ndarray,
    unit_offsets: np.ndarray,
    unit_keys: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    at: int,
    end: int,
    probe: int,
    round_keys: int,
    checks: int,
) -> np.ndarray:
    """Per knowledge set at..end-1, the regularity attacker's success (`regularity_shares`)."""
    shares = np.zeros(end - at)
    stamp = np.zeros(len(key_offsets) - 1, dtype=np.int64)
    output = np.empty(len(key_offsets) - 1, dtype=np.int64)
    # int32 (a count is at most the output's keys): half the cache lines of the walk's random accesses
    inter = np.zeros(len(unit_offsets) - 1, dtype=np.int32)
    touched = np.empty(len(unit_offsets) - 1, dtype=np.int64)
    checked = np.zeros(len(unit_offsets) - 1, dtype=np.int64)
    picks = np.empty(checks, dtype=np.int64)
    for i in range(at, end):
        base = 2 * (i - at) + 2  # this output's stamps: base (a known key), base + 1 (a guess)
        lo, hi = known_offsets[i], known_offsets[i + 1]
        n = _regularity_output(mode, known_keys, lo, hi, shifts, order, starts, group, minute, stamp, base, output)
        target = targets[i]
        held, guessed = _overlap(unit_offsets, unit_keys, target, stamp, base)
        if guessed == 0:  # the output shows nothing of the target's the adversary did not know
            continue
        jac_t = held / (n + (unit_offsets[target + 1] - unit_offsets[target]) - held)
        walk = 0  # what the whole walk reads: the postings of the output's keys
        for p in range(n):
            walk += key_offsets[output[p] + 1] - key_offsets[output[p]]
        args = (unit_offsets, unit_keys, key_offsets, key_units, stamp, base, walk // max(probe, 1))
        if probe and _beaten_early(known_keys, lo, hi, target, jac_t, n, *args):
            continue
        walked = (inter, touched, checked, picks, round_keys)
        ties = _ties_unless_beaten(output, n, jac_t, unit_offsets, unit_keys, key_offsets, key_units, stamp, base, *walked)
        if ties:
            shares[i - at] = 1.0 / ties
    return shares


def _within(name: str, codes: np.ndarray, bound: int) -> None:
    """Refuse codes outside 0..bound-1 (the compiled loops would read past their arrays)."""
    if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= bound):
        raise ValueError(f"{name}: codes {int(codes.min())}..{int(codes.max())} outside 0..{bound - 1}")


def stable_order(codes: np.ndarray, n: int) -> np.ndarray:
    """`np.argsort(codes, kind="stable")` of codes 0..n-1, by a counting sort: linear in the codes and n, where
    the sort of int64 codes is a merge sort (the same positions, so every figure drawn from them is the same)."""
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    _within("codes", codes, n)
    return _by_code(codes, n)[0]


def _postings(key_offsets: np.ndarray, key_units: np.ndarray) -> None:
    if len(key_offsets) == 0 or key_offsets[0] != 0 or key_offsets[-1] != len(key_units):
        raise ValueError("postings: offsets do not span the units")
    if len(key_offsets) > 1 and (np.diff(key_offsets) < 0).any():
        raise ValueError("postings: offsets decrease")


class DenseKeys(NamedTuple):
    """Bitsets over the units of the keys most units hold (`dense_keys`): `slot[key]` is the row of `bits`
    holding the key's bitset, -1 for a key looked up in its postings."""

    slot: np.ndarray
    bits: np.ndarray
    pairs: int  # the length of the postings they were built from (a check that they are the same postings)


# A key held by more than n_units / DENSE_ALWAYS units always has a bitset: it is smaller than its postings. Keys
# held by more than n_units / DENSE_WIDEST have one too, the most held first, while their bitsets together take at
# most DENSE_EXTRA of the postings' bytes: at 50 M pings (200,000 units) the knowledge sets' candidates are mostly
# checked against keys a few thousand units hold, where a galloping search costs several bit tests
# (bench/RESULTS.md, "The estimate's bitsets, the promising scan's bound, the draw's counting sort").
DENSE_ALWAYS = 32
DENSE_WIDEST = 128
DENSE_EXTRA = 0.5


def dense_slots(key_offsets: np.ndarray, n_units: int, key_bytes: int, widest: int | None = None) -> np.ndarray:
    """The slot of each key's bitset (-1: none), slots in key order: every key held by more than
    n_units / DENSE_ALWAYS units, and of those held by more than n_units / `widest` (DENSE_WIDEST), the most held
    (ties to the lower key) while their bitsets take at most DENSE_EXTRA x `key_bytes` (the postings' bytes)."""
    widest = DENSE_WIDEST if widest is None else widest
    sizes = np.diff(np.asarray(key_offsets, dtype=np.int64))
    chosen = sizes * DENSE_ALWAYS > n_units
    wider = np.flatnonzero(~chosen & (sizes * max(widest, DENSE_ALWAYS) > n_units))
    if len(wider):
        room = int(DENSE_EXTRA * key_bytes) // (((n_units + 63) // 64) * 8)
        chosen[wider[np.lexsort((wider, -sizes[wider]))][:room]] = True
    slot = np.full(len(sizes), -1, dtype=np.int32)
    slot[chosen] = np.arange(int(chosen.sum()), dtype=np.int32)
    return slot


def dense_keys(key_offsets: np.ndarray, key_units: np.ndarray, n_units: int, widest: int | None = None) -> DenseKeys:
    """The bitsets of the keys held by more than n_units / 32 units, and of the most held of those held by more
    than n_units / `widest`, within a budget (`dense_slots`). The first are each smaller than the postings they
    stand for; the others together take at most half the postings' memory. A few such keys hold a large share of
    the pairs, and most knowledge sets name at least one of them: a bit test per candidate replaces a search of
    postings thousands long."""
    _postings(key_offsets, key_units)
    _within("postings' units", key_units, n_units)
    slot = dense_slots(key_offsets, n_units, int(np.asarray(key_units).nbytes), widest)
    return DenseKeys(slot, _dense_bits(key_offsets, key_units, n_units, slot), len(key_units))


def _knowledge_sets(keysets: np.ndarray, n_keys: int) -> np.ndarray:
    """The knowledge sets as a contiguous int64 array, refused unless rows x at least one key, each a key code."""
    if keysets.ndim != 2 or keysets.shape[1] == 0:
        raise ValueError(f"knowledge sets: rows of at least one key expected, got shape {keysets.shape}")
    _within("knowledge sets", keysets.ravel(), n_keys)
    return np.ascontiguousarray(keysets, dtype=np.int64)


def anonymity_counts(
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    keysets: np.ndarray,
    dense: DenseKeys | None = None,
    exact: bool = False,
) -> np.ndarray:
    """max(1, number of units holding every key of the row) for every row of `keysets` (rows x width, each
    row's rarest key first). `dense`: the bitsets of the same postings (`dense_keys`), or None. `exact`: the
    number of units itself, 0 included (postings of a range of the units, see `risk.ranges`)."""
    _postings(key_offsets, key_units)
    rows = _knowledge_sets(keysets, len(key_offsets) - 1)
    if dense is None:
        dense = DenseKeys(NO_SLOTS, NO_BITS, len(key_units))
    elif len(dense.slot) != len(key_offsets) - 1 or dense.pairs != len(key_units):
        raise ValueError(
            f"dense keys: built for {len(dense.slot):,} keys and {dense.pairs:,} pairs, "
            f"given {len(key_offsets) - 1:,} and {len(key_units):,}"
        )
    elif len(dense.slot) and int(dense.slot.max()) >= len(dense.bits):
        raise ValueError(f"dense keys: a slot past the {len(dense.bits):,} bitsets")
    return _anonymity_counts(key_offsets, key_units, rows, dense.slot, dense.bits, exact)


def holders(key_offsets: np.ndarray, key_units: np.ndarray, keysets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, unit) of every unit holding every key of a row of `keysets`, by row and then unit."""
    _postings(key_offsets, key_units)
    return _holders(key_offsets, key_units, _knowledge_sets(keysets, len(key_offsets) - 1))


def best_slice(
    rec_offsets: np.ndarray,
    rec_keys: np.ndarray,
    key_offsets: np.ndarray,
    key_units: np.ndarray,
    unit_offsets: np.ndarray,
    hidden_key: np.ndarray,
    at: int,
    end: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tie pairs, shared published keys, best Jaccard and precision of the trajectories at..end-1 (the
    kernel checks each code as it reads it: a slice reads a small part of the arrays it is given)."""
    if not 0 <= at <= end <= len(rec_offsets) - 1:
        raise ValueError(f"trajectories {at}..{end} outside 0..{len(rec_offsets) - 1}")
    return _best_slice(rec_offsets, rec_keys, key_offsets, key_units, unit_offsets, hidden_key, at, end)


def unit_major(units: np.ndarray, keys: np.ndarray, n_units: int, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """The unit offsets and each unit's sorted distinct keys (the dtype of `keys`) of (unit, key) pairs given
    in any order, with repeats: a counting sort on the unit, then a sort and a pass dropping repeats inside
    each unit's (short) run, compacted in place. Holds 4 bytes per pair beside its inputs; the keys returned
    are a view of an array that holds every pair read (its repeats' tail is not worth a copy here)."""
    return unit_major_batches([(units, keys)], n_units, n_keys)


def unit_major_batches(
    batches: list[tuple[np.ndarray, np.ndarray]], n_units: int, n_keys: int
) -> tuple[np.ndarray, np.ndarray]:
    """`unit_major` of the pairs of all `batches` (unit codes, key codes), without first gathering them in
    one array: the batches are counted, then placed one by one and dropped from the list (emptied). Holds 4
    bytes per pair beside the batches, as `unit_major` does beside its inputs."""
    offsets = np.zeros(n_units + 1, dtype=np.int64)
    for units, keys in batches:
        if len(units) != len(keys):
            raise ValueError(f"key sets: {len(units):,} units for {len(keys):,} keys")
        _within("key sets' units", units, n_units)
        _within("key sets' keys", keys, n_keys)
        _add_counts(units, offsets)
    _running_sum(offsets)
    placed = np.empty(int(offsets[-1]), dtype=batches[0][1].dtype if batches else np.int32)
    at = offsets[:-1].copy()
    while batches:
        units, keys = batches.pop()
        _place(units, keys, at, placed)
    distinct, m = _distinct_runs(placed, offsets)
    return distinct, placed[:m]


def codes_held(codes: np.ndarray, n: int) -> np.ndarray:
    """Which of the codes 0..n-1 occur in `codes`."""
    _within("codes", codes, n)
    seen = np.zeros(n, dtype=np.bool_)
    _mark(codes, seen)
    return seen


def key_major(
    unit_offsets: np.ndarray, unit_keys: np.ndarray, n_keys: int, unit_dtype: type = np.int32
) -> tuple[np.ndarray, np.ndarray]:
    """The key offsets and each key's sorted units (in `unit_dtype`) of the pairs `unit_major` gave."""
    _within("key sets' keys", unit_keys, n_keys)
    if len(unit_offsets) == 0 or unit_offsets[0] != 0 or unit_offsets[-1] != len(unit_keys):
        raise ValueError("key sets: unit offsets do not span the keys")
    if len(unit_keys) >= BLOCKED_FROM and n_keys > 1 << KEY_BLOCK_BITS:
        return _key_major_blocked(unit_offsets, unit_keys, n_keys, np.zeros(0, dtype=unit_dtype), KEY_BLOCK_BITS)
    return _key_major(unit_offsets, unit_keys, n_keys, np.zeros(0, dtype=unit_dtype))


class PairScan(NamedTuple):
    """One pass over a coded key set file's pairs (`scan_pairs`). Codes are read against the numbers of units and
    keys the file declares; the counts are only meaningful when `in_range`."""

    unit_min: int | None
    unit_max: int | None
    key_min: int | None
    key_max: int | None
    in_range: bool  # every unit code in 0..units-1 and key code in 0..keys-1
    ordered: bool  # units ascending, each unit's keys strictly ascending (as `write_coded` writes them)
    unit_counts: np.ndarray  # pairs of each unit code (int64, `units` long)
    keys_held: int  # distinct key codes among the pairs


@njit(nogil=True, cache=True)
def _scan_pairs(units: np.ndarray, keys: np.ndarray, counts: np.ndarray, seen: np.ndarray) -> tuple:
    n_units, n_keys = len(counts), len(seen)
    u_min, u_max, k_min, k_max = units[0], units[0], keys[0], keys[0]
    in_range, ordered, held = True, True, 0
    for i in range(len(units)):
        u, k = units[i], keys[i]
        u_min, u_max, k_min, k_max = min(u_min, u), max(u_max, u), min(k_min, k), max(k_max, k)
        if i > 0 and (u < units[i - 1] or (u == units[i - 1] and k <= keys[i - 1])):
            ordered = False
        if u < 0 or u >= n_units or k < 0 or k >= n_keys:
            in_range = False
            continue
        counts[u] += 1
        if not seen[k]:
            seen[k] = True
            held += 1
    return u_min, u_max, k_min, k_max, in_range, ordered, held


def scan_pairs(units: np.ndarray, keys: np.ndarray, n_units: int, n_keys: int) -> PairScan:
    """The bounds, order and per-unit counts of (unit, key) code pairs in one compiled pass, where numpy took
    one pass (and a temporary) per figure: 7 s of the 21 s it took to read a 50 M-ping release's key set file
    back (bench/RESULTS.md). Codes outside the declared numbers are never used as indices."""
    if len(units) != len(keys):
        raise ValueError(f"pairs: {len(units)} unit codes against {len(keys)} key codes")
    counts = np.zeros(max(n_units, 0), dtype=np.int64)
    if not len(units):
        return PairScan(None, None, None, None, True, True, counts, 0)
    seen = np.zeros(max(n_keys, 0), dtype=np.bool_)
    u_min, u_max, k_min, k_max, in_range, ordered, held = _scan_pairs(units, keys, counts, seen)
    return PairScan(int(u_min), int(u_max), int(k_min), int(k_max), bool(in_range), bool(ordered), counts, int(held))


@njit(nogil=True, cache=True)
def _unit_class_counts(
    unit_offsets: np.ndarray, unit_keys: np.ndarray, class_code: np.ndarray, n_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    # per unit: count its keys' classes in arrays over the classes (stamped with the unit, never cleared), then
    # sort only the distinct classes it holds
    stamp = np.full(n_classes, -1, dtype=np.int64)
    count = np.zeros(n_classes, dtype=np.int64)
    held = np.empty(n_classes, dtype=np.int64)
    codes = np.empty(len(unit_keys), dtype=np.int64)
    counts = np.empty(len(unit_keys), dtype=np.int64)
    m = 0
    for u in range(len(unit_offsets) - 1):
        distinct = 0
        for p in range(unit_offsets[u], unit_offsets[u + 1]):
            c = class_code[unit_keys[p]]
            if stamp[c] != u:
                stamp[c] = u
                count[c] = 0
                held[distinct] = c
                distinct += 1
            count[c] += 1
        ordered = np.sort(held[:distinct])
        for j in range(distinct):
            codes[m] = u * n_classes + ordered[j]
            counts[m] = count[ordered[j]]
            m += 1
    return codes[:m].copy(), counts[:m].copy()


def unit_class_counts(
    unit_offsets: np.ndarray, unit_keys: np.ndarray, class_code: np.ndarray, n_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """How many of each unit's keys fall in each class, as np.unique(unit * n_classes + class_code[key],
    return_counts=True) over every (unit, key) pair gives it (int64 codes and counts, ascending), from each
    unit's own keys counted by class: a sort of the 118 M pairs of a 50 M-ping release was 12 s of the count
    classifier (bench/RESULTS.md)."""
    _within("unit keys", unit_keys, len(class_code))
    _within("key classes", class_code, n_classes)
    if len(unit_offsets) == 0 or unit_offsets[0] != 0 or unit_offsets[-1] != len(unit_keys):
        raise ValueError("key sets: unit offsets do not span the keys")
    classes = np.ascontiguousarray(class_code, dtype=np.int64)
    return _unit_class_counts(unit_offsets, unit_keys, classes, int(n_classes))


def distinct_inverse(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(codes, return_inverse=True) of a 1-d integer array, as int64: the sorted distinct codes and
    each code's place among them. One hash per code and a sort of the distinct ones only, where np.unique sorts
    every code with its position (the recovery's states, at every bucket)."""
    distinct, seen = _first_seen(np.ascontiguousarray(codes, dtype=np.int64).ravel())
    order = np.argsort(distinct)  # distinct values: any sort gives the same order
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return distinct[order], rank[seen]


# A shuffle of m trajectories draws m - 1 indices, each one 32-bit draw or more (a redraw is likelier than not
# under half): twice that and a few more is almost always enough; when it is not, the generator is rewound and
# twice as many are drawn.
SHUFFLE_DRAWS = 2
SPARE_DRAWS = 64


def allocate_flows(
    flow_state: np.ndarray,
    flow_slot: np.ndarray,
    flow_size: np.ndarray,
    state_of: np.ndarray,
    slot_codes: np.ndarray,
    yesterday: np.ndarray | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """The recovery's allocation (`risk.attack._allocate`) from its flows, entries (state, slot, size) in the order
    the flows were found, a (state, slot) repeated adding to its first entry: each trajectory's code (the slot's
    `slot_codes`, -1 where none). The states are served in the order of their first flow; each state's
    trajectories (in trajectory order) are shuffled as `rng.permutation` of their number would shuffle them, in
    that order, then its slots, largest flow first, take them, those whose `yesterday` is the slot's area first.

    The shuffles read the generator's 32-bit stream drawn in bulk, and the generator is left where the
    permutations would have left it: NumPy's Generator shuffles by Fisher-Yates with random_interval (a 32-bit
    draw under a mask, redrawn while above the bound) and `integers(0, 2**32, dtype=uint32)` returns that same
    stream. `tests/test_kernels.py` and `tests/test_attack.py` compare both, the slots and the generator's state, with
    `rng.permutation`."""
    n = len(state_of)
    n_states = int(state_of.max()) + 1 if n else 0
    if n >= 2**32:
        raise ValueError(f"allocation: {n:,} trajectories, past the 32-bit draws of a shuffle")
    _within("allocation: states", state_of, n_states)
    _within("allocation: flows' states", flow_state, n_states)
    _within("allocation: flows' slots", flow_slot, len(slot_codes))
    if not len(flow_state) == len(flow_slot) == len(flow_size):
        raise ValueError("allocation: flows' states, slots and sizes differ in length")
    regular = yesterday is not None
    before = np.asarray(yesterday, dtype=np.int64) if yesterday is not None else np.zeros(n, dtype=np.int64)
    if len(before) != n:
        raise ValueError(f"allocation: {len(before):,} day-before areas for {n:,} trajectories")
    args = (
        np.asarray(flow_state, dtype=np.int64),
        np.asarray(flow_slot, dtype=np.int64),
        np.asarray(flow_size, dtype=np.int64),
        np.asarray(state_of, dtype=np.int64),
        n_states,
        np.asarray(slot_codes, dtype=np.int64),
    )
    held = int(np.count_nonzero(np.bincount(args[3], minlength=n_states))) if n else 0
    wanted = SHUFFLE_DRAWS * (n - held) + SPARE_DRAWS if n > held else 0
    start = rng.bit_generator.state
    while True:
        draws = rng.integers(0, 2**32, size=wanted, dtype=np.uint32) if wanted else np.zeros(0, dtype=np.uint32)
        result = np.full(n, -1, dtype=np.int64)
        used = _allocate_flows(*args, draws, before, regular, result)
        if used >= 0:
            break
        rng.bit_generator.state = start
        wanted = max(2 * wanted, 1)
    if used < wanted:  # rewind, and take exactly what the shuffles read
        rng.bit_generator.state = start
        rng.integers(0, 2**32, size=used, dtype=np.uint32)
    return result


class Guesses(NamedTuple):
    """What a regularity attacker guesses from each known key (`risk.advantage`): `mode` GUESS_SHIFTS with
    `shifts` (keys x offsets, -1: none), or GUESS_WEEK / GUESS_TIME_OF_DAY over the keys grouped by area and level
    (`order`: key codes by group then start, `starts`: each group's first position, `group` and `minute` per
    key)."""

    mode: int
    shifts: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    group: np.ndarray
    minute: np.ndarray


# The holders of the target's rarest known key are tried first for a strictly better match, reading up to
# 1 / PROBE_SHARE of what the whole walk would: a failed try costs that much more, a success saves the walk.
PROBE_SHARE = 1
# The walk of an output's postings starts with about ROUND_KEYS of its keys and doubles them each round; after each
# round the CHECKS units its counts rank best are checked for a strictly better match (their own keys read). On
# the 10 M-ping benchmark (bench/regularity_bench.py) the cost is flat from 2 to 8 keys and 16 to 64 checks.
ROUND_KEYS = 2
CHECKS = 32
# A recovered trajectory is an output of hundreds of keys, each scan of its touched units (tens of thousands) after
# a round costs about as much as a round's walk: its first round walks about 50 keys (on 400 of the 50 M release's
# trajectories: 0.6-0.7 s with a first round of 2 to 50 keys, 1.5 s with 200, 2.7 s for the whole walk;
# bench/RESULTS.md).
TRAJECTORY_ROUND_KEYS = 50


class MatchSets:
    """Every unit's published key set and the postings, as the regularity kernel reads them (`KeySets`' arrays),
    their codes checked once here: the kernel's compiled loops index with them unchecked, and an assessment
    calls it for every attacker, zone and piece (checking 23 M pairs each time cost a tenth of the attackers' work
    at 10 M pings). The arrays are kept as read-only views."""

    __slots__ = ("unit_offsets", "unit_keys", "key_offsets", "key_units")

    def __init__(self, unit_offsets: np.ndarray, unit_keys: np.ndarray, key_offsets: np.ndarray, key_units: np.ndarray):
        n_keys, n_units = len(key_offsets) - 1, len(unit_offsets) - 1
        _postings(key_offsets, key_units)
        if n_units < 0 or unit_offsets[0] != 0 or unit_offsets[-1] != len(unit_keys) or (np.diff(unit_offsets) < 0).any():
            raise ValueError("regularity: the units' offsets do not span their keys")
        _within("regularity: units' keys", unit_keys, n_keys)
        _within("regularity: postings' units", key_units, n_units)
        self.unit_offsets, self.unit_keys = _read_only(unit_offsets), _read_only(unit_keys)
        self.key_offsets, self.key_units = _read_only(key_offsets), _read_only(key_units)


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


class LinkedTargets:
    """The targets whose ties with each recovered trajectory are read (`risk.attack._linked_targets`): `offsets`
    over the trajectories, then target unit codes (`units`); the `guessing` targets (a flag per unit), read for
    every trajectory; `key_offsets` over the keys, then target unit codes (`key_units`), read for every trajectory
    holding the key; with the postings of all of them (every key's holders among them). Built and checked once:
    `targets_best_slice` reads them unchecked for every slice of trajectories."""

    __slots__ = ("offsets", "units", "guessing", "key_offsets", "key_units", "postings", "holders")

    def __init__(
        self,
        truth: MatchSets,
        offsets: np.ndarray,
        units: np.ndarray,
        guessing: np.ndarray,
        key_offsets: np.ndarray | None = None,
        key_units: np.ndarray | None = None,
    ):
        n_units, n_keys = len(truth.unit_offsets) - 1, len(truth.key_offsets) - 1
        offsets, units = np.asarray(offsets, dtype=np.int64), np.asarray(units, dtype=np.int64)
        guessing = np.asarray(guessing, dtype=np.bool_)
        by_key = np.zeros(n_keys + 1, dtype=np.int64) if key_offsets is None else np.asarray(key_offsets, dtype=np.int64)
        of_key = np.zeros(0, dtype=np.int64) if key_units is None else np.asarray(key_units, dtype=np.int64)
        for name, at, values in (("trajectories'", offsets, units), ("keys'", by_key, of_key)):
            if not len(at) or at[0] != 0 or at[-1] != len(values) or (np.diff(at) < 0).any():
                raise ValueError(f"best matches: the linked targets' offsets over the {name} do not span their targets")
            _within("best matches: targets", values, n_units)
        if len(by_key) != n_keys + 1:
            raise ValueError(f"best matches: the anchors' offsets cover {len(by_key) - 1} keys, not {n_keys}")
        if len(guessing) != n_units:
            raise ValueError(f"best matches: {len(guessing)} guessing flags for {n_units} units")
        if not _ascending_runs(truth.unit_offsets, truth.unit_keys):  # the exact overlaps are merges
            raise ValueError("best matches: a unit's keys are not in ascending order")
        is_target = guessing.copy()
        is_target[units] = True
        is_target[of_key] = True
        postings, holders = _target_postings(truth.key_offsets, truth.key_units, is_target)
        self.offsets, self.units, self.guessing = _read_only(offsets), _read_only(units), _read_only(guessing)
        self.key_offsets, self.key_units = _read_only(by_key), _read_only(of_key)
        self.postings, self.holders = _read_only(postings), _read_only(holders)


def targets_best_slice(
    rec_offsets: np.ndarray,
    rec_keys: np.ndarray,
    truth: MatchSets,
    hidden_key: np.ndarray,
    targets: LinkedTargets,
    at: int,
    end: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`best_slice` of the trajectories at..end-1 where only the ties that hold one of each trajectory's linked
    targets matter (`_targets_best_slice`): the truth's and the targets' codes were checked when they were built,
    the trajectories' keys are checked here."""
    if not isinstance(truth, MatchSets) or not isinstance(targets, LinkedTargets):
        raise TypeError("best matches: the key sets must be kernels.MatchSets and the targets kernels.LinkedTargets")
    n_keys = len(truth.key_offsets) - 1
    if not 0 <= at <= end <= len(rec_offsets) - 1:
        raise ValueError(f"trajectories {at}..{end} outside 0..{len(rec_offsets) - 1}")
    lo, hi = int(rec_offsets[at]), int(rec_offsets[end])
    if lo < 0 or hi > len(rec_keys) or (np.diff(rec_offsets[at : end + 1]) < 0).any():
        raise ValueError("best matches: the trajectories' offsets do not span their keys")
    _within("best matches: recovered keys", rec_keys[lo:hi], n_keys)
    if not _ascending_runs(rec_offsets[at : end + 1] - lo, rec_keys[lo:hi]):
        raise ValueError("best matches: a trajectory's keys are not in ascending order")
    if len(hidden_key) < n_keys:
        raise ValueError("best matches: the hidden keys are not of the same keys")
    if len(targets.offsets) != len(rec_offsets):
        raise ValueError("best matches: the linked targets are not of the same trajectories")
    return _targets_best_slice(
        rec_offsets,
        rec_keys,
        truth.unit_offsets,
        truth.unit_keys,
        truth.key_offsets,
        truth.key_units,
        hidden_key,
        targets.postings,
        targets.holders,
        targets.offsets,
        targets.units,
        targets.key_offsets,
        targets.key_units,
        targets.guessing,
        at,
        end,
        TRAJECTORY_ROUND_KEYS,
        CHECKS,
    )


def regularity_shares(
    guesses: Guesses,
    known_offsets: np.ndarray,
    known_keys: np.ndarray,
    targets: np.ndarray,
    truth: MatchSets,
    at: int,
    end: int,
    full_walk: bool = False,
) -> np.ndarray:
    """Per knowledge set at..end-1 (its keys known_keys[known_offsets[i]:...], all the target's own published keys),
    the regularity attacker's success under the project's rule: the output is the known keys and their guesses;
    0 when no guess is a published key of the target, else 1/t when the target is among the t units (the
    published key sets and postings of `truth`) whose Jaccard with the output ties the best, else 0. What
    `risk.attack.best_matches` finds for the output, without walking every posting of a knowledge set whose
    target a unit among its rarest known key's holders, or among the best ranked by a part of the walk, already
    beats. `full_walk`: every posting of every output walked once the rarest key's holders fail (the former
    kernel, kept as the reference the rounds are compared with)."""
    if not isinstance(truth, MatchSets):  # its codes are checked when it is built, and only then
        raise TypeError(f"regularity: the key sets must be kernels.MatchSets, got {type(truth).__name__}")
    n_keys, n_units = len(truth.key_offsets) - 1, len(truth.unit_offsets) - 1
    if not 0 <= at <= end <= len(known_offsets) - 1 or len(targets) != len(known_offsets) - 1:
        raise ValueError(f"regularity: knowledge sets {at}..{end} of {len(known_offsets) - 1} for {len(targets)} targets")
    if len(known_offsets) == 0 or known_offsets[0] != 0 or known_offsets[-1] != len(known_keys):
        raise ValueError("regularity: the knowledge sets' offsets do not span their keys")
    if (np.diff(known_offsets) < 0).any():
        raise ValueError("regularity: the knowledge sets' offsets decrease")
    _within("regularity: known keys", known_keys, n_keys)
    _within("regularity: targets", targets, n_units)
    if guesses.mode == GUESS_SHIFTS:
        if guesses.shifts.ndim != 2 or guesses.shifts.shape[0] != n_keys:
            raise ValueError(f"regularity: a shift table of {n_keys:,} keys expected, got {guesses.shifts.shape}")
        _within("regularity: shifted keys", guesses.shifts[guesses.shifts >= 0], n_keys)
    else:
        if len(guesses.group) != n_keys or len(guesses.minute) != n_keys or len(guesses.order) != n_keys:
            raise ValueError("regularity: the grouped keys do not cover the key codes")
        _within("regularity: grouped keys", guesses.order, n_keys)
        _within("regularity: groups", guesses.group, len(guesses.starts) - 1)
    args = (
        guesses.mode,
        known_offsets,
        known_keys,
        targets,
        guesses.shifts,
        guesses.order,
        guesses.starts,
        guesses.group,
        guesses.minute,
        truth.unit_offsets,
        truth.unit_keys,
        truth.key_offsets,
        truth.key_units,
        at,
        end,
        PROBE_SHARE,
    )
    if full_walk:
        return _regularity_slice_full_walk(*args)
    return _regularity_slice(*args, ROUND_KEYS, CHECKS)
