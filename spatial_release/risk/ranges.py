"""The sampled risk estimate over key sets too large to hold at once: the units in ranges, one range in memory.

Coded, the window's key sets hold about 12 bytes per (unit, key) row, so a window of a billion rows cannot be
held whole (bench/RESULTS.md gives the sizes at 50 M and 500 M pings). Here the coded pairs
are streamed once out of DuckDB into one file pair per range of unit codes (`spill_ranges`, a private
temporary folder), and the estimate (`estimate_key_ranges`) reads one range at a time:

1. every range: its (unit, anchor zone) entries, and how many units hold each key (summed over the ranges);
2. every range: the knowledge sets of its entries, from the seeded uniforms of exactly the rows they have in
   the whole estimate (a PCG64 stream advanced to the row: `_uniforms`), so every set is the one
   `estimator.draw_knowledge` draws over all units at once;
3. every range: for every knowledge set, how many of the range's units hold all its keys, added up. A count
   over all units is the sum of the counts over the ranges, so max(1, sum) is the count the whole key sets
   give (`estimator._anonymity`, which stops early at one unit: the target, who holds its own set).

So the report is the one `estimator.estimate_key_sets` gives on the same key sets, figure for figure (tests
compare them on random key sets cut into ranges of every size). Memory: one range's pairs (12 bytes a row
read while it is coded, 8 after) plus the knowledge sets (4 bytes a key, 8 bytes of count a set).
Time: the counts take what they take over all units (each set meets every range), plus three readings of
every range's file.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spatial_release.arrays import distinct_names
from spatial_release.fileio import scratch_folder
from spatial_release.risk import kernels
from spatial_release.risk.estimator import (
    KeySets,
    RiskParams,
    RiskReport,
    _draw_rows,
    _entries,
    _unit_chunks,
    count_chunks,
    rarest_first,
    zone_report,
)

RANGE_ROWS = 100_000_000  # (unit, key) rows read per range: about 12 bytes a row while a range is coded
RANGE_SETS = 65_536  # knowledge sets per counting task in a range


@dataclass
class KeyRanges:
    """Coded key sets as ranges of unit codes on disk: range i holds the units bounds[i]..bounds[i + 1] - 1,
    as int32 (unit - bounds[i], key) rows in two files, repeats allowed (`kernels.unit_major` drops them)."""

    key_zone: np.ndarray
    bounds: np.ndarray
    folder: tempfile.TemporaryDirectory
    rows: list[int] = field(default_factory=list)

    @property
    def units(self) -> int:
        return int(self.bounds[-1])

    @property
    def keys(self) -> int:
        return len(self.key_zone)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def _files(self, i: int) -> tuple[Path, Path]:
        root = Path(self.folder.name)
        return root / f"units-{i}.int32", root / f"keys-{i}.int32"

    def load(self, i: int, by_key: bool = True) -> KeySets:
        """Range i as KeySets over its own units (codes 0..its size - 1) and every key; `by_key` False leaves
        the key-major arrays empty (drawing reads the unit-major ones only)."""
        units_file, keys_file = self._files(i)
        units = np.fromfile(units_file, dtype=np.int32)
        keys = np.fromfile(keys_file, dtype=np.int32)
        if len(units) != self.rows[i] or len(keys) != self.rows[i]:
            raise RuntimeError(f"range {i} of the key sets: {len(units):,} rows on disk, {self.rows[i]:,} written")
        n_units = int(self.bounds[i + 1] - self.bounds[i])
        unit_offsets, unit_keys = kernels.unit_major(units, keys, n_units, self.keys)
        del units, keys
        unit_keys = unit_keys.copy()  # the distinct pairs only (unit_major's view holds every row read)
        if not by_key:
            return KeySets(self.key_zone, unit_offsets, unit_keys, np.zeros(self.keys + 1, np.int64), unit_keys[:0])
        key_offsets, key_units = kernels.key_major(unit_offsets, unit_keys, self.keys, np.int32)
        return KeySets(self.key_zone, unit_offsets, unit_keys, key_offsets, key_units)

    def close(self) -> None:
        self.folder.cleanup()


def range_bounds(n_units: int, rows: int, range_rows: int | None = None) -> np.ndarray:
    """Unit codes where each range starts, and n_units at the end: ranges of equally many units, as many as
    keep about `range_rows` rows in each (units hold similar numbers of keys in aggregate)."""
    per_range = RANGE_ROWS if range_rows is None else range_rows
    count = max(1, min(n_units, -(-rows // max(1, per_range))))
    return np.linspace(0, n_units, count + 1).round().astype(np.int64)


def spill_ranges(
    batches: Iterator[tuple[np.ndarray, np.ndarray]], key_zone: np.ndarray, bounds: np.ndarray, scratch: Path | None = None
) -> KeyRanges:
    """Write the coded (unit, key) batches into one file pair per range of `bounds`, in a private scratch
    folder (owner-only: the rows are per-unit data) in `scratch` (see `fileio.scratch_folder`), deleted by
    `KeyRanges.close`."""
    ranges = KeyRanges(key_zone, bounds, scratch_folder(scratch, "risk-ranges"), [0] * (len(bounds) - 1))
    try:
        with ExitStack() as files:
            handles = [
                (files.enter_context(open(u, "wb")), files.enter_context(open(k, "wb")))
                for u, k in (ranges._files(i) for i in range(len(ranges)))
            ]
            for units, keys in batches:
                if len(units) and (int(units.min()) < 0 or int(units.max()) >= ranges.units):
                    raise ValueError(f"key sets' units: codes outside 0..{ranges.units - 1}")
                which = np.searchsorted(bounds, units, side="right") - 1
                order = np.argsort(which, kind="stable")
                cuts = np.searchsorted(which[order], np.arange(len(ranges) + 1))
                for i in np.flatnonzero(np.diff(cuts)).tolist():
                    rows = order[cuts[i] : cuts[i + 1]]
                    (units[rows] - np.int32(bounds[i])).astype(np.int32).tofile(handles[i][0])
                    keys[rows].astype(np.int32).tofile(handles[i][1])
                    ranges.rows[i] += len(rows)
    except BaseException:
        ranges.close()
        raise
    return ranges


def ranges_of(sets: KeySets, range_rows: int) -> KeyRanges:
    """The KeySets `sets` spilled as ranges of about `range_rows` pairs (tests, and notebooks comparing the
    two estimates)."""
    units = np.repeat(np.arange(sets.units, dtype=np.int32), np.diff(sets.unit_offsets))
    bounds = range_bounds(sets.units, len(units), range_rows)
    return spill_ranges(iter([(units, sets.unit_keys.astype(np.int32))]), sets.key_zone, bounds)


def _uniforms(seed: int, rows: int, j: int, start: int, end: int) -> np.ndarray:
    """U_j[start:end] of `draw_knowledge`, which draws U_0, U_1, ... of `rows` values each from
    default_rng(seed) in turn: one double is one step of its PCG64, so the stream is advanced to the row."""
    generator = np.random.PCG64(seed)
    generator.advance(j * rows + start)
    return np.random.Generator(generator).random(end - start)


def estimate_key_ranges(
    ranges: KeyRanges, params: RiskParams, population: dict[str, float] | None = None, started: float | None = None
) -> RiskReport:
    """`estimator.estimate_key_sets` over the key sets `ranges` hold (the sampled estimate: the exhaustive
    one enumerates small inputs, which never need ranges)."""
    started = time.perf_counter() if started is None else started
    if params.exhaustive:
        raise ValueError("the exhaustive estimate enumerates every set of small key sets: hold them whole")
    zones, zone_of_key = distinct_names(ranges.key_zone)
    entry_zone, sizes = _entries_and_sizes(ranges, zone_of_key, len(zones))
    keysets, width = _knowledge(ranges, zone_of_key, len(zones), len(entry_zone) * params.draws, params)
    counts = np.zeros(len(width), dtype=np.int64)
    chunks = _ordered_chunks(keysets, width, sizes)
    del keysets
    for i in range(len(ranges)):
        count_chunks(ranges.load(i), chunks, counts, exact=True)
    np.maximum(counts, 1, out=counts)  # the target holds its own set: what the whole key sets' early exit gives
    return zone_report(zones, entry_zone, counts, params, population, (ranges.units, ranges.keys), started)


def _entries_and_sizes(ranges: KeyRanges, zone_of_key: np.ndarray, n_zones: int) -> tuple[np.ndarray, np.ndarray]:
    """Pass 1: the anchor zone of every entry (unit then zone order) and how many units hold each key."""
    zones_of_entries = []
    sizes = np.zeros(ranges.keys, dtype=np.int64)
    for i in range(len(ranges)):
        sets = ranges.load(i, by_key=False)
        sizes += np.bincount(sets.unit_keys, minlength=ranges.keys)
        zones_of_entries += [_entries(sets, zone_of_key, n_zones, a, b)[1] for a, b in _unit_chunks(sets)]
    return np.concatenate(zones_of_entries or [np.zeros(0, dtype=np.int64)]), sizes


def _knowledge(
    ranges: KeyRanges, zone_of_key: np.ndarray, n_zones: int, rows: int, params: RiskParams
) -> tuple[np.ndarray, np.ndarray]:
    """Pass 2: every knowledge set (rows x p key codes) and its width, drawn range by range."""
    keysets = np.zeros((rows, params.points), dtype=np.int32)
    width = np.zeros(rows, dtype=np.int8)
    at = 0
    for i in range(len(ranges)):
        sets = ranges.load(i, by_key=False)
        for a, b in _unit_chunks(sets):
            entry_unit, _, anchor_at, anchors, by_zone = _entries(sets, zone_of_key, n_zones, a, b)
            end = at + len(entry_unit) * params.draws
            uniforms = [_uniforms(params.seed, rows, j, at, end) for j in range(max(params.points, 1))]
            keysets[at:end], width[at:end] = _draw_rows(sets, params, entry_unit, anchor_at, anchors, by_zone, uniforms)
            at = end
    if at != rows:
        raise RuntimeError(f"the key sets changed between passes: {at:,} knowledge sets drawn, {rows:,} expected")
    return keysets, width


def _ordered_chunks(keysets: np.ndarray, width: np.ndarray, sizes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The knowledge sets by width, each rarest key first over all units, in tasks of RANGE_SETS sets (int32:
    the kernel's wrapper widens one task at a time)."""
    chunks = []
    for w in np.unique(width).tolist():
        rows = np.flatnonzero(width == w)
        for start in range(0, len(rows), RANGE_SETS):
            part = rows[start : start + RANGE_SETS]
            chunks.append((part, rarest_first(keysets[part, :w], sizes).astype(np.int32)))
    return chunks


def key_ranges_digest(ranges: KeyRanges) -> str:
    """sha256 of the coded key sets the ranges hold (every range's unit-major arrays, in order): equal
    digests, equal sets."""
    digest = hashlib.sha256()
    digest.update(ranges.key_zone.astype(str).tobytes())
    digest.update(np.ascontiguousarray(ranges.bounds).tobytes())
    for i in range(len(ranges)):
        sets = ranges.load(i, by_key=False)
        for array in (sets.unit_offsets, sets.unit_keys):
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()
