"""Cell assignment agrees with pyproj and shapely, including points within centimetres of cell edges."""

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyproj import Transformer
from shapely import LineString, Point, Polygon, box, unary_union
from support.paths import SHARED_DATA, requires_shared

from spatial_release.geometry import Grid, ZoneLayer
from spatial_release.policy import GridGeometry, ZonesGeometry

SPEC = GridGeometry(kind="grid", crs="EPSG:32618", size_m=250, parents_m=[1000, 4000])
TO_UTM = Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True)
TO_LONLAT = Transformer.from_crs("EPSG:32618", "EPSG:4326", always_xy=True)


def test_points_near_cell_edges_agree_with_pyproj_and_shapely():
    rng = np.random.default_rng(3)
    # edges of 250 m cells, offset by +-2 cm, so a wrong rounding or an approximate projection would show
    ex = 580_000 + 250 * rng.integers(0, 40, 2000)
    ey = 4_508_000 + 250 * rng.integers(0, 40, 2000)
    offsets = rng.choice([-0.02, 0.02], size=(2, 2000))
    x, y = ex + offsets[0], ey + offsets[1]
    lon, lat = TO_LONLAT.transform(x, y)
    grid = Grid(SPEC)
    ids = grid.locate(lon, lat)
    # the reference: pyproj forward transform, then shapely containment in the named cell's square
    px, py = TO_UTM.transform(lon, lat)
    cells = grid.geometries(pd.Series(ids))
    assert all(cell.contains(Point(a, b)) for cell, a, b in zip(cells, px, py))
    expected_ix = np.floor(px / 250).astype(int)
    assert all(i.startswith(f"250mE{e * 250}N") for i, e in zip(ids, expected_ix))
    # and the points sit on the side of the edge the offset put them on
    assert (np.floor(x / 250) == expected_ix).all()


@pytest.mark.slow
@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=1, max_size=30))
def test_parent_is_exact_union_of_children(indices):
    grid = Grid(SPEC)
    ids = pd.Series([f"250mE{ix * 250}N{iy * 250}" for ix, iy in indices]).drop_duplicates().reset_index(drop=True)
    hierarchy = grid.hierarchy(ids)
    geometries = grid.geometries(ids)
    for level, size in zip(SPEC.level_names(), SPEC.parents_m):
        for parent, group in hierarchy.groupby(level):
            east, north = (int(v) for v in parent.removeprefix(f"{size}m").removeprefix("E").split("N"))
            parent_box = box(east, north, east + size, north + size)
            for child in geometries[group.index]:
                assert parent_box.contains(child)


def test_all_children_tile_the_parent():
    grid = Grid(SPEC)
    ids = pd.Series([f"250mE{-1000 + 250 * i}N{-1000 + 250 * j}" for i in range(4) for j in range(4)])
    hierarchy = grid.hierarchy(ids)
    assert hierarchy["grid_1000m"].nunique() == 1  # negative indices divide by floor, not truncation
    assert unary_union(list(grid.geometries(ids))).equals(box(-1000, -1000, 0, 0))


def test_geographic_crs_is_refused():
    with pytest.raises(ValueError, match="not a projected CRS"):
        Grid(GridGeometry(kind="grid", crs="EPSG:4326", size_m=250))


@requires_shared
def test_zone_assignment_agrees_with_geopandas_sjoin():
    path = SHARED_DATA / "jersey-city/jc-wards.geojson"
    layer = ZoneLayer(ZonesGeometry(kind="zones", path=str(path), id="ward"), path)
    wards = gpd.read_file(path)
    rng = np.random.default_rng(5)
    minx, miny, maxx, maxy = wards.total_bounds
    lon, lat = rng.uniform(minx, maxx, 5000), rng.uniform(miny, maxy, 5000)
    # add points exactly on ward boundary vertices: they touch two wards and go to the smaller id
    vertices = (
        np.array(wards.geometry.iloc[0].exterior.coords)[:50]
        if wards.geometry.iloc[0].geom_type == "Polygon"
        else np.array(wards.geometry.iloc[0].geoms[0].exterior.coords)[:50]
    )
    lon, lat = np.concatenate([lon, vertices[:, 0]]), np.concatenate([lat, vertices[:, 1]])
    ours = layer.locate(lon, lat)
    points = gpd.GeoDataFrame(geometry=gpd.points_from_xy(lon, lat), crs=wards.crs)
    joined = gpd.sjoin(points, wards[["ward", "geometry"]], predicate="intersects", how="left")
    reference = joined.groupby(level=0)["ward"].min().reindex(range(len(lon)))
    assert [o if o is not None else None for o in ours] == [r if isinstance(r, str) else None for r in reference]
    assert (pd.isna(reference)).sum() > 0  # some points fall outside every ward and are reported as such


@pytest.mark.slow
def test_fitted_projection_is_used_only_where_it_is_exact():
    from spatial_release.geometry.sqlproj import GUARD_M, fitted_projection

    city = fitted_projection("EPSG:32618", (-74.2, 40.6, -73.9, 40.85))
    assert city is not None and city.method.startswith("local polynomial")
    assert city.max_error <= GUARD_M / 10
    assert fitted_projection("EPSG:32618", (-78.0, 0.0, -72.0, 84.0)) is None  # a whole UTM zone: formula instead


def test_compact_grid_keys_round_trip_and_refuse_points_outside_their_box():
    from spatial_release.counting.plan import CompactGrid

    grid = Grid(SPEC)
    box_ = CompactGrid.around(grid, (-74.1, 40.7, -74.0, 40.75))
    assert box_ is not None  # a small box: its keys fit
    lon, lat = np.array([-74.05, -74.0999]), np.array([40.72, 40.7001])
    ix, iy = grid.indices(lon, lat)
    assert [tuple(a) for a in zip(*box_.decode(box_.encode(ix, iy)))] == list(zip(ix, iy))
    with pytest.raises(ValueError, match="outside the extent"):
        box_.encode(*grid.indices(np.array([-73.5]), np.array([40.72])))


def test_cell_squares_follow_each_row_and_index_when_ids_repeat():
    """Grid.geometries parses each distinct id once: every row still gets its own id's square, under the
    series' own index, and an id that names no grid cell is refused."""
    grid = Grid(SPEC)
    ids = pd.Series(["250mE500N-250", "250mE0N0", "250mE500N-250", "250mE0N0", "250mE250N0"], index=[9, 3, 7, 1, 5])
    squares = grid.geometries(ids)
    assert list(squares.index) == [9, 3, 7, 1, 5]
    for cell_id, square in zip(ids, squares):
        east, north = (int(v) for v in cell_id.removeprefix("250mE").split("N"))
        assert square.equals(box(east, north, east + 250, north + 250))
    with pytest.raises(ValueError):
        grid.geometries(pd.Series(["250mE0N0", "not a cell"]))


def _zones_file(tmp_path, geometries, ids=None):
    ids = ids or [f"z{i}" for i in range(len(geometries))]
    path = tmp_path / "zones.geojson"
    gpd.GeoDataFrame({"zone": ids}, geometry=geometries, crs="EPSG:32618").to_file(path, driver="GeoJSON")
    return path


@pytest.mark.parametrize(
    "bad, what",
    [
        (Polygon([(0, 0), (1000, 0), (2000, 0)]), "not a valid polygon"),  # zero area: along a line
        (LineString([(0, 0), (1000, 1000)]), "not a polygon"),
        (Point(500, 500), "not a polygon"),
        (Polygon([(0, 0), (1000, 1000), (1000, 0), (0, 1000)]), "not a valid polygon"),  # a bow tie
        (None, "missing or empty"),
    ],
)
def test_a_zone_that_is_not_an_area_is_refused_naming_the_file_and_zone(tmp_path, bad, what):
    path = _zones_file(tmp_path, [box(5000, 0, 6000, 1000), bad], ["good", "bad"])
    with pytest.raises(ValueError, match=what) as caught:
        ZoneLayer(ZonesGeometry(kind="zones", path=str(path), id="zone"), path)
    assert str(path) in str(caught.value) and "'bad'" in str(caught.value)


def test_overlapping_zones_are_refused_and_boundary_slivers_are_not(tmp_path):
    overlapping = _zones_file(tmp_path, [box(0, 0, 1000, 1000), box(900, 0, 1900, 1000)])  # 10 % of each
    with pytest.raises(ValueError, match=r"'z0' and 'z1' overlap by 10\.0%"):
        ZoneLayer(ZonesGeometry(kind="zones", path=str(overlapping), id="zone"), overlapping)
    sliver = _zones_file(tmp_path, [box(0, 0, 1000, 1000), box(999, 0, 1999, 1000)])  # 0.1 %, as digitised edges
    layer = ZoneLayer(ZonesGeometry(kind="zones", path=str(sliver), id="zone"), sliver)
    to_lonlat = Transformer.from_crs("EPSG:32618", "EPSG:4326", always_xy=True)
    lon, lat = to_lonlat.transform([999.5, 500.0, 1500.0], [500.0, 500.0, 500.0])
    assert layer.locate(np.array(lon), np.array(lat)).tolist() == ["z0", "z0", "z1"]  # the sliver: smallest id


@pytest.mark.slow
@requires_shared
def test_the_real_zone_files_pass_the_shape_checks():
    for name, column in (("jc-wards.geojson", "ward"), ("hudson-blocks-geo.geojson", "GEOID")):
        path = SHARED_DATA / "jersey-city" / name
        assert len(ZoneLayer(ZonesGeometry(kind="zones", path=str(path), id=column), path).frame) > 0
