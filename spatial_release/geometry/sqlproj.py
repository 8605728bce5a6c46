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
from dataclasses import dataclass, replace

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


Layers = tuple[tuple[tuple[str, str], ...], ...]  # each layer: (column, expression over earlier columns)


@dataclass(frozen=True)
class Polynomial:
    """A fitted projection's two polynomials in (u, v) = ((lon - cu) / hu, (lat - cv) / hv), for numpy: the
    same Horner forms, in the same order of operations, as its SQL (`_horner_sql`)."""

    cu: float
    hu: float
    cv: float
    hv: float
    degree: int
    cx: tuple[float, ...]  # coefficients of x, in `_monomials` order
    cy: tuple[float, ...]

    def _horner(self, coefficients: tuple[float, ...], u: np.ndarray, v: np.ndarray, out: np.ndarray, t: np.ndarray) -> None:
        d = self.degree
        terms = dict(zip(((i, j) for i in range(d + 1) for j in range(d + 1 - i)), coefficients))

        def in_v(i: int, dst: np.ndarray) -> None:  # c_i0 + v * (c_i1 + v * (...)), into dst
            dst.fill(terms[(i, d - i)])
            for j in range(d - i - 1, -1, -1):
                dst *= v
                dst += terms[(i, j)]

        in_v(d, out)
        for i in range(d - 1, -1, -1):  # in_v(i) + u * out
            out *= u
            in_v(i, t)
            out += t

    def evaluate_into(
        self, lon: np.ndarray, lat: np.ndarray, x: np.ndarray, y: np.ndarray, u: np.ndarray, v: np.ndarray, t: np.ndarray
    ) -> None:
        """x, y of the points into the arrays given (u, v, t: scratch arrays of the same length)."""
        np.subtract(lon, self.cu, out=u)
        u /= self.hu
        np.subtract(lat, self.cv, out=v)
        v /= self.hv
        self._horner(self.cx, u, v, x, t)
        self._horner(self.cy, u, v, y, t)

    def evaluate(self, lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lon, lat = np.asarray(lon, float), np.asarray(lat, float)
        x, y, u, v, t = (np.empty(len(lon)) for _ in range(5))
        self.evaluate_into(lon, lat, x, y, u, v, t)
        return x, y


@dataclass(frozen=True)
class SqlProjection:
    """The projection as layers of SQL columns computed from `lon` and `lat` (degrees); the last layer
    defines `_x` and `_y`. Layers let each transcendental function be evaluated once per point."""

    crs: CRS
    method: str
    layers: Layers
    guard: float  # in CRS units
    area: tuple[float, float, float, float]  # (west, south, east, north) degrees where it was validated
    max_error: float = math.nan  # largest |SQL - pyproj| over the validation points, CRS units
    # a fitted projection's polynomials for numpy, when numpy's evaluation was validated like the SQL's
    polynomial: Polynomial | None = None

    def inside_validated_sql(self, lon: str = "lon", lat: str = "lat") -> str:
        w, s, e, n = self.area
        return f"({lon} BETWEEN {num(w)} AND {num(e)} AND {lat} BETWEEN {num(s)} AND {num(n)})"

    def relation(self, source: str, carry: list[str], x: str, y: str) -> str:
        """SELECT carry..., x, y FROM source, with source holding lon, lat and the carried columns."""
        keep = ", ".join(dict.fromkeys([*carry, "lon", "lat"]))
        sql = f"SELECT {keep} FROM {source}"
        names: list[str] = []
        for layer in self.layers:
            cols = ", ".join(f"{expr} AS {name}" for name, expr in layer)
            previous = "".join(f", {n}" for n in names)
            sql = f"SELECT {keep}{previous}, {cols} FROM ({sql})"
            names += [name for name, _ in layer]
        return f"SELECT {keep}, _x AS {x}, _y AS {y} FROM ({sql})"


def _params(crs: CRS) -> dict[str, float]:
    operation = crs.coordinate_operation
    if operation is None:
        raise ValueError(f"{crs.name} has no coordinate operation to write as SQL")
    # pyproj's stub types Param.value as str; a numeric parameter (all of these formulas') is a float.
    return {p.name: p.value for p in operation.params}  # type: ignore[misc]


def _ellipsoid(crs: CRS) -> tuple[float, float]:
    """The semi-major axis (metres) and the flattening of `crs`'s ellipsoid."""
    ellipsoid = crs.ellipsoid
    if ellipsoid is None:
        raise ValueError(f"{crs.name} has no ellipsoid to write as SQL")
    return ellipsoid.semi_major_metre, 1 / ellipsoid.inverse_flattening


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


def _chebyshev(c: str, j: int, kind: str) -> str:
    """T_j(c) (kind 'T') or U_j(c) (kind 'U') as a polynomial: cos(2j a) = T_j(cos 2a),
    sin(2j a) = sin 2a * U_{j-1}(cos 2a), and the same for cosh/sinh."""
    t = {
        1: [0, 1],
        2: [-1, 0, 2],
        3: [0, -3, 0, 4],
        4: [1, 0, -8, 0, 8],
        5: [0, 5, 0, -20, 0, 16],
        6: [-1, 0, 18, 0, -48, 0, 32],
    }
    u = {0: [1], 1: [0, 2], 2: [-1, 0, 4], 3: [0, -4, 0, 8], 4: [1, 0, -12, 0, 16], 5: [0, 6, 0, -32, 0, 32]}
    coefficients = (t if kind == "T" else u)[j]
    return "(" + " + ".join(f"{a} * power({c}, {i})" if i else f"{a}" for i, a in enumerate(coefficients) if a) + ")"


def transverse_mercator_layers(crs: CRS) -> Layers:
    p = _params(crs)
    a, f = _ellipsoid(crs)
    n, e = f / (2 - f), math.sqrt(f * (2 - f))
    big_a = a / (1 + n) * (1 + n**2 / 4 + n**4 / 64 + n**6 / 256)
    alpha = _tm_alpha(n)
    k0, lon0 = p["Scale factor at natural origin"], p["Longitude of natural origin"]
    xi0, _ = _tm_xi_eta(p["Latitude of natural origin"] * DEG, 0.0, e, alpha)
    xi = "_xp" + "".join(
        f" + {num(c)} * _s2 * {_chebyshev('_c2', j - 1, 'U')} * {_chebyshev('_ch2', j, 'T')}" for j, c in enumerate(alpha, 1)
    )
    eta = "_ep" + "".join(
        f" + {num(c)} * {_chebyshev('_c2', j, 'T')} * _sh2 * {_chebyshev('_ch2', j - 1, 'U')}"
        for j, c in enumerate(alpha, 1)
    )
    return (
        (("_sphi", f"sin(lat * {num(DEG)})"), ("_lam", f"(lon - {num(lon0)}) * {num(DEG)}")),
        (("_t", f"sinh(atanh(_sphi) - {num(e)} * atanh({num(e)} * _sphi))"), ("_cl", "cos(_lam)"), ("_sl", "sin(_lam)")),
        (("_xp", "atan2(_t, _cl)"), ("_ep", "atanh(_sl / sqrt(1 + _t * _t))")),
        (("_s2", "sin(2 * _xp)"), ("_c2", "cos(2 * _xp)"), ("_sh2", "sinh(2 * _ep)"), ("_ch2", "cosh(2 * _ep)")),
        (
            ("_x", f"{num(p['False easting'])} + {num(k0 * big_a)} * ({eta})"),
            ("_y", f"{num(p['False northing'])} + {num(k0 * big_a)} * (({xi}) - {num(xi0)})"),
        ),
    )


def lambert_azimuthal_layers(crs: CRS) -> Layers:
    p = _params(crs)
    a, f = _ellipsoid(crs)
    e2 = f * (2 - f)
    e = math.sqrt(e2)

    def q(phi: float) -> float:
        s = math.sin(phi)
        return (1 - e2) * (s / (1 - e2 * s * s) - math.log((1 - e * s) / (1 + e * s)) / (2 * e))

    phi0, lon0 = p["Latitude of natural origin"] * DEG, p["Longitude of natural origin"]
    qp = q(math.pi / 2)
    beta0, rq = math.asin(q(phi0) / qp), a * math.sqrt(qp / 2)
    d = a * (math.cos(phi0) / math.sqrt(1 - e2 * math.sin(phi0) ** 2)) / (rq * math.cos(beta0))
    sb0, cb0 = num(math.sin(beta0)), num(math.cos(beta0))
    return (
        (("_s", f"sin(lat * {num(DEG)})"), ("_lam", f"(lon - {num(lon0)}) * {num(DEG)}")),
        (
            (
                "_sb",
                f"{num(1 - e2)} * (_s / (1 - {num(e2)} * _s * _s) - ln((1 - {num(e)} * _s) / (1 + {num(e)} * _s)) "
                f"/ {num(2 * e)}) / {num(qp)}",
            ),
            ("_cl", "cos(_lam)"),
            ("_sl", "sin(_lam)"),
        ),
        (("_cb", "sqrt(1 - _sb * _sb)"),),
        (("_b", f"{num(rq)} * sqrt(2 / (1 + {sb0} * _sb + {cb0} * _cb * _cl))"),),
        (
            ("_x", f"{num(p['False easting'])} + _b * {num(d)} * _cb * _sl"),
            ("_y", f"{num(p['False northing'])} + (_b / {num(d)}) * ({cb0} * _sb - {sb0} * _cb * _cl)"),
        ),
    )


IDENTITY: Layers = ((("_x", "lon"), ("_y", "lat")),)

FORMULAS = {"Transverse Mercator": transverse_mercator_layers, "Lambert Azimuthal Equal Area": lambert_azimuthal_layers}


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
        return SqlProjection(crs, "identity", IDENTITY, GUARD_DEG, _area(crs))
    op = crs.coordinate_operation
    if not crs.is_projected or op is None or op.method_name not in FORMULAS:
        return None
    if any(axis.unit_name != "metre" for axis in crs.axis_info):
        return None
    return SqlProjection(crs, op.method_name, FORMULAS[op.method_name](crs), GUARD_M, _area(crs))


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
        out = con.execute(projection.relation("pts", [], "x", "y")).fetchnumpy()
    finally:
        con.close()
    return np.asarray(out["x"], float), np.asarray(out["y"], float)


def max_error(projection: SqlProjection, x: np.ndarray, y: np.ndarray, lon: np.ndarray, lat: np.ndarray) -> float:
    """Largest |SQL - pyproj| over the points; inf when any value is missing or not finite."""
    ex, ey = Transformer.from_crs("EPSG:4326", projection.crs, always_xy=True).transform(lon, lat)
    return _error_against(x, y, ex, ey)


def _error_against(x: np.ndarray, y: np.ndarray, ex: np.ndarray, ey: np.ndarray) -> float:
    """Largest |x - ex|, |y - ey| where pyproj's ex, ey are finite; inf when x or y is not finite there."""
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
    return replace(projection, max_error=error)


def _monomials(u: np.ndarray, v: np.ndarray, degree: int) -> np.ndarray:
    up, vp = [np.ones_like(u)], [np.ones_like(v)]
    for _ in range(degree):
        up.append(up[-1] * u)
        vp.append(vp[-1] * v)
    return np.stack([up[i] * vp[j] for i in range(degree + 1) for j in range(degree + 1 - i)], axis=1)


def _horner_sql(coefficients: np.ndarray, degree: int) -> str:
    """sum c_ij u^i v^j as nested Horner forms: u-polynomial whose coefficients are v-polynomials."""
    terms = {
        (i, j): c for (i, j), c in zip(((i, j) for i in range(degree + 1) for j in range(degree + 1 - i)), coefficients)
    }

    def in_v(i: int) -> str:
        expr = num(terms[(i, degree - i)])
        for j in range(degree - i - 1, -1, -1):
            expr = f"({num(terms[(i, j)])} + _v * {expr})"
        return expr

    expr = in_v(degree)
    for i in range(degree - 1, -1, -1):
        expr = f"({in_v(i)} + _u * {expr})"
    return expr


def fitted_projection(
    crs: CRS | str,
    extent: tuple[float, float, float, float],
    evaluate=evaluate_duckdb,
    degrees: tuple[int, ...] = (4, 5, 6, 7, 8),
) -> SqlProjection | None:
    """A bivariate polynomial in (lon, lat), fitted to pyproj over `extent` (the data's bounding box), used only
    if it agrees with pyproj to a tenth of the guard band on the validation points: on a city or a region it
    is as exact as the full formula (a few nanometres) for a fraction of its cost, since it needs no
    trigonometry. Returns None when no degree is accurate enough (a continent-sized extent): use the formula."""
    crs = CRS.from_user_input(crs)
    guard = GUARD_DEG if crs.is_geographic else GUARD_M
    w, s, e, n = extent
    if not (np.isfinite([w, s, e, n]).all() and w <= e and s <= n):
        return None
    w, s, e, n = w - 1e-6, s - 1e-6, e + 1e-6, n + 1e-6  # a margin so the extremes are strictly inside
    cu, cv, hu, hv = (w + e) / 2, (s + n) / 2, (e - w) / 2, (n - s) / 2
    samples = _fit_samples(crs, (w, s, e, n))
    if samples is None:
        # the CRS is undefined somewhere in the extent (pings on the far side of the globe, e.g. a file
        # with swapped axes beside a good one): no polynomial can stand for it, use the formula or pyproj
        return None
    check_lon, check_lat, ex, ey = samples.check_lon, samples.check_lat, samples.ex, samples.ey
    for degree in degrees:
        fx, fy, fit_error = _fit(crs, (w, s, e, n), samples, degree)
        if not fit_error <= guard * MAX_ERROR_FRACTION / 2:  # a NaN error is a failed fit too
            continue
        layers: Layers = (
            (("_u", f"(lon - {num(cu)}) / {num(hu)}"), ("_v", f"(lat - {num(cv)}) / {num(hv)}")),
            (("_x", _horner_sql(fx, degree)), ("_y", _horner_sql(fy, degree))),
        )
        projection = SqlProjection(crs, f"local polynomial, degree {degree}", layers, guard, (w, s, e, n))
        sx, sy = evaluate(projection, check_lon, check_lat)
        error = _error_against(sx, sy, ex, ey)  # max_error's, with pyproj's values at hand
        if error <= guard * MAX_ERROR_FRACTION:
            # the same polynomial in numpy (the counting step's local scan), validated the same way
            polynomial = Polynomial(cu, hu, cv, hv, degree, tuple(map(float, fx)), tuple(map(float, fy)))
            trusted = _error_against(*polynomial.evaluate(check_lon, check_lat), ex, ey) <= guard * MAX_ERROR_FRACTION
            return replace(projection, max_error=error, polynomial=polynomial if trusted else None)
    return None


@dataclass(frozen=True)
class _FitSamples:
    """pyproj's values at the fit's Chebyshev nodes (x, y at u, v in [-1, 1]^2) and at the validation points."""

    u: np.ndarray
    v: np.ndarray
    x: np.ndarray
    y: np.ndarray
    check_lon: np.ndarray
    check_lat: np.ndarray
    ex: np.ndarray
    ey: np.ndarray


# The fit depends on the CRS and the extent alone, and a release asks for it once per zoning and engine (the
# counting step, its reruns in the checks, the DP frontier): fitted once per process. Read-only arrays: nothing
# a caller does changes the memo. Validation on the engine is never memoised: it is what makes a fit usable.
_FITS_KEPT = 32
_samples_memo: dict[tuple, _FitSamples | None] = {}
_fit_memo: dict[tuple, tuple[np.ndarray, np.ndarray, float]] = {}
_NOT_KEPT = object()


def _read_only(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


def _fit_samples(crs: CRS, bounds: tuple[float, float, float, float]) -> _FitSamples | None:
    key = (crs.to_wkt(), bounds)
    kept = _samples_memo.get(key, _NOT_KEPT)  # one read: another thread may clear the memo between two
    if kept is not _NOT_KEPT:
        return kept  # type: ignore[return-value]
    w, s, e, n = bounds
    cu, cv, hu, hv = (w + e) / 2, (s + n) / 2, (e - w) / 2, (n - s) / 2
    to_crs = Transformer.from_crs("EPSG:4326", crs, always_xy=True)
    nodes = np.cos(np.pi * (np.arange(64) + 0.5) / 64)  # Chebyshev nodes: near-minimax least squares
    u, v = (a.ravel() for a in np.meshgrid(nodes, nodes))
    x, y = to_crs.transform(cu + hu * u, cv + hv * v)
    check_lon, check_lat = validation_points(bounds)
    ex, ey = to_crs.transform(check_lon, check_lat)
    found = None
    if all(np.isfinite(a).all() for a in (x, y, ex, ey)):
        arrays = tuple(np.asarray(a, dtype=float) for a in (u, v, x, y, check_lon, check_lat, ex, ey))
        _read_only(*arrays)
        found = _FitSamples(*arrays)
    _remember(_samples_memo, key, found, _FITS_KEPT)
    return found  # (the local, not the memo: another thread may clear the memo meanwhile)


def _fit(
    crs: CRS, bounds: tuple[float, float, float, float], samples: _FitSamples, degree: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """The least-squares polynomial of `degree` (x and y coefficients) and its error on the validation points."""
    key = (crs.to_wkt(), bounds, degree)
    fitted = _fit_memo.get(key)
    if fitted is not None:
        return fitted
    w, s, e, n = bounds
    cu, cv, hu, hv = (w + e) / 2, (s + n) / 2, (e - w) / 2, (n - s) / 2
    basis = _monomials(samples.u, samples.v, degree)
    fx, fy = (np.linalg.lstsq(basis, target, rcond=None)[0] for target in (samples.x, samples.y))
    check = _monomials((samples.check_lon - cu) / hu, (samples.check_lat - cv) / hv, degree)
    fit_error = max(np.abs(check @ fx - samples.ex).max(), np.abs(check @ fy - samples.ey).max())
    _read_only(fx, fy)
    found = (fx, fy, float(fit_error))
    _remember(_fit_memo, key, found, _FITS_KEPT * 5)
    return found


def _remember(memo: dict, key: tuple, value: object, kept: int) -> None:
    """Store `value` under `key`, emptying the memo first when it holds `kept` entries (bounded memory)."""
    if len(memo) >= kept:
        memo.clear()
    memo[key] = value
