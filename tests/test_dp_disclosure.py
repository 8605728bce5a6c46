"""Attack: read exact figures of the data off a DP release outside its mechanism. A unit's pings move the input
figures a release states (rows and pings read, quarantined by reason, outside the geometry), so under
`protection.method: dp` none of them may reach release.json, the report, the published release's Dagster
metadata or the command line's summary. The input here is built so that each of its exact figures is a
number no published figure can take (every one above the number of devices), counted by the test itself."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from PIL.PngImagePlugin import PngImageFile
from support.dp import DP, dp_pings, publish_by_stages, settings
from support.fixture import policy_dict, write_policy

from spatial_release import cli, stages
from spatial_release.defs.catalogue import programme_for
from spatial_release.defs.execution import execute_release

pytestmark = pytest.mark.slow

DEVICES = 400
UNPARSEABLE, OUTSIDE_PERIOD, SWAPPED = 1031, 1129, 1213
# the assets and checks whose metadata describes what is published (validated_pings and cell_counts, with
# their input checks, are the operator's view of the input)
PUBLIC_ASSETS = {"protected_table", "risk_assessment", "published_release"}


def hostile_input(folder: Path) -> tuple[Path, dict]:
    """The DP tests' devices, plus rows quarantined for two reasons and pings with their axes swapped (valid,
    outside the geometry), all of the same devices; with the figures an honest ingest must count."""
    rng = np.random.default_rng(5)
    pings = dp_pings(DEVICES)
    devices = pings["device"].to_numpy()

    def of_devices(n: int) -> pd.DataFrame:
        return pings.iloc[rng.integers(len(pings), size=n)].assign(device=rng.choice(devices, n))

    unparseable = of_devices(UNPARSEABLE).assign(when="not a time")
    outside_period = of_devices(OUTSIDE_PERIOD).assign(when="2017-06-14 12:00:00")
    swapped = of_devices(SWAPPED)
    swapped[["lon", "lat"]] = swapped[["lat", "lon"]].to_numpy()
    frame = pd.concat([pings, unparseable, outside_period, swapped], ignore_index=True)
    path = folder / "traces.csv"
    frame.to_csv(path, index=False)
    read = len(pd.read_csv(path))
    truth = {
        "rows_read": read,
        "pings_read": read,
        "pings_rejected": UNPARSEABLE + OUTSIDE_PERIOD,
        "pings_outside_geometry": SWAPPED,
        "unparseable": UNPARSEABLE,
        "outside_period": OUTSIDE_PERIOD,
        "valid_pings": read - UNPARSEABLE - OUTSIDE_PERIOD,
    }
    assert min(truth.values()) > DEVICES  # no published count (at most the devices) can equal one of them
    return path, truth


def policy(folder: Path, traces: Path, name: str, dp: bool) -> Path:
    data = policy_dict(str(traces), name=name)
    data["source"] = {**data["source"], "max_rejected_share": 0.75, "max_outside_share": 0.75}
    data["time"] = {"bucket": "1w", "timezone": "America/New_York"}
    if dp:
        data["protection"] = DP
    else:
        data["risk"] = {**data["risk"], "model": "uniqueness", "per_release_ceiling": 1.0, "cumulative_ceiling": 1.0}
    return write_policy(folder, data, name=f"{name}.yaml")


def integers(text: str) -> set[int]:
    """The standalone integers of a text, written plain or with thousands separators; ISO instants and
    embedded data (a base64 image) first removed, their digits being no figures."""
    text = re.sub(r"data:[^\"')\s]+", " ", text)
    text = re.sub(r"\d{4}-\d\d-\d\d(T[\d:.]+([+-]\d\d:\d\d)?)?", " ", text)
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
    return {int(n) for n in re.findall(r"(?<![\w.])\d+(?![\w.])", text)}


def exact_figures(truth: dict) -> set[int]:
    return {
        truth[k]
        for k in ("rows_read", "pings_read", "pings_rejected", "pings_outside_geometry", "unparseable", "outside_period")
    }


def exact_shares(truth: dict) -> set[float]:
    """The exact input shares, as the checks round them and as 4 significant digits."""
    shares = [truth["pings_rejected"] / truth["pings_read"], truth["pings_outside_geometry"] / truth["valid_pings"]]
    return {round(s, 6) for s in shares} | {float(f"{s:.4g}") for s in shares}


def numbers_and_texts(value: object) -> tuple[set[float], list[str]]:
    """Every number (JSON numbers, integers in strings) and every string (keys included) of a value."""
    if isinstance(value, bool) or value is None:
        return set(), []
    if isinstance(value, (int, float)):
        return {float(value)}, []
    if isinstance(value, str):
        return {float(n) for n in integers(value)}, [value]
    if isinstance(value, dict):
        value = [*map(str, value), *value.values()]
    if type(value) is list or type(value) is tuple:  # a Dagster record (a table schema) is read as its text
        numbers: set[float] = set()
        texts: list[str] = []
        for item in value:
            n, t = numbers_and_texts(item)
            numbers |= n
            texts += t
        return numbers, texts
    return numbers_and_texts(str(value))


def public_surfaces(folder: Path, run, summary: str) -> dict[str, object]:
    """What a DP release shows: its record, its report (page and image text), the published side's Dagster
    metadata and check results, and the command line's summary."""
    with Image.open(folder / "report.png") as image:
        assert isinstance(image, PngImageFile)  # a PNG's text chunks
        png_text = [f"{k} {v}" for k, v in image.text.items()]
    surfaces: dict[str, object] = {
        "release.json": json.loads((folder / "release.json").read_text()),
        "report.html": (folder / "report.html").read_text(),
        "report.png": png_text,
        "summary": summary,
    }
    for event in run.get_asset_materialization_events():
        name = event.asset_key.path[-1]
        if name in PUBLIC_ASSETS:
            metadata = {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}
            surfaces[f"metadata {name}"] = metadata
    for evaluation in run.get_asset_check_evaluations():
        if evaluation.asset_key.path[-1] in PUBLIC_ASSETS:
            metadata = {k: getattr(v, "value", v) for k, v in evaluation.metadata.items()}
            surfaces[f"check {evaluation.check_name}"] = [metadata, evaluation.description or ""]
    return surfaces


def leaks(surfaces: dict[str, object], truth: dict, secrets: set[str]) -> list[tuple[str, str]]:
    figures, shares = exact_figures(truth), exact_shares(truth)
    found = []
    for where, value in surfaces.items():
        numbers, texts = numbers_and_texts(value)
        found += [(where, f"figure {int(n)}") for n in numbers if n in figures]
        found += [(where, f"share {n}") for n in numbers if n in shares]
        found += [(where, f"text {s}") for s in secrets if any(s in t for t in texts)]
    return found


@pytest.fixture(scope="module")
def dp_release(tmp_path_factory):
    root = tmp_path_factory.mktemp("dp-disclosure")
    traces, truth = hostile_input(root)
    run = execute_release(programme_for(policy(root, traces, "dpx", dp=True)), "2018-Q1", settings(root))
    assert run.success, [e.event_specific_data for e in run.candidate.all_events if e.is_failure]
    folder = root / "releases" / "dpx" / "2018-Q1"
    area = stages.WorkArea(root / "work" / "dpx" / "2018-Q1")
    return root, folder, area, run, truth


def test_a_dp_release_shows_no_exact_input_figure_and_the_k_anonymous_one_keeps_its_contract(dp_release, tmp_path):
    root, folder, area, run, truth = dp_release
    # the operator's work area has the input's figures as the test counted them (the ingest saw the input)
    ingest = stages.IngestSummary.read(area.ingest)
    assert (ingest.rows_read, ingest.pings_read, ingest.pings_rejected) == (
        truth["rows_read"],
        truth["pings_read"],
        truth["pings_rejected"],
    )
    assert stages.CountsSummary.read(area.counts).pings_outside_geometry == truth["pings_outside_geometry"]
    # the input's content digest and the rejection reasons' names are facts of the data too
    secrets = {ingest.inputs_sha256 or "", *ingest.rejected_by_reason}
    assert ingest.rejected_by_reason == {"outside_period": OUTSIDE_PERIOD, "unparseable_timestamp": UNPARSEABLE}
    record = stages.ReleaseRecord.read(folder)
    summary = cli._summary(record, stages.read_manifest(area).summary, folder)
    surfaces = public_surfaces(folder, run, summary)
    assert any(k.startswith("metadata published_release") for k in surfaces)
    assert any(k.startswith("check dp_mechanism") for k in surfaces)
    assert leaks(surfaces, truth, secrets) == []
    # the record keeps the inputs block's keys, null, and says why
    inputs = json.loads((folder / "release.json").read_text())["input"]
    assert {k for k, v in inputs.items() if v is not None} == {"withheld"}
    assert "differential privacy" in inputs["withheld"] and {"pings_read", "files_sha256"} <= set(inputs)

    # control: the same input under k-anonymity states its exact figures (its contract unchanged), and the
    # same scan finds them
    kanon = publish_by_stages(policy(tmp_path, Path(str(root / "traces.csv")), "kx", dp=False), "2018-Q1", tmp_path)
    stated = json.loads((kanon / "release.json").read_text())["input"]
    assert "withheld" not in stated
    assert {k: stated[k] for k in ("rows_read", "pings_read", "pings_rejected", "pings_outside_geometry")} == {
        k: truth[k] for k in ("rows_read", "pings_read", "pings_rejected", "pings_outside_geometry")
    }
    assert stated["rejected_by_reason"] == ingest.rejected_by_reason and stated["files"] == 1
    found = leaks({"release.json": json.loads((kanon / "release.json").read_text())}, truth, secrets)
    assert {what for _, what in found} >= {f"figure {truth['pings_read']}", "text unparseable_timestamp"}


def audit(folder: Path, root: Path, policy_file: Path, capsys) -> tuple[int, str]:
    code = cli.main(["audit", str(folder), "--policy", str(policy_file), "--work", str(root / "work")])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_audit_of_a_dp_release_verifies_the_mechanism_and_refuses_an_edited_scale(dp_release, tmp_path, capsys):
    """`spatial-release audit` of a DP release checks what the DP guarantee rests on and says the LP audit does
    not apply; a record whose noise scale was edited (the files' hashes still match) is refused (exit 1)."""
    root, folder, _, _, _ = dp_release
    policy_file = root / "dpx.yaml"
    code, out = audit(folder, root, policy_file, capsys)
    assert code == 0, out
    assert "PASSED" in out and "LP audit does not apply" in out
    for name in ("dp_mechanism", "withheld_absent", "no_identifiers", "input_withheld"):
        assert f"{name} passed" in out
    assert (
        "primaries audited" not in out
        and not (root / "work" / "dpx" / "2018-Q1" / "audit_intervals.internal.parquet").exists()
    )

    def tampered(name: str, edit) -> Path:
        copy = tmp_path / name / "releases" / "dpx" / "2018-Q1"
        shutil.copytree(folder, copy)
        record = json.loads((copy / "release.json").read_text())
        edit(record)
        (copy / "release.json").write_text(json.dumps(record))
        return copy

    halved = tampered("scale", lambda r: r["privacy"].update(scale=r["privacy"]["scale"] / 2))
    code, out = audit(halved, root, policy_file, capsys)
    assert code == 1 and "FAILED" in out and "dp_mechanism FAILED" in out and '"parameter": "scale"' in out, out
    stated = tampered("input", lambda r: r["input"].update(pings_read=4973))
    code, out = audit(stated, root, policy_file, capsys)
    assert code == 1 and "input_withheld FAILED" in out and "pings_read" in out, out
