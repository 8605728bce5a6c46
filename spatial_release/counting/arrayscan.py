"""The packed scan done in this process: the pings' Parquet row groups read by pyarrow and keyed by numpy.

The packed path (`counting.packed`) needs one integer per ping, computed in the scan that projects the ping
and assigns it to an area. In SQL that scan pays for the expression and as much again to hand three columns
over to Arrow; here the same arithmetic runs over blocks of
64 Ki pings that stay in the CPU's cache, row groups in parallel on the engine's threads, and the keys are
written straight into one array. It computes what the SQL computes (`counting.plan.zoning_sql`,
`counts._bucket_sql`, `Packing.key_sql`), term for term:
- the bucket from the 15-minute slot of the instant (arithmetic for even buckets, else the slot table);
- x, y by the fitted polynomial (`sqlproj.Polynomial`, validated against pyproj in numpy too) or the
  identity for lon/lat zones;
- the cell (compact grid) or the lookup cell's class (zones), and the same unsure test: outside the
  validated area, within the guard band of an edge, outside the compact box, or a boundary lookup cell.
Unsure pings are then assigned exactly on their distinct coordinates, as on every path.

It applies when the pings can be read this way: integer unit ids, microsecond (or coarser) timestamps,
numeric coordinates, no NULLs (the footers' statistics say so), and a zoning whose projection is
the identity or a validated polynomial. Otherwise (`ArrayScan.plan` returns None) the SQL scan runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spatial_release.counting.buckets import SLOT_US, BucketSlots
from spatial_release.counting.plan import ZoningPlan
from spatial_release.geometry.lookup import BOUNDARY
from spatial_release.geometry.sqlproj import Polynomial

BLOCK = 65_536  # pings per numpy block: the block's dozen float arrays stay in the CPU's cache
_US_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}


@dataclass(frozen=True)
class ArrayZoning:
    """One zoning's SQL assignment (`counting.plan.zoning_sql`) in numpy: a slot per ping, 0 in no area,
    area key + 1, or `unsure`."""

    polynomial: Polynomial | None  # None: the identity (x = lon, y = lat)
    area: tuple[float, float, float, float]  # where the projection was validated: outside it, unsure
    guard: float  # CRS units
    x0: float
    y0: float
    size: float  # the grid's cell, or the lookup grid's
    nx: int
    ny: int
    ix0: int = 0  # compact grid: the box's first cell (lookups: 0)
    iy0: int = 0
    classes: np.ndarray | None = None  # lookup: each lookup cell's zone row, BOUNDARY, or -1 for none

    @classmethod
    def of(cls, plan: ZoningPlan) -> ArrayZoning | None:
        p = plan.projection
        if p is None or not (p.polynomial is not None or p.method == "identity"):
            return None
        if plan.lookup is None:
            c = plan.compact
            if c is None or plan.grid_size is None:
                return None
            return cls(p.polynomial, p.area, p.guard, 0.0, 0.0, plan.grid_size, c.nx, c.ny, c.ix0, c.iy0)
        lk = plan.lookup
        classes = np.full(lk.nx * lk.ny, -1, np.int64)
        classes[lk.table["lk"].to_numpy(np.int64)] = lk.table["cls"].to_numpy(np.int64)
        return cls(p.polynomial, p.area, p.guard, lk.x0, lk.y0, lk.cell, lk.nx, lk.ny, classes=classes)

    def slots(self, lon: np.ndarray, lat: np.ndarray, unsure: int, out: np.ndarray, scratch: _Scratch) -> None:
        """Each point's slot into `out` (int64). Tests that a whole block passes (inside the validated area,
        inside the compact box) are made on the block's extremes first, element by element only when not."""
        n = len(lon)
        x, y, u, v, t = (a[:n] for a in (scratch.x, scratch.y, scratch.u, scratch.v, scratch.t))
        flag, test = scratch.flag[:n], scratch.test[:n]
        if self.polynomial is not None:
            self.polynomial.evaluate_into(lon, lat, x, y, u, v, t)
        else:
            x[:], y[:] = lon, lat
        # the position in cells past (x0, y0), its floor, and its fraction (u, v): near an edge, unsure
        for pos, origin, cell in ((x, self.x0, u), (y, self.y0, v)):
            if origin:
                pos -= origin
            pos /= self.size
            np.floor(pos, out=cell)
            np.subtract(pos, cell, out=pos)
        g = self.guard / self.size
        np.less(x, g, out=flag)
        for frac, op, bound in ((x, np.greater, 1 - g), (y, np.less, g), (y, np.greater, 1 - g)):
            op(frac, bound, out=test)
            flag |= test
        w, s, e, n_ = self.area
        if not (w <= lon.min() and lon.max() <= e and s <= lat.min() and lat.max() <= n_):  # NaN: element-wise
            inside = scratch.inside[:n]
            np.greater_equal(lon, w, out=inside)
            for values, within, bound in ((lon, np.less_equal, e), (lat, np.greater_equal, s), (lat, np.less_equal, n_)):
                within(values, bound, out=test)
                inside &= test
            np.invert(inside, out=test)
            flag |= test
        # u, v now hold the cell indices (relative to the lookup grid's origin for zones)
        if self.classes is None:
            if self.ix0:
                u -= self.ix0
            if self.iy0:
                v -= self.iy0
            if not (0 <= u.min() and u.max() <= self.nx - 1 and 0 <= v.min() and v.max() <= self.ny - 1):
                for cells, count in ((u, self.nx), (v, self.ny)):
                    np.less(cells, 0, out=test)
                    flag |= test
                    np.greater(cells, count - 1, out=test)
                    flag |= test
                np.clip(u, 0, self.nx - 1, out=u)
                np.clip(v, 0, self.ny - 1, out=v)
            u *= self.ny
            u += v
            out[:] = u
            out += 1
        else:
            inside = scratch.inside[:n]
            np.greater_equal(u, 0, out=inside)
            np.greater_equal(v, 0, out=test)
            inside &= test
            for cells, count in ((u, self.nx), (v, self.ny)):
                np.less(cells, count, out=test)
                inside &= test
            np.clip(u, 0, self.nx - 1, out=u)
            np.clip(v, 0, self.ny - 1, out=v)
            u *= self.ny
            u += v
            lk = out
            lk[:] = u
            zone = self.classes[lk]
            zone[~inside] = -1
            flag |= zone == BOUNDARY
            np.maximum(zone, -1, out=zone)
            np.add(zone, 1, out=out)  # no zone (-1) is slot 0
        if flag.any():
            out[flag] = unsure


@dataclass
class _Scratch:
    x: np.ndarray
    y: np.ndarray
    u: np.ndarray
    v: np.ndarray
    t: np.ndarray
    flag: np.ndarray
    test: np.ndarray
    inside: np.ndarray

    @classmethod
    def new(cls, n: int | None = None) -> _Scratch:
        n = n or BLOCK
        x, y, u, v, t = (np.empty(n) for _ in range(5))
        return cls(x, y, u, v, t, np.empty(n, bool), np.empty(n, bool), np.empty(n, bool))


@dataclass(frozen=True)
class _Group:
    path: Path
    index: int
    rows: int
    offset: int  # where its keys go


@dataclass(frozen=True)
class Footers:
    """What the pings' Parquet footers say: the unit type and range, the row count, and whether every
    row group has statistics showing no NULL unit, instant or coordinate."""

    unit_type: pa.DataType
    unit_min: int
    unit_max: int
    rows: int
    groups: tuple[_Group, ...]


_COLUMNS = ("unit", "ts", "lon", "lat")


def read_footers(pings: Sequence[Path]) -> Footers | None:
    """The footers' summary, or None when a file lacks a column or a statistic, or holds a NULL, or a type
    this scan does not read (then the SQL scan runs)."""
    unit_type: pa.DataType | None = None
    low, high, offset = math.inf, -math.inf, 0
    groups = []
    try:
        for path in pings:
            file = pq.ParquetFile(path)
            schema = file.schema_arrow
            types = {name: schema.field(name).type for name in _COLUMNS}
            if not (
                pa.types.is_integer(types["unit"])
                and types["unit"] != pa.uint64()
                and pa.types.is_timestamp(types["ts"])
                and types["ts"].unit in _US_PER  # DuckDB has no epoch_us for nanosecond instants with a zone
                and all(pa.types.is_floating(types[c]) or pa.types.is_integer(types[c]) for c in ("lon", "lat"))
            ):
                return None
            if unit_type is not None and types["unit"] != unit_type:
                return None
            unit_type = types["unit"]
            meta = file.metadata
            names = [meta.schema.column(i).path for i in range(meta.num_columns)]
            index = {name: names.index(name) for name in _COLUMNS}
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                if group.num_rows == 0:
                    continue
                for name, i in index.items():
                    stats = group.column(i).statistics
                    if stats is None or not stats.has_null_count or stats.null_count != 0:
                        return None
                    if name == "unit":
                        if not stats.has_min_max:
                            return None
                        low, high = min(low, int(stats.min)), max(high, int(stats.max))
                groups.append(_Group(Path(path), g, group.num_rows, offset))
                offset += group.num_rows
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None
    if unit_type is None or not groups:
        return None
    return Footers(unit_type, int(low), int(high), offset, tuple(groups))


def _instants_us(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Microseconds since the epoch (DuckDB's epoch_us)."""
    factor = _US_PER[column.type.unit]
    values = column.cast(pa.int64()).to_numpy()
    return values * factor if factor != 1 else values


@dataclass
class _Found:
    """One row group's odd rows: positions (in the keys array) and coordinates of the unsure pings and those
    in no area; positions of the pings beyond the usable area; pings outside the period."""

    odd_positions: np.ndarray
    odd_lon: np.ndarray
    odd_lat: np.ndarray
    beyond: np.ndarray
    off_period: int


@dataclass(frozen=True)
class ArrayScan:
    zoning: ArrayZoning
    footers: Footers
    area: tuple[float, float, float, float] | None  # the usable area's box, when the pings must be filtered
    first_slot: int
    slot_bucket: np.ndarray
    even: tuple[int, int] | None
    unit_min: int
    bucket_bits: int
    slot_bits: int

    @classmethod
    def plan(
        cls,
        plan: ZoningPlan,
        footers: Footers | None,
        area: tuple[float, float, float, float] | None,
        slots: BucketSlots,
        unit_min: int,
        bucket_bits: int,
        slot_bits: int,
    ) -> ArrayScan | None:
        zoning = ArrayZoning.of(plan)
        if zoning is None or footers is None:
            return None
        return cls(
            zoning,
            footers,
            area,
            slots.first_slot,
            np.asarray(slots.slot_bucket, np.int64),
            slots.arithmetic(),
            unit_min,
            bucket_bits,
            slot_bits,
        )

    @property
    def unsure(self) -> int:
        return (1 << self.slot_bits) - 1

    def _group(self, group: _Group, keys: np.ndarray) -> _Found:
        table = pq.ParquetFile(group.path).read_row_group(group.index, columns=list(_COLUMNS), use_threads=False)
        unit = np.subtract(table.column("unit").to_numpy(), self.unit_min, dtype=np.int64)  # a new array
        ts = _instants_us(table.column("ts"))
        lon = table.column("lon").to_numpy().astype(np.float64, copy=False)
        lat = table.column("lat").to_numpy().astype(np.float64, copy=False)
        del table
        beyond = np.empty(0, np.int64)
        if self.area is not None:  # the `pings` view's filter (`counting.pings.register_pings`)
            west, south, east, north = self.area
            outside = ~((lon >= west) & (lon <= east) & (lat >= south) & (lat <= north))
            if outside.any():
                beyond = np.flatnonzero(outside) + group.offset
        # the bucket: the 15-minute slot, then arithmetic or the slot table; -1 outside the period
        slot = ts // SLOT_US
        slot -= self.first_slot
        in_period = (slot >= 0) & (slot < len(self.slot_bucket))
        if len(beyond):
            in_period |= outside
        off_period = int(len(slot) - np.count_nonzero(in_period))
        np.clip(slot, 0, len(self.slot_bucket) - 1, out=slot)
        if self.even is not None:
            offset, per = self.even
            if offset:
                slot += offset
            bucket = slot // per
        else:
            bucket = self.slot_bucket[slot]
        del slot
        out = keys[group.offset : group.offset + group.rows]
        scratch = _Scratch.new()
        for start in range(0, group.rows, BLOCK):
            end = min(group.rows, start + BLOCK)
            self.zoning.slots(lon[start:end], lat[start:end], self.unsure, out[start:end], scratch)
        odd = np.flatnonzero((out == 0) | (out == self.unsure))
        if len(beyond):
            odd = np.setdiff1d(odd, beyond - group.offset, assume_unique=True)
        # the packed key: ((unit - unit_min) << bucket_bits | bucket) << slot_bits | slot
        unit <<= self.bucket_bits
        unit |= bucket
        unit <<= self.slot_bits
        out |= unit
        return _Found(odd + group.offset, lon[odd], lat[odd], beyond, off_period)

    def run(self, threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """(keys, odd positions, their lon, their lat, positions beyond the usable area, pings outside the
        period), the keys one per row of the files in order."""
        keys = np.empty(self.footers.rows, np.int64)
        with ThreadPoolExecutor(max(1, threads)) as pool:
            found = list(pool.map(lambda g: self._group(g, keys), self.footers.groups))
        return (
            keys,
            np.concatenate([f.odd_positions for f in found]),
            np.concatenate([f.odd_lon for f in found]),
            np.concatenate([f.odd_lat for f in found]),
            np.concatenate([f.beyond for f in found]),
            sum(f.off_period for f in found),
        )


__all__ = ["ArrayScan", "ArrayZoning", "Footers", "read_footers"]
