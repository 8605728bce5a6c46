"""The report of a release as a self-contained HTML page (report.html: no server, no external URL, the map
embedded as a data URI) and as markdown for Dagster metadata; `write_report` writes report.png and
report.html beside the release files."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from spatial_release.policy import Policy
from spatial_release.release import PublicDpFrontierRow, PublicFrontier, PublicFrontierRow, ReleaseRecord, RiskRecord
from spatial_release.report.mapping import render_map_png
from spatial_release.report.privacy import error_bars, privacy_pairs
from spatial_release.report.tables import (
    column_schema,
    markdown_table,
    preview_rows,
    readable,
    schema_markdown,
    table_preview,
)
from spatial_release.report.view import ReleaseView, read_release_view

REPORT_PNG = "report.png"
REPORT_HTML = "report.html"
REPORT_FILES = (REPORT_PNG, REPORT_HTML)
TABLES = ("cells.parquet", "margins.parquet")
ABSENT_NOTE = (
    "The map outlines every area of the zoning and fills only the published ones; an area absent from the "
    "release is an outline like any other and is not listed: the report cannot tell an empty area from one "
    "that is not published, and neither can anyone else. Figures are rounded for reading "
    "(4 significant digits); the exact values are in release.json and the Parquet files."
)
MAP_ALT = "map"  # the alt text of the map in markdown (Dagster shows it while the image loads)


@dataclass(frozen=True)
class Line:
    """One labelled figure of the report; `adversary` is set on every risk figure."""

    label: str
    value: str
    adversary: str | None = None


def headline(record: ReleaseRecord, buckets: int) -> list[Line]:
    counts = record.counts
    return [
        Line("dataset", record.dataset),
        Line("period", record.period),
        Line("policy", f"{record.policy.name} v{record.policy.version} (sha256 {record.policy.sha256[:12]}…)"),
        Line("k (inclusive: a count n is published only if n >= k)", readable(record.k)),
        Line("unit", record.unit),
        Line("measure", record.measure),
        Line("buckets", f"{buckets} of {record.bucket} in {record.time['timezone']}"),
        Line("published cell figures (non-zero)", readable(counts.published_cells)),
        Line("structural zeros published (as 0)", readable(counts.structural_zero_cells_published)),
        Line("published margin figures", readable(counts.published_margins)),
        Line("smallest published count", readable(counts.smallest_published_count)),
        # per level and time rung of a ladder (`cell@1w`: cell figures of the week rung)
        *(Line(f"published figures at {level}", readable(n)) for level, n in (counts.published_by_level or {}).items()),
        Line("published at", record.published_at),
    ]


def audit_lines(record: ReleaseRecord) -> list[Line]:
    audit = record.audit
    if audit is None:
        return [Line("audit", "not recorded")]
    return [
        Line("audit verdict", "passed" if audit.passed else "FAILED"),
        Line("criterion", audit.criterion),
        Line("solver", audit.solver),
    ]


def privacy_lines(record: ReleaseRecord) -> list[Line]:
    return [Line(label, value) for label, value in privacy_pairs(record)]


BARS_NOTE = "Error bars: the 95 % interval of the noise around each published count (first figures)"


def _protection(view: ReleaseView, n: int) -> tuple[str, list[Line], pd.DataFrame | None]:
    """The suppression audit, or under differential privacy the mechanism and the error bars that replace it."""
    if not view.record.privacy:
        return "Suppression audit", audit_lines(view.record), None
    return "Differential privacy", privacy_lines(view.record), error_bars(view.cells, view.margins, view.record, n)


def _protection_html(view: ReleaseView, n: int) -> list[str]:
    title, lines, bars = _protection(view, n)
    out = [f"<h2>{_e(title)}</h2>", _lines_table(lines)]
    return out if bars is None else [*out, f"<h3>{_e(BARS_NOTE)}</h3>", _html_table(*preview_rows(bars, len(bars)))]


def _protection_md(view: ReleaseView, n: int) -> list[str]:
    title, lines, bars = _protection(view, n)
    out = [f"#### {title}", _md_lines(lines)]
    return out if bars is None else [*out, f"{BARS_NOTE}:", markdown_table(*preview_rows(bars, len(bars)))]


def risk_lines(view: ReleaseView) -> list[Line]:
    """Every risk figure of the record with the adversary it models, the ceilings (from the policy, when the
    view has it) and both headrooms."""
    risk = view.record.risk
    if risk is None:
        return [Line("risk", "no risk assessment recorded")]
    who = risk.adversary
    lines = [
        Line("gate status", f"{risk.status}: {risk.reason}", who),
        Line(f"release figure ({risk.measure}): worst zone {risk.worst_zone}", readable(risk.release_figure), who),
        Line(f"pooled {risk.measure} (unit-weighted mean over zones; reported, never gated)", readable(risk.pooled), who),
        Line(
            f"cumulative over {len(risk.window_periods)} release(s): {', '.join(risk.window_periods)}",
            readable(risk.cumulative),
            who,
        ),
    ]
    ceilings = view.ceilings
    if ceilings is not None:
        per_release_left = None if risk.release_figure is None else ceilings.per_release - risk.release_figure
        lines += [
            Line("per-release ceiling", readable(ceilings.per_release), who),
            Line("per-release headroom (ceiling - release figure)", readable(per_release_left), who),
            Line("cumulative ceiling", readable(ceilings.cumulative), who),
        ]
    lines += [
        Line("cumulative headroom (ceiling - cumulative)", readable(risk.headroom), who),
        Line("known points of a trace the adversary holds", readable(risk.points), who),
    ]
    if ceilings is None:
        lines.append(Line("ceilings", "in the policy file (not given to this report)", who))
    if risk.upper_bound is not None:
        lines.append(Line(uniqueness_label(risk), readable(risk.upper_bound), who))
    if risk.warning:
        lines.append(Line("WARNING", risk.warning, who))
    return lines


def uniqueness_label(risk: RiskRecord) -> str:
    """The uniqueness figure's label: an upper bound of the gated figure only where it is at least that figure
    (under the attack model membership inference can succeed where no trajectory is unique)."""
    what = f"uniqueness under perfect trajectory recovery, zone {risk.upper_bound_zone} (not gated)"
    if risk.release_figure is not None and risk.upper_bound is not None and risk.upper_bound < risk.release_figure:
        return f"{what}: below the gated figure, so no bound of it here"
    return f"upper bound: {what}"


# What each check of release.json's `checks` guarantees, in a reader's words (a check added later shows by its
# name until it has a sentence here).
GUARANTEES = {
    "k_floor": "every published figure counts at least k units (a listed structural zero: 0)",
    "withheld_absent": "a figure under k is absent from the files: no null, flag or zero stands in for it",
    "suppression_audit": "no figure under k can be narrowed below k, nor past its own value, from the published "
    "ones (the attacker's linear programme)",
    "suppression_budget": "the share of unit counts not published stays within the policy's budget",
    "no_identifiers": "no identifier or quasi-identifier column or value of the input reaches the files",
    "rejected_share": "the share of input rows rejected as malformed stays under the policy's limit",
    "outside_share": "the share of pings outside the geometry stays under the policy's limit",
    "structural_zeros_hold": "each structural zero the policy lists truly held no unit",
    "earlier_work_files": "the work files of earlier releases the risk step read match their ledger entries",
}


def guarantee_rows(record: ReleaseRecord) -> tuple[list[str], list[list[str]]]:
    """Every guarantee (blocking check) the release passed, with its verdict as release.json records it."""
    rows = [[GUARANTEES.get(name, name), verdict] for name, verdict in sorted(record.checks.items())]
    return ["guarantee", "verdict"], rows


def frontier_rows(record: ReleaseRecord) -> tuple[list[str], list[list[str]]]:
    """The configurations protection tried, finest first (release.json risk.frontier); none without a climb."""
    return frontier_table((record.risk.frontier if record.risk is not None else None) or [])


def frontier_table(rows: PublicFrontier) -> tuple[list[str], list[list[str]]]:
    """The public frontier as a table: under k-anonymity the configurations the coarsening tried and whether
    each passed the risk gate; under differential privacy the configurations compared at the policy's loss
    with their noise (what follows from the policy alone)."""
    mark = {True: "this release", False: ""}
    compared = [r for r in rows if isinstance(r, PublicDpFrontierRow)]
    if compared:
        header = ["configuration at the same loss", "l0", "noise scale", "threshold", "95 % noise interval", "published"]
        return header, [
            [r.configuration, str(r.l0), readable(r.scale), str(r.threshold), readable(r.interval95), mark[r.published]]
            for r in compared
        ]
    tried = [r for r in rows if isinstance(r, PublicFrontierRow)]
    shown = [[r.configuration, "yes" if r.passed else "no", mark[r.published]] for r in tried]
    return ["configuration tried", "passed the risk gate", "published"], shown


LEDGER_NOTE = (
    "The ledger entry of this release (its hash) is release.json's ledger_entry: the entry records the hash "
    "of this page, so this page cannot hold the entry's own hash."
)


def ledger_line(record: ReleaseRecord) -> str:
    """Where the release's ledger entry is: its hash once the record holds it (the UI's page)."""
    return f"ledger entry {record.ledger_entry}" if record.ledger_entry else LEDGER_NOTE


ZONE_COLUMNS = ["zone", "targets", "success_without", "success_with", "advantage", "advantage_ucb", "strongest"]
ZONE_COLUMNS += ["classifier", "exposed_share", "uniqueness_bound"]


def risk_zone_rows(view: ReleaseView) -> tuple[list[str], list[list[str]]]:
    """release.json's risk.zones (the advantage gate's table), one row per zone; no rows under other models.
    targets 'all': every unit of the zone was a target (its number is not a published figure)."""
    risk = view.record.risk
    rows = [] if risk is None or not risk.zones else risk.zones
    shown = [
        [
            "all" if c == "targets" and r.get(c) is None else ("-" if r.get(c) is None else str(r.get(c)))
            for c in ZONE_COLUMNS
        ]
        for r in rows
    ]
    return ZONE_COLUMNS, shown


def _png_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# ------------------------------------------------------------------------------------------------ HTML

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;
font-size:.9em}th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #ddd}.note{color:#555;font-size:.9em}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _html_table(columns: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _lines_table(lines: list[Line], with_adversary: bool = False) -> str:
    if with_adversary:
        return _html_table(["figure", "adversary", "value"], [[x.label, x.adversary or "-", x.value] for x in lines])
    return _html_table(["", "value"], [[x.label, x.value] for x in lines])


def _table_section(name: str, path: Path, frame, n: int) -> str:
    schema = column_schema(path)
    return (
        f"<h2>{_e(name)}</h2><h3>Columns</h3>"
        + _html_table(["column", "Arrow type", "description"], [[c["name"], c["type"], c["description"]] for c in schema])
        + f"<h3>First {min(n, len(frame))} of {len(frame):,} rows</h3>"
        + _html_table(*preview_rows(frame, n))
    )


def render_report_html(view: ReleaseView, folder: Path, png: bytes | None = None, n: int = 10) -> str:
    """The report page of the release in `folder` (whose cells.parquet and margins.parquet `view` holds):
    one self-contained HTML document, every string escaped. `png`: the map, rendered here if not given."""
    record = view.record
    png = render_map_png(view) if png is None else png
    title = f"{record.dataset} {record.period}: published release"
    alt = f"map of the published cells and margins of {record.dataset} {record.period}"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="note">{_e(ABSENT_NOTE)}</p>',
        "<h2>Release</h2>",
        _lines_table(headline(record, view.buckets)),
        *_protection_html(view, n),
        "<h2>Re-identification risk</h2>",
        _lines_table(risk_lines(view), with_adversary=True),
        *(
            ["<h3>Per zone: what the release adds</h3>", _html_table(*risk_zone_rows(view))]
            if risk_zone_rows(view)[1]
            else []
        ),
        *(["<h3>Configurations tried</h3>", _html_table(*frontier_rows(record))] if frontier_rows(record)[1] else []),
        "<h2>Guarantees</h2>",
        _html_table(*guarantee_rows(record)),
        "<h2>Ledger</h2>",
        f"<p>{_e(LEDGER_NOTE)}</p>",  # the same page whatever the record: it is rendered before the entry exists
        "<h2>Map</h2>",
        f'<img src="{_png_uri(png)}" alt="{_e(alt)}">',
        _table_section("cells.parquet", folder / "cells.parquet", view.cells, n),
        _table_section("margins.parquet", folder / "margins.parquet", view.margins, n),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


# -------------------------------------------------------------------------------------------- markdown


def _md_lines(lines: list[Line], with_adversary: bool = False) -> str:
    if with_adversary:
        return markdown_table(["figure", "adversary", "value"], [[x.label, x.adversary or "-", x.value] for x in lines])
    return markdown_table(["", "value"], [[x.label, x.value] for x in lines])


def report_markdown(folder: Path, policy: Policy | None = None, n: int = 10) -> str:
    """The report of the release folder `folder` as markdown (for Dagster's MetadataValue.md): the map
    embedded as a data URI (the folder's report.png when it has one, else rendered now), the headline,
    audit and risk tables, and the schema and a preview of both tables. `policy`: the release's own policy
    file, for the ceilings and zone geometries (see `release_view`)."""
    folder = Path(folder)
    view = read_release_view(folder, policy)
    record = view.record
    stored = folder / REPORT_PNG
    png = stored.read_bytes() if stored.is_file() else render_map_png(view)
    sections = [
        f"### {record.dataset} {record.period}: what the public sees",
        ABSENT_NOTE,
        _md_lines(headline(record, view.buckets)),
        *_protection_md(view, n),
        "#### Re-identification risk",
        _md_lines(risk_lines(view), with_adversary=True),
        *(["Per zone, what the release adds:", markdown_table(*risk_zone_rows(view))] if risk_zone_rows(view)[1] else []),
        *(["Configurations tried:", markdown_table(*frontier_rows(record))] if frontier_rows(record)[1] else []),
        "#### Guarantees",
        markdown_table(*guarantee_rows(record)),
        "#### Ledger",
        ledger_line(record),
        map_markdown(png),
    ]
    for name, frame in zip(TABLES, (view.cells, view.margins)):
        sections += [
            f"#### {name}",
            schema_markdown(column_schema(folder / name)),
            f"First {min(n, len(frame))} of {len(frame):,} rows:",
            table_preview(frame, n),
        ]
    return "\n\n".join(sections) + "\n"


def map_markdown(png: bytes) -> str:
    """The map alone as markdown: one image, embedded as a data URI."""
    return f"![{MAP_ALT}]({_png_uri(png)})"


def report_map_markdown(folder: Path, policy: Policy | None = None) -> str:
    """Only the map of the release folder `folder` as markdown (for a Dagster metadata entry of its own, one
    click away and at its natural size, at most `mapping.MAX_WIDTH_PX` wide): the folder's report.png when it
    has one, else rendered now from the published files (`policy`: as for `report_markdown`)."""
    folder = Path(folder)
    stored = folder / REPORT_PNG
    png = stored.read_bytes() if stored.is_file() else render_map_png(read_release_view(folder, policy))
    return map_markdown(png)


def report_png_path(folder: Path) -> Path | None:
    """The map beside a release (`<folder>/report.png`), or None for a release published before reports."""
    path = Path(folder) / REPORT_PNG
    return path if path.is_file() else None


def write_report(folder: Path, record: dict | ReleaseRecord | None = None, policy: Policy | None = None) -> dict[str, Path]:
    """Render report.png and report.html into `folder` from its cells.parquet and margins.parquet and the
    record (`release.json`'s content unless given, e.g. a publication's pending record). Returns the paths
    by file name. Plain writes: call it on a folder nobody reads yet (publication's staging folder)."""
    folder = Path(folder)
    view = read_release_view(folder, policy, record)
    png = render_map_png(view)
    page = render_report_html(view, folder, png)
    (folder / REPORT_PNG).write_bytes(png)
    (folder / REPORT_HTML).write_text(page, encoding="utf-8")
    return {REPORT_PNG: folder / REPORT_PNG, REPORT_HTML: folder / REPORT_HTML}
