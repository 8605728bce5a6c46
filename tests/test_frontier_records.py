"""The coarsening frontier and the coarsening proposals, typed: each row reads back from its JSON equal, the
files written while the rows were still dicts (tests/golden/frontier: a climb's manifest and risk.json, a
blocked gate's proposals, a DP release's manifest and release.json, the demo's release.json) read back typed
and write the same bytes, and the public row names no zone and carries no figure of a configuration not
published."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from spatial_release.dp.frontier import DpFrontierRow
from spatial_release.release import PublicDpFrontierRow, PublicFrontierRow, Record, ReleaseRecord
from spatial_release.report.page import frontier_table
from spatial_release.stages.coarsen import Climb, frontier_row, public_frontier
from spatial_release.stages.results import CoarseningProposal, FrontierRow, ProtectionManifest, RiskAssessment

GOLDEN = Path(__file__).parent / "golden" / "frontier"
LADDER = ["1w", "period"]
OVER = {"1000mE581000N4509000": 0.0712345678, "1000mE580000N4508000": 0.0612345678}


def climbed() -> list[FrontierRow]:
    """A climb as the protection loop records it: as counted with two zones over the gate, then one zone at
    the ladder's first rung and the other shown by its parent areas, passing."""
    climb = Climb()
    rows = [frontier_row(climb, LADDER, 22, 35, OVER, 0.05944444)]
    climb.steps.update({"1000mE581000N4509000": 3, "1000mE580000N4508000": 1})
    rows.append(frontier_row(climb, LADDER, 16, 33, {}, 0.05944444))
    return rows


def compared() -> list[DpFrontierRow]:
    """A DP release's own configuration (published) and one compared at its loss."""
    return [
        DpFrontierRow("1w, B=2, C=1", 2, 1, 6, [2.0, 9.5e-07], 3.0, 46, 8.987, 0.75, 0.25, True),
        DpFrontierRow("period, B=1, C=2", 1, 2, 5, [2.0, 8.4e-07], 2.5, 38, 7.489, 1.0, None, False),
    ]


def test_the_frontier_row_is_written_with_the_keys_order_and_rounding_of_the_dict_it_replaced():
    first, second = (row.to_json() for row in climbed())
    assert list(first) == [
        "configuration",
        "zones_coarsened",
        "published_cells",
        "published_margins",
        "zones_over",
        "worst_zone_over",
        "ceiling",
        "passed",
    ]
    assert first["zones_over"] == {"1000mE580000N4508000": 0.061235, "1000mE581000N4509000": 0.071235}
    assert list(first["zones_over"]) == sorted(OVER)  # in zone order
    assert first["worst_zone_over"] == "1000mE581000N4509000" and first["ceiling"] == 0.059444
    assert not first["passed"] and first["configuration"] == "as counted" and first["zones_coarsened"] == {}
    assert list(second["zones_coarsened"]) == sorted(OVER) and second["passed"] and second["worst_zone_over"] is None


def test_each_row_and_proposal_reads_back_from_its_json_equal():
    records: list[Record] = [
        *climbed(),
        *compared(),
        *(public_frontier(climbed(), LADDER) or []),
        *(public_frontier(compared()) or []),
        CoarseningProposal("1w", "block", "1000mE581000N4508000", 0.102, 0.102),
        CoarseningProposal("period", "publish", None, None, None),
    ]
    for record in records:
        again = type(record).from_json(json.loads(json.dumps(record.to_json())))
        assert again == record and again.to_json() == record.to_json(), record
    assert {type(r) for r in records} == {
        FrontierRow,
        DpFrontierRow,
        PublicFrontierRow,
        PublicDpFrontierRow,
        CoarseningProposal,
    }


@pytest.mark.parametrize(
    ("kind", "name", "row"),
    [
        (ProtectionManifest, "manifest.json", FrontierRow),
        (ProtectionManifest, "manifest-dp.json", DpFrontierRow),
        (RiskAssessment, "risk.json", PublicFrontierRow),
        (RiskAssessment, "risk-proposals.json", CoarseningProposal),
        (ReleaseRecord, "release.json", PublicFrontierRow),
        (ReleaseRecord, "release-dp.json", PublicDpFrontierRow),
    ],
)
def test_a_file_written_before_the_rows_were_typed_reads_back_typed_and_writes_the_same_bytes(tmp_path, kind, name, row):
    read = kind.read_from(GOLDEN / name)
    rows: Sequence[object] | None
    if isinstance(read, ProtectionManifest):
        rows = read.summary.frontier
    elif isinstance(read, RiskAssessment) and row is CoarseningProposal:
        rows = read.coarsening
    elif isinstance(read, ReleaseRecord):
        assert read.risk is not None
        rows = read.risk.frontier
    else:
        rows = read.frontier
    assert rows and all(type(r) is row for r in rows)
    read.write_to(tmp_path / name)
    assert (tmp_path / name).read_bytes() == (GOLDEN / name).read_bytes()


def test_the_public_frontier_names_no_zone_and_carries_no_figure_of_a_configuration_not_published():
    rows = climbed()
    public = public_frontier(rows, LADDER)
    assert public is not None
    written = json.dumps([r.to_json() for r in public])
    assert [r.to_json() for r in public] == [
        {"configuration": "as counted", "passed": False, "published": False},
        {"configuration": "1 zone(s) at 1w; 1 zone(s) at parent areas only", "passed": True, "published": True},
    ]
    assert not any(zone in written for zone in OVER)
    assert all(isinstance(v, str | bool) for r in public for v in r.to_json().values())  # no figure at all
    # negative control: the internal rows the public ones come from name the zones and carry their figures
    internal = json.dumps([r.to_json() for r in rows])
    assert all(zone in internal for zone in OVER) and "0.071235" in internal and "22" in internal
    # under DP: what follows from the policy alone, never the share shown or the error
    dp = public_frontier(compared())
    assert dp is not None and all(type(r) is PublicDpFrontierRow for r in dp)
    assert not {"shown", "error_median", "loss"} & {k for r in dp for k in r.to_json()}
    assert {"shown", "error_median", "loss"} <= {k for r in compared() for k in r.to_json()}  # negative control


def test_the_page_and_metadata_table_of_each_frontier():
    assert frontier_table(public_frontier(climbed(), LADDER) or []) == (
        ["configuration tried", "passed the risk gate", "published"],
        [["as counted", "no", ""], ["1 zone(s) at 1w; 1 zone(s) at parent areas only", "yes", "this release"]],
    )
    header, shown = frontier_table(public_frontier(compared()) or [])
    assert header[0] == "configuration at the same loss" and header[-1] == "published"
    assert shown == [
        ["1w, B=2, C=1", "6", "3", "46", "8.987", "this release"],
        ["period, B=1, C=2", "5", "2.5", "38", "7.489", ""],
    ]
