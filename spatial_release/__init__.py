"""spatial_release: k-anonymous distinct-unit counts per spatial cell and time bucket."""

__version__ = "0.1.0"
