"""cfn-lint on every environment's templates (the CLI's own synth, offline, is run by
test_documented_commands.py, as the README and docs/deploy.md write it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.conftest import ENVIRONMENTS, Synthesized

pytestmark = pytest.mark.infra

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")


def test_cfn_lint_passes_on_every_environment(synthesized: dict[str, Synthesized]) -> None:
    paths = [str(path) for env in ENVIRONMENTS for path in synthesized[env].template_paths]
    assert len(paths) == 2 * len(ENVIRONMENTS)
    lint = subprocess.run([CFN_LINT, *paths], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
