"""Whether this machine can run the Spark tests (pyspark and a Java runtime), for every test file that needs it."""

import importlib.util
import os
import shutil

HAVE_SPARK = importlib.util.find_spec("pyspark") is not None and shutil.which("java") is not None
SKIP_REASON = "pyspark (pip install '.[spark]') or java is not installed"


def require_spark_on_ci() -> None:
    """CI installs both (.ci/run): there a missing one is a failure, not a skip."""
    if not HAVE_SPARK and os.environ.get("CI"):
        raise RuntimeError("CI must run the Spark tests: pyspark or java is missing (see .ci/run)")
