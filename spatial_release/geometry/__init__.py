"""Spatial cells: a projected grid or polygon zones, each with parent levels and cell geometries."""

from spatial_release.geometry.grid import Grid
from spatial_release.geometry.locate import Locator, make_locator
from spatial_release.geometry.zones import ZoneLayer

__all__ = ["Grid", "Locator", "ZoneLayer", "make_locator"]
