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
