"""Synthesize each environment once per session; every test asserts on the same templates.

CDK synth costs seconds of jsii + node time on a shared 2-core machine, so the fixtures here are
session-scoped and build one cloud assembly per environment in a temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

REPO = Path(__file__).resolve().parents[2]
ENVIRONMENTS = ("local", "dev", "prod")

# The tests' own per-account values: the shipped config/dev.yaml and prod.yaml carry none (a synth
# without them stops, docs/deploy.md#per-account-values). Not AWS's documentation examples, which
# the synth refuses; dev and prod share one account and region on purpose (they must coexist).
FIXTURE_ACCOUNT = "246813579135"
FIXTURE_REGION = "eu-west-1"
FIXTURE_AMI = "ami-04c1f2e0d8b3a6957"
FIXTURE_VALUES: dict[str, dict[str, Any]] = {
    "dev": {"account": FIXTURE_ACCOUNT, "region": FIXTURE_REGION, "fleet.ami_id": FIXTURE_AMI},
    "prod": {
        "account": FIXTURE_ACCOUNT,
        "region": FIXTURE_REGION,
        "fleet.ami_id": FIXTURE_AMI,
        "scaling.alarm_topic_email": "oncall@orders-team.internal",
    },
}


def fixture_variables(env: str) -> dict[str, str]:
    """The fixture values of ``env`` as the CONSUMER_* variables a user could give instead."""
    return {
        "CONSUMER_" + "__".join(part.upper() for part in key.split(".")): str(value)
        for key, value in FIXTURE_VALUES[env].items()
    }


def edit_yaml(path: Path, changes: Mapping[str, Any]) -> None:
    """Set (or, with None, remove) dotted keys of a YAML file."""
    data = yaml.safe_load(path.read_text()) or {}
    for key, value in changes.items():
        *sections, leaf = key.split(".")
        target = data
        for section in sections:
            target = target.setdefault(section, {})
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def deployable_config(directory: Path) -> Path:
    """A copy of config/ in ``directory`` with the fixture's per-account values added."""
    config = directory / "config"
    shutil.copytree(REPO / "config", config)
    for env, values in FIXTURE_VALUES.items():
        edit_yaml(config / f"{env}.yaml", values)
    return config


@dataclass(frozen=True)
class Synthesized:
    """One environment's two stacks: ``raw``/``template`` merge them (resources, outputs), so a test
    reads the environment as a whole; ``stacks`` keeps each template by stack name."""

    settings: Any
    template: Any  # aws_cdk.assertions.Template
    raw: dict[str, Any]
    template_path: Path  # the stateless (fleet) stack's
    template_paths: tuple[Path, ...]
    assembly_dir: Path
    stacks: dict[str, dict[str, Any]]


def merge_templates(templates: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for template in templates:
        for section, value in template.items():
            if isinstance(value, dict):
                target = merged.setdefault(section, {})
                clash = set(target) & set(value) - {"BootstrapVersion", "CheckBootstrapVersion"}
                assert not clash, f"{section}: {clash} in two stacks"
                target.update(value)
            else:
                merged.setdefault(section, value)
    return merged


def synthesize(
    env: str, outdir: Path, config_dir: Path | None = None, source_path: Path = REPO
) -> Synthesized:
    """One environment's cloud assembly in ``outdir``, from ``config_dir`` (default: a copy of
    config/ with the fixture's per-account values) and the repository at ``source_path``."""
    from aws_cdk.assertions import Template

    from infra.application import build_app

    config_dir = config_dir or deployable_config(outdir.with_name(f"{outdir.name}-config"))
    app, stack = build_app(env, config_dir=config_dir, outdir=outdir, source_path=source_path)
    assembly = app.synth()  # runs cdk-nag: an unacknowledged finding raises here
    artifacts = [assembly.get_stack_by_name(name) for name in (stack.data.stack_name, stack.stack_name)]
    raw = merge_templates([artifact.template for artifact in artifacts])
    return Synthesized(
        settings=stack.settings,
        template=Template.from_json(raw),
        raw=raw,
        template_path=Path(assembly.directory) / artifacts[1].template_file,
        template_paths=tuple(Path(assembly.directory) / a.template_file for a in artifacts),
        assembly_dir=Path(assembly.directory),
        stacks={a.stack_name: a.template for a in artifacts},
    )


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Synthesized]]:
    root = tmp_path_factory.mktemp("cdk")
    config = deployable_config(root)
    yield {env: synthesize(env, root / env, config_dir=config) for env in ENVIRONMENTS}


def resolve_join(value: Any) -> str:
    """Flatten an Fn::Join of strings and tokens into text (tokens become <TOKEN>)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(resolve_join(p) for p in parts)
    return "<TOKEN>"


def resources_of(raw: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in raw["Resources"].values() if r["Type"] == kind]


def dashboard_body(raw: dict[str, Any]) -> dict[str, Any]:
    (dashboard,) = resources_of(raw, "AWS::CloudWatch::Dashboard")
    body: dict[str, Any] = json.loads(resolve_join(dashboard["DashboardBody"]))
    return body


def user_data_of(raw: dict[str, Any]) -> str:
    """The launch template's user data as text (tokens become <TOKEN>)."""
    (template,) = resources_of(raw, "AWS::EC2::LaunchTemplate")
    return resolve_join(template["LaunchTemplateData"]["UserData"]["Fn::Base64"])


def boot_plan_of(raw: dict[str, Any]) -> Any:
    """The boot plan the user data hands to deploy/bootstrap.py (a deploy.plan.BootPlan)."""
    from deploy.plan import BootPlan

    user_data = user_data_of(raw)
    start = user_data.index("<<'CONSUMER_EOF'\n") + len("<<'CONSUMER_EOF'\n")
    return BootPlan.from_json(user_data[start : user_data.index("\nCONSUMER_EOF", start)])


def instance_units(raw: dict[str, Any]) -> dict[str, str]:
    """The unit files the bootstrap writes on an instance from that plan (file name -> text)."""
    from deploy.plan import Layout
    from deploy.units import unit_files

    return unit_files(boot_plan_of(raw), Layout())
