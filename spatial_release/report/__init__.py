"""The report of a published release: a map, the tables' schema and previews, the record's headline, for
people who look at a release rather than parse it. Rendered from the published files only (cells.parquet,
margins.parquet, the release record) plus public geometry (grid ids, the policy's zone files), so it shows
exactly what the public sees: the map outlines every area of the zoning and fills the published ones, so an
area absent from the files is an outline like any other, whether it was empty or withheld, and no per-unit
figure is read. Figures are rounded to 4 significant digits; exact values stay in the files.

Publication (`release.publish`, given `write_report` by `stages.publish`) writes `report.png` and
`report.html` into the release folder and hashes them with the other files, so the ledger's cross-check
covers them. For Dagster metadata (no dagster import here):

    from spatial_release import report
    folder = ...  # the release folder, e.g. the published_release asset's output
    md = report.report_markdown(folder, policy)        # -> MetadataValue.md(md): map inline, schema, previews
    img = report.report_map_markdown(folder, policy)   # -> MetadataValue.md(img): the map alone, one image
    png = report.report_png_path(folder)               # -> MetadataValue.path(png) (None before reports existed)
    schema = report.column_schema(folder / "cells.parquet")   # [{name, type, description}], e.g. for a table schema
    view = report.read_release_view(folder, policy)    # the tables, record, bucket count, area geometries, ceilings
    report.table_preview(view.cells, n=10)             # markdown table, figures rounded
    report.render_map_png(view)                        # PNG bytes (deterministic for the same view)
    report.render_report_html(view, folder)            # the self-contained page as text

`policy` is optional everywhere; when given it must be the policy the release was published under (its
sha256 is checked) and adds the zone geometries of zone levels and the per-release and cumulative ceilings
(with both headrooms), and the zone files' every area, which the map outlines. Without it grid levels are
still drawn, zone levels are named but not drawn.
"""

from spatial_release.report.mapping import cell_figures, map_figure, render_map_png
from spatial_release.report.page import (
    REPORT_FILES,
    REPORT_HTML,
    REPORT_PNG,
    guarantee_rows,
    render_report_html,
    report_map_markdown,
    report_markdown,
    report_png_path,
    risk_lines,
    write_report,
)
from spatial_release.report.tables import column_schema, markdown_table, readable, table_preview
from spatial_release.report.view import ReleaseView, ReportError, read_release_view, release_view

__all__ = [
    "REPORT_FILES",
    "REPORT_HTML",
    "REPORT_PNG",
    "ReleaseView",
    "ReportError",
    "cell_figures",
    "column_schema",
    "guarantee_rows",
    "map_figure",
    "markdown_table",
    "read_release_view",
    "readable",
    "release_view",
    "render_map_png",
    "render_report_html",
    "report_map_markdown",
    "report_markdown",
    "report_png_path",
    "risk_lines",
    "table_preview",
    "write_report",
]
