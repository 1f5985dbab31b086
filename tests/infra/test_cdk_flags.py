"""cdk.json sets every CDK feature flag whose unset behaviour differs from its recommended value, so
the CDK CLI has no "N feature flags are not configured" line to add to a synth. Each is set to the
behaviour it has unset (the templates stay as they are): adopting a recommended value is a change to
review on its own, with its diff."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.application import build_app
from tests.infra.conftest import REPO, deployable_config

pytestmark = pytest.mark.infra
# Flags the CDK CLI itself leaves out of its count.
OBSOLETE = {
    "@aws-cdk/core:enableStackNameDuplicates",
    "@aws-cdk/aws-s3:grantWriteWithoutAcl",
    "@aws-cdk/aws-kms:defaultKeyPolicies",
}


def test_every_flag_the_cli_would_count_as_unconfigured_is_set(tmp_path: Path) -> None:
    app, _ = build_app("dev", config_dir=deployable_config(tmp_path), outdir=tmp_path / "out")
    assembly = app.synth()
    manifest = json.loads((Path(assembly.directory) / "manifest.json").read_text())
    flags = manifest["artifacts"]["aws-cdk-lib/feature-flag-report"]["properties"]["flags"]
    context = json.loads((REPO / "cdk.json").read_text())["context"]

    def unset_behaviour(flag: dict[str, object]) -> object:
        behaves = flag.get("unconfiguredBehavesLike") or {}
        return behaves.get("v2", False) if isinstance(behaves, dict) else False

    unconfigured = [
        name
        for name, flag in flags.items()
        if name not in OBSOLETE
        and name not in context
        and str(unset_behaviour(flag)) != str(flag.get("recommendedValue"))
    ]
    assert unconfigured == []
    assert len(flags) > 50  # the report was read: aws-cdk-lib lists every flag it knows
