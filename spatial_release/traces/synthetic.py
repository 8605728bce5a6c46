"""A seeded, deterministic generator of realistic ping traces for demos, tests and benchmarks.

Persons have a home and (most of them) a work anchor; pings cluster at those anchors with GPS noise.
Some devices are bursty (dozens of pings in one place within an hour), a share of persons live in a sparse
periphery, and designated empty areas (a lake, a park) never receive a ping: they are the structural zeros.
Coordinates are drawn in a projected CRS (metres) and written as WGS84 lon/lat, like real traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyproj import Transformer

from spatial_release.fileio import atomic_path
from spatial_release.progress import Progress, ProgressEvent

# Default city: centred on Jersey City / lower Manhattan in UTM zone 18N (EPSG:32618).
CENTRE_XY = (581_000.0, 4_509_000.0)
# Empty areas as (xmin, ymin, xmax, ymax) in the generator's CRS; aligned to 500 m so that whole cells are empty.
EMPTY_AREAS: tuple[tuple[float, float, float, float], ...] = (
    (583_000.0, 4_507_000.0, 584_500.0, 4_508_500.0),  # "the lake", east of the centre
    (577_500.0, 4_511_000.0, 578_500.0, 4_512_000.0),  # "the park", north-west
)
ANCHOR_MARGIN_M = 200.0
NOISE_SIGMA_M = 30.0
NOISE_CLIP_M = 100.0


@dataclass(frozen=True)
class SyntheticConfig:
    persons: int = 3000
    seed: int = 20180101
    start: date = date(2018, 1, 1)
    days: int = 90
    crs: str = "EPSG:32618"
    centre: tuple[float, float] = CENTRE_XY
    core_sigma_m: float = 1500.0
    work_sigma_m: float = 800.0
    periphery_share: float = 0.05
    periphery_radius_m: float = 9000.0
    worker_share: float = 0.7
    active_day_probability: float = 0.85
    bursty_share: float = 0.05
    burst_day_probability: float = 0.3
    empty_areas: Sequence[tuple[float, float, float, float]] = field(default_factory=lambda: EMPTY_AREAS)
    first_person: int = 0  # ids start here, so chunks generated separately never share a person


def _in_empty(x: np.ndarray, y: np.ndarray, areas: Sequence[tuple[float, float, float, float]], margin: float) -> np.ndarray:
    hit = np.zeros(len(x), dtype=bool)
    for xmin, ymin, xmax, ymax in areas:
        hit |= (x >= xmin - margin) & (x < xmax + margin) & (y >= ymin - margin) & (y < ymax + margin)
    return hit


def _draw_outside_empty(rng: np.random.Generator, n: int, draw, cfg: SyntheticConfig) -> tuple[np.ndarray, np.ndarray]:
    """Draw n points with `draw(rng, n)`, redrawing those that fall in (or near) an empty area."""
    x, y = draw(rng, n)
    bad = _in_empty(x, y, cfg.empty_areas, ANCHOR_MARGIN_M)
    while bad.any():
        x[bad], y[bad] = draw(rng, int(bad.sum()))
        bad = _in_empty(x, y, cfg.empty_areas, ANCHOR_MARGIN_M)
    return x, y


def _homes(cfg: SyntheticConfig):
    cx, cy = cfg.centre

    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        periphery = rng.random(n) < cfg.periphery_share
        x = cx + rng.normal(0, cfg.core_sigma_m, n)
        y = cy + rng.normal(0, cfg.core_sigma_m, n)
        radius = rng.uniform(3 * cfg.core_sigma_m, cfg.periphery_radius_m, n)
        angle = rng.uniform(0, 2 * np.pi, n)
        x[periphery] = cx + (radius * np.cos(angle))[periphery]
        y[periphery] = cy + (radius * np.sin(angle))[periphery]
        return x, y

    return draw


def _around(centre: tuple[float, float], sigma: float):
    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return centre[0] + rng.normal(0, sigma, n), centre[1] + rng.normal(0, sigma, n)

    return draw


def _noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.clip(rng.normal(0, NOISE_SIGMA_M, n), -NOISE_CLIP_M, NOISE_CLIP_M)


def generate_pings(cfg: SyntheticConfig = SyntheticConfig()) -> pd.DataFrame:
    """Columns: device_id, imsi (an identifier), age_band (a quasi-identifier), local_time (naive, in the
    city's local time), lon, lat. Deterministic for a given config."""
    rng = np.random.default_rng(cfg.seed)
    n = cfg.persons
    home_x, home_y = _draw_outside_empty(rng, n, _homes(cfg), cfg)
    work_x, work_y = _draw_outside_empty(rng, n, _around(cfg.centre, cfg.work_sigma_m), cfg)
    worker = rng.random(n) < cfg.worker_share
    bursty = rng.random(n) < cfg.bursty_share

    person, day = np.nonzero(rng.random((n, cfg.days)) < cfg.active_day_probability)
    weekday = np.array([(cfg.start + timedelta(days=int(d))).weekday() < 5 for d in range(cfg.days)])[day]

    parts = []
    # night and evening at home: 1 + Poisson(2) pings between 20:00 and 08:00
    k_home = 1 + rng.poisson(2, len(person))
    p, d = np.repeat(person, k_home), np.repeat(day, k_home)
    hour = rng.uniform(-4, 8, len(p)) % 24
    parts.append((p, d, hour, home_x[p], home_y[p]))
    # daytime: at work on weekdays for workers, else at an errand near home
    k_day = rng.poisson(3, len(person))
    p, d, wd = np.repeat(person, k_day), np.repeat(day, k_day), np.repeat(weekday, k_day)
    at_work = worker[p] & wd
    errand_x, errand_y = home_x[p] + rng.normal(0, 1500, len(p)), home_y[p] + rng.normal(0, 1500, len(p))
    # an errand that lands in an empty area happens at home instead, so empty areas stay empty
    bad = _in_empty(errand_x, errand_y, cfg.empty_areas, ANCHOR_MARGIN_M)
    errand_x[bad], errand_y[bad] = home_x[p][bad], home_y[p][bad]
    parts.append(
        (p, d, rng.uniform(9, 18, len(p)), np.where(at_work, work_x[p], errand_x), np.where(at_work, work_y[p], errand_y))
    )
    # bursts: a bursty device on some of its active days pings 20-60 times within one hour at one anchor
    burst_rows = np.flatnonzero(bursty[person] & (rng.random(len(person)) < cfg.burst_day_probability))
    k_burst = rng.integers(20, 61, len(burst_rows))
    p, d = np.repeat(person[burst_rows], k_burst), np.repeat(day[burst_rows], k_burst)
    start_hour = np.repeat(rng.uniform(8, 22, len(burst_rows)), k_burst)
    use_work = np.repeat(rng.random(len(burst_rows)) < 0.5, k_burst) & worker[p]
    parts.append(
        (
            p,
            d,
            start_hour + rng.uniform(0, 1, len(p)),
            np.where(use_work, work_x[p], home_x[p]),
            np.where(use_work, work_y[p], home_y[p]),
        )
    )

    p, d, hour, x, y = (np.concatenate(column) for column in zip(*parts))
    p = p + cfg.first_person
    x, y = x + _noise(rng, len(x)), y + _noise(rng, len(y))
    lon, lat = Transformer.from_crs(cfg.crs, "EPSG:4326", always_xy=True).transform(x, y)
    seconds = np.floor(np.clip(hour, 0, 24 - 1e-6) * 3600).astype("int64")
    local = (np.datetime64(cfg.start) + d.astype("timedelta64[D]")).astype("datetime64[s]") + seconds
    return _pings_frame(p, local, lon, lat)


AGE_BANDS = np.array(["18-24", "25-34", "35-44", "45-54", "55-64", "65+"])
ID_DIGITS = 6  # device ids are "dev-" and the person's number zero-padded to this many digits


def _pings_frame(p: np.ndarray, local: np.ndarray, lon: np.ndarray, lat: np.ndarray) -> pd.DataFrame:
    """The pings in (local_time, device_id) order, as `_pings_frame_by_sorting` gives them. While every person's
    number has ID_DIGITS digits or fewer, the ids' text order is their numbers' order, so the rows are ordered on
    numbers (a stable sort, as pandas' on the text) and each person's texts are made once, not once a ping."""
    if len(p) and (p.min() < 0 or p.max() >= 10**ID_DIGITS):
        return _pings_frame_by_sorting(p, local, lon, lat)
    order = np.lexsort((p, local))  # stable: rows equal on both keys keep their order
    p, local, lon, lat = p[order], local[order], lon[order], lat[order]
    persons, person_of_row = np.unique(p, return_inverse=True)
    device = np.char.add("dev-", np.char.zfill(persons.astype(str), ID_DIGITS))
    imsi = (310_260_000_000_000 + persons * 7919).astype("int64").astype(str)
    return pd.DataFrame(
        {
            "device_id": device[person_of_row],
            "imsi": imsi[person_of_row],
            "age_band": AGE_BANDS[p % 6],
            "local_time": local,  # naive local time: Parquet stores a TIMESTAMP, CSV writes ISO text
            "lon": np.round(lon, 6),
            "lat": np.round(lat, 6),
        }
    )


def _pings_frame_by_sorting(p: np.ndarray, local: np.ndarray, lon: np.ndarray, lat: np.ndarray) -> pd.DataFrame:
    """The pings sorted by pandas on (local_time, device_id) as text: any person number."""
    frame = pd.DataFrame(
        {
            "device_id": np.char.add("dev-", np.char.zfill(p.astype(str), ID_DIGITS)),
            "imsi": (310_260_000_000_000 + p * 7919).astype("int64").astype(str),
            "age_band": AGE_BANDS[p % 6],
            "local_time": local,  # naive local time: Parquet stores a TIMESTAMP, CSV writes ISO text
            "lon": np.round(lon, 6),
            "lat": np.round(lat, 6),
        }
    )
    return frame.sort_values(["local_time", "device_id"], kind="stable").reset_index(drop=True)


def write_pings_in_chunks(
    cfg: SyntheticConfig,
    path: Path,
    pings: int,
    chunk_persons: int = 20_000,
    integer_ids: bool = False,
    progress: Progress | None = None,
) -> int:
    """Stream about `pings` pings (exactly that many: the last chunk is cut) to one Parquet file, generating
    `chunk_persons` persons at a time with their own seeds, so memory stays bounded at any size.
    Columns: device_id (text, or int64 with integer_ids), local_time, lon, lat. Returns the rows written."""
    written, chunk = 0, 0
    schema = pa.schema(
        [
            ("device_id", pa.int64() if integer_ids else pa.string()),
            ("local_time", pa.timestamp("s")),
            ("lon", pa.float64()),
            ("lat", pa.float64()),
        ]
    )
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        while written < pings:
            part = replace(
                cfg, seed=cfg.seed + chunk, persons=chunk_persons, first_person=cfg.first_person + chunk * chunk_persons
            )
            frame = generate_pings(part).head(pings - written)
            ids = frame["device_id"].str.slice(4).astype("int64") if integer_ids else frame["device_id"]
            table = pa.table(
                {
                    "device_id": ids.to_numpy(),
                    "local_time": frame["local_time"].to_numpy(),
                    "lon": frame["lon"].to_numpy(),
                    "lat": frame["lat"].to_numpy(),
                },
                schema=schema,
            )
            writer.write_table(table, row_group_size=1_000_000)
            written += len(frame)
            chunk += 1
            if progress:
                progress(ProgressEvent("generate", f"generated {written:,} of {pings:,} pings", share=written / pings))
    return written


def write_pings(frame: pd.DataFrame, path: Path) -> Path:
    with atomic_path(path) as tmp:
        if path.suffix == ".csv":
            frame.to_csv(tmp, index=False)
        else:
            pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
    return path


def empty_cells(cfg: SyntheticConfig, size_m: int) -> list[str]:
    """Grid cells of `size_m` lying wholly inside an empty area (the public structural-zeros list)."""
    from spatial_release.geometry.grid import cell_name

    ids: list[str] = []
    for xmin, ymin, xmax, ymax in cfg.empty_areas:
        ix = np.arange(int(np.ceil(xmin / size_m)), int(np.floor(xmax / size_m)))
        iy = np.arange(int(np.ceil(ymin / size_m)), int(np.floor(ymax / size_m)))
        gx, gy = np.meshgrid(ix, iy)
        ids += list(cell_name(size_m, gx.ravel(), gy.ravel()))
    return sorted(set(ids))
