import subprocess
import sys

DOMAIN = ["spatial_release.policy", "spatial_release.period", "spatial_release.traces.ingest",
          "spatial_release.traces.synthetic", "spatial_release.geometry", "spatial_release.counting",
          "spatial_release.suppression", "spatial_release.guarantees", "spatial_release.release",
          "spatial_release.stages", "spatial_release.risk", "spatial_release.ledger", "spatial_release.alerts",
          "spatial_release.suppression.release_system", "spatial_release.suppression.rules", "spatial_release.levels",
          "spatial_release.suppression.verdicts", "spatial_release.report"]


def test_domain_packages_do_not_import_dagster():
    code = "import sys\n" + "".join(f"import {m}\n" for m in DOMAIN) + "print('dagster' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def _imported_by(module: str) -> set[str]:
    code = f"import sys\nimport {module}\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def test_the_release_format_is_below_the_report_and_the_pipeline():
    """The arrows run one way: stages -> report -> release. The release format (files, record, publication)
    imports neither the report nor the stages; the report reads the release format, never the stages."""
    below = _imported_by("spatial_release.release")
    assert not {m for m in below if m.startswith(("spatial_release.stages", "spatial_release.report"))}
    assert not {m for m in _imported_by("spatial_release.report") if m.startswith("spatial_release.stages")}
