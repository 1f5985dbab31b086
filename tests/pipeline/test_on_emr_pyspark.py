"""The pipeline's tests marked ``emr`` pass on EMR's PySpark too (3.5, in ``.venv-spark35``).

EMR Serverless runs the jobs on its release's Spark (infra/pipeline_resources.py), not on the
PySpark the workers' virtualenv pins. ``make setup`` builds the second virtualenv; this test runs
those tests there as one pytest process, so ``make test`` schedules them beside the others on its
pytest-xdist workers instead of after them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPARK35 = REPO / ".venv-spark35" / "bin" / "python"
EMR_PYSPARK = "3.5."

pytestmark = pytest.mark.spark


def test_the_emr_marked_pipeline_tests_pass_on_emrs_pyspark(tmp_path: Path) -> None:
    assert SPARK35.exists(), f"{SPARK35} is missing: `make setup` builds it (EMR's PySpark 3.5)"
    version = subprocess.run(
        [str(SPARK35), "-c", "import pyspark; print(pyspark.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version.startswith(EMR_PYSPARK), f"{SPARK35} has PySpark {version}, not EMR's {EMR_PYSPARK}x"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    result = subprocess.run(
        [str(SPARK35), "-m", "pytest", "-m", "emr", "-q", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path / 'run'}", "tests/pipeline"],
        capture_output=True, text=True, cwd=REPO, env=environ, timeout=600, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    summary = output.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, output[-6000:]
