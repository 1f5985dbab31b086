"""``make test``'s pytest-xdist groups hold: tests that share an expensive fixture run on one worker.

tests/conftest.py groups them (``xdist_group``) and the Makefile runs ``--dist loadgroup``. A
pytest release once made xdist ignore the marks without a word (pytest-dev/pytest-xdist#1386):
the emulator fleet run and the CDK synth were then built on both workers at once, and the fleet
tests, starved of CPU, stopped seeing the faults they provoke. This runs the same plugins on a
throw-away suite with this repository's conftest and checks where each test ran.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SUITE = """
import pytest

pytestmark = pytest.mark.xdist_group("shared-run")


def test_marked_a():
    pass


def test_marked_b():
    pass


def test_marked_c():
    pass
"""

MODULE_SCOPED = """
import os
import pytest


@pytest.fixture(scope="module")
def built_once():
    return os.environ["PYTEST_XDIST_WORKER"]


def test_one(built_once):
    pass


def test_two(built_once):
    pass


def test_three(built_once):
    pass
"""


def test_marked_tests_and_module_fixture_users_each_run_on_one_worker(tmp_path: Path) -> None:
    suite = tmp_path / "tests"
    suite.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_marked.py").write_text(SUITE)
    (suite / "test_module_scoped.py").write_text(MODULE_SCOPED)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", "/dev/null", str(suite)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    ran = re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED \S+::(test_\w+)", result.stdout)
    assert len(ran) == 6, result.stdout
    workers = {test: worker for worker, test in ran}
    assert len({workers[t] for t in ("test_marked_a", "test_marked_b", "test_marked_c")}) == 1, ran
    assert len({workers[t] for t in ("test_one", "test_two", "test_three")}) == 1, ran
