"""WGS84 lon/lat -> projected x/y as plain SQL arithmetic, checked against pyproj before it is trusted.

Why: projecting in Python (pyproj, ~107 ns per point, one thread) caps counting well below the speed of the
SQL engine, and a pyproj UDF crashed DuckDB 2.0.1 when run on more than one thread. The formulas below are
the textbook ones (Krüger's series to n^6 for Transverse Mercator, as in Karney 2011; the EPSG guidance
note 7-2 formula for ellipsoidal Lambert Azimuthal Equal Area), written with functions that DuckDB and
Spark SQL share, so both engines evaluate the same expression.

Exactness is not assumed, it is arranged:
1. `validated_projection` compares the SQL result with pyproj's transform on a dense grid and random points
   over the CRS's area of use and refuses (returns None) unless the largest difference is below
   `MAX_ERROR_FRACTION` of the guard band.
2. The counting step treats every point within `guard` of a cell (or lookup-cell) edge, and every point
   outside the validated area, as unsure and assigns it with pyproj itself. A point that is not unsure is
   farther from every edge than the SQL error, so floor(x_sql / size) == floor(x_pyproj / size).
Any CRS without a formula here (or whose transform from EPSG:4326 involves a datum shift, which the
validation detects) is projected by pyproj for every distinct coordinate: slower, never wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb
import numpy as np
from pyproj import CRS, Transformer

GUARD_M = 1e-5  # a point this close to an edge (metres) is assigned by pyproj, not by the SQL formula
GUARD_DEG = 1e-10  # the same for geographic CRSs (about 1e-5 m)
MAX_ERROR_FRACTION = 0.1  # the SQL projection must agree with pyproj to a tenth of the guard band
DEG = math.pi / 180.0


def num(value: float) -> str:
    """A double literal both DuckDB and Spark read as DOUBLE (a plain decimal literal is DECIMAL in both)."""
    return f"{float(value):.17e}"


@dataclass(frozen=True)
class SqlProjection:
    """`x_sql`/`y_sql` are expressions over the columns named `lon` and `lat` (degrees)."""

    crs: CRS
    method: str
    x_sql: str
    y_sql: str
    guard: float  # in CRS units
    area: tuple[float, float, float, float]  # (west, south, east, north) degrees where it was validated
    max_error: float = math.nan  # largest |SQL - pyproj| over the validation points, CRS units

    def inside_validated_sql(self, lon: str = "lon", lat: str = "lat") -> str:
        w, s, e, n = self.area
        return f"({lon} BETWEEN {num(w)} AND {num(e)} AND {lat} BETWEEN {num(s)} AND {num(n)})"


def _params(crs: CRS) -> dict[str, float]:
    return {p.name: p.value for p in crs.coordinate_operation.params}


def _tm_alpha(n: float) -> list[float]:
    """Krüger's alpha coefficients to order n^6 (Karney 2011, eq. 35)."""
    return [
        n / 2 - 2 * n**2 / 3 + 5 * n**3 / 16 + 41 * n**4 / 180 - 127 * n**5 / 288 + 7891 * n**6 / 37800,
        13 * n**2 / 48 - 3 * n**3 / 5 + 557 * n**4 / 1440 + 281 * n**5 / 630 - 1983433 * n**6 / 1935360,
        61 * n**3 / 240 - 103 * n**4 / 140 + 15061 * n**5 / 26880 + 167603 * n**6 / 181440,
        49561 * n**4 / 161280 - 179 * n**5 / 168 + 6601661 * n**6 / 7257600,
        34729 * n**5 / 80640 - 3418889 * n**6 / 1995840,
        212378941 * n**6 / 319334400,
    ]


def _tm_xi_eta(phi: float, lam: float, e: float, alpha: list[float]) -> tuple[float, float]:
    t = math.sinh(math.atanh(math.sin(phi)) - e * math.atanh(e * math.sin(phi)))
    xi_p, eta_p = math.atan2(t, math.cos(lam)), math.atanh(math.sin(lam) / math.sqrt(1 + t * t))
    xi = xi_p + sum(a * math.sin(2 * j * xi_p) * math.cosh(2 * j * eta_p) for j, a in enumerate(alpha, 1))
    eta = eta_p + sum(a * math.cos(2 * j * xi_p) * math.sinh(2 * j * eta_p) for j, a in enumerate(alpha, 1))
    return xi, eta


def transverse_mercator_sql(crs: CRS, lon: str = "lon", lat: str = "lat") -> tuple[str, str]:
    p = _params(crs)
    a, f = crs.ellipsoid.semi_major_metre, 1 / crs.ellipsoid.inverse_flattening
    n, e = f / (2 - f), math.sqrt(f * (2 - f))
    big_a = a / (1 + n) * (1 + n**2 / 4 + n**4 / 64 + n**6 / 256)
    alpha = _tm_alpha(n)
    k0, lon0 = p["Scale factor at natural origin"], p["Longitude of natural origin"]
    xi0, _ = _tm_xi_eta(p["Latitude of natural origin"] * DEG, 0.0, e, alpha)
    phi, lam = f"({lat} * {num(DEG)})", f"(({lon} - {num(lon0)}) * {num(DEG)})"
    t = f"sinh(atanh(sin({phi})) - {num(e)} * atanh({num(e)} * sin({phi})))"
    xi_p = f"atan2({t}, cos({lam}))"
    eta_p = f"atanh(sin({lam}) / sqrt(1 + power({t}, 2)))"
    xi = xi_p + "".join(f" + {num(c)} * sin({2 * j} * {xi_p}) * cosh({2 * j} * {eta_p})" for j, c in enumerate(alpha, 1))
    eta = eta_p + "".join(f" + {num(c)} * cos({2 * j} * {xi_p}) * sinh({2 * j} * {eta_p})" for j, c in enumerate(alpha, 1))
    x = f"({num(p['False easting'])} + {num(k0 * big_a)} * ({eta}))"
    y = f"({num(p['False northing'])} + {num(k0 * big_a)} * (({xi}) - {num(xi0)}))"
    return x, y


def lambert_azimuthal_sql(crs: CRS, lon: str = "lon", lat: str = "lat") -> tuple[str, str]:
    p = _params(crs)
    a, f = crs.ellipsoid.semi_major_metre, 1 / crs.ellipsoid.inverse_flattening
    e2 = f * (2 - f)
    e = math.sqrt(e2)

    def q(phi: float) -> float:
        s = math.sin(phi)
        return (1 - e2) * (s / (1 - e2 * s * s) - math.log((1 - e * s) / (1 + e * s)) / (2 * e))

    phi0, lon0 = p["Latitude of natural origin"] * DEG, p["Longitude of natural origin"]
    qp = q(math.pi / 2)
    beta0, rq = math.asin(q(phi0) / qp), a * math.sqrt(qp / 2)
    d = a * (math.cos(phi0) / math.sqrt(1 - e2 * math.sin(phi0) ** 2)) / (rq * math.cos(beta0))
    s, lam = f"sin({lat} * {num(DEG)})", f"(({lon} - {num(lon0)}) * {num(DEG)})"
    q_sql = (f"({num(1 - e2)} * ({s} / (1 - {num(e2)} * power({s}, 2)) "
             f"- ln((1 - {num(e)} * {s}) / (1 + {num(e)} * {s})) / {num(2 * e)}))")
    beta = f"asin({q_sql} / {num(qp)})"
    b = f"({num(rq)} * sqrt(2 / (1 + {num(math.sin(beta0))} * sin({beta}) + {num(math.cos(beta0))} * cos({beta}) * cos({lam}))))"
    x = f"({num(p['False easting'])} + {b} * {num(d)} * cos({beta}) * sin({lam}))"
    y = (f"({num(p['False northing'])} + ({b} / {num(d)}) * ({num(math.cos(beta0))} * sin({beta}) "
         f"- {num(math.sin(beta0))} * cos({beta}) * cos({lam})))")
    return x, y


FORMULAS = {"Transverse Mercator": transverse_mercator_sql, "Lambert Azimuthal Equal Area": lambert_azimuthal_sql}


def _area(crs: CRS) -> tuple[float, float, float, float]:
    area = crs.area_of_use
    if area is None or area.west > area.east:  # unknown, or crossing the antimeridian: not handled here
        return (-180.0, -90.0, 180.0, 90.0)
    return (area.west, area.south, area.east, area.north)


def candidate_projection(crs: CRS) -> SqlProjection | None:
    """The unvalidated SQL projection for `crs`, or None when there is no formula for it."""
    if crs.is_geographic:
        # lon/lat CRSs other than WGS84 itself are accepted only if pyproj's transform is the identity
        # (validation decides); x = lon, y = lat.
        return SqlProjection(crs, "identity", "lon", "lat", GUARD_DEG, _area(crs))
    op = crs.coordinate_operation
    if not crs.is_projected or op is None or op.method_name not in FORMULAS:
        return None
    if any(axis.unit_name != "metre" for axis in crs.axis_info):
        return None
    x, y = FORMULAS[op.method_name](crs)
    return SqlProjection(crs, op.method_name, x, y, GUARD_M, _area(crs))


def validation_points(area: tuple[float, float, float, float], seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """A 201 x 201 grid over the area (edges included) plus 20,000 uniform random points."""
    w, s, e, n = area
    gx, gy = np.meshgrid(np.linspace(w, e, 201), np.linspace(s, n, 201))
    rng = np.random.default_rng(seed)
    lon = np.concatenate([gx.ravel(), rng.uniform(w, e, 20_000)])
    lat = np.concatenate([gy.ravel(), rng.uniform(s, n, 20_000)])
    return lon, lat


def evaluate_duckdb(projection: SqlProjection, lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    con = duckdb.connect()
    try:
        con.register("pts", {"lon": lon, "lat": lat})
        out = con.execute(f"SELECT {projection.x_sql} AS x, {projection.y_sql} AS y FROM pts").fetchnumpy()
    finally:
        con.close()
    return np.asarray(out["x"], float), np.asarray(out["y"], float)


def max_error(projection: SqlProjection, x: np.ndarray, y: np.ndarray, lon: np.ndarray, lat: np.ndarray) -> float:
    """Largest |SQL - pyproj| over the points; inf when any value is missing or not finite."""
    ex, ey = Transformer.from_crs("EPSG:4326", projection.crs, always_xy=True).transform(lon, lat)
    ok = np.isfinite(ex) & np.isfinite(ey)
    if not (np.isfinite(x[ok]).all() and np.isfinite(y[ok]).all()):
        return math.inf
    return float(max(np.max(np.abs(x[ok] - ex[ok]), initial=0.0), np.max(np.abs(y[ok] - ey[ok]), initial=0.0)))


def validated_projection(crs: CRS | str, evaluate=evaluate_duckdb) -> SqlProjection | None:
    """The SQL projection for `crs` if one exists and agrees with pyproj over the CRS's area of use to a
    tenth of the guard band, evaluated by `evaluate` (the engine that will run it); else None."""
    crs = CRS.from_user_input(crs)
    projection = candidate_projection(crs)
    if projection is None:
        return None
    lon, lat = validation_points(projection.area)
    x, y = evaluate(projection, lon, lat)
    error = max_error(projection, x, y, lon, lat)
    if not error <= projection.guard * MAX_ERROR_FRACTION:
        return None
    return SqlProjection(projection.crs, projection.method, projection.x_sql, projection.y_sql, projection.guard,
                         projection.area, error)
