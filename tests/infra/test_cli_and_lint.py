"""The real ``cdk synth`` from the command line, offline, and cfn-lint on every template."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.conftest import ENVIRONMENTS, REPO, Synthesized

pytestmark = pytest.mark.infra

CDK = REPO / "node_modules" / ".bin" / "cdk"
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")


def _offline_environment() -> dict[str, str]:
    environ = dict(os.environ)
    environ.update(
        {
            "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
            "CDK_DISABLE_VERSION_CHECK": "1",
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            # Any AWS call would go to a closed port on this host and fail at once: synth needs none.
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    return environ


@pytest.mark.skipif(not CDK.exists(), reason="project-local CDK CLI missing (make setup installs it)")
def test_cdk_synth_from_the_cli_offline(tmp_path: Path) -> None:
    output = tmp_path / "cdk.out"
    result = subprocess.run(
        [str(CDK), "synth", "-c", "env=prod", "--output", str(output), "--quiet", "--no-notices"],
        cwd=REPO,
        env=_offline_environment(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    log = result.stdout + result.stderr
    # The CLI ran app.py, which wrote the assembly, whatever the CLI makes of it afterwards.
    templates = list(output.glob("*.template.json"))
    # The stateful stack and the stateless one that depends on it.
    assert sorted(t.name for t in templates) == [
        "orders-stream-consumer-prod-data.template.json",
        "orders-stream-consumer-prod.template.json",
    ], log
    lint = subprocess.run([CFN_LINT, *map(str, templates)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert result.returncode == 0, log


def test_cfn_lint_passes_on_every_environment(synthesized: dict[str, Synthesized]) -> None:
    paths = [str(path) for env in ENVIRONMENTS for path in synthesized[env].template_paths]
    assert len(paths) == 2 * len(ENVIRONMENTS)
    lint = subprocess.run([CFN_LINT, *paths], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
