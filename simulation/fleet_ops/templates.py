"""The deployed environment as its synthesized templates state it: alarms, scaling policies, the
group, the boot plan, the alarm topic and its subscription, the follow schedule, what costs money.

The fleet model reads nothing of infra/'s code for these: it reads what ``cdk synth`` wrote (both
stacks of the environment), so an alarm's expression, threshold, period and missing-data rule, a
policy's adjustment and cooldown, the group's minimum, maximum and lifecycle hook are exactly what
would be deployed. A synth costs some 25 s of jsii and Node, so it runs once in a subprocess (the
jsii runtime stays out of the caller) and the extract is cached under ``var/operations/``, keyed by a
fingerprint of every file that can change a template: config/, cdk.json and every module of this
repository that ``app.py`` imports, directly or not (tests/simulation/test_ops_templates.py checks
that :data:`SOURCES` covers them). The extract keeps the launch template, whose user data names the
product wheel's asset by its hash; the model reads nothing of it, so the rest of the product's code
is left out of the key.

The per-account values a synth requires (docs/deploy.md#per-account-values) are the model's own
(an account, a region, an AMI and an on-call address nobody owns), given as ``CONSUMER_*`` variables
as a user could give them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.plan import BootPlan

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "var" / "operations"
PER_ACCOUNT = {
    "CONSUMER_ACCOUNT": "864213579024",
    "CONSUMER_REGION": "eu-west-1",
    "CONSUMER_FLEET__AMI_ID": "ami-0c5d7e3f9a1b2c4d6",
    "CONSUMER_SCALING__ALARM_TOPIC_EMAIL": "oncall@orders-fleet.internal",
}
# Everything a template is made from (a change re-synthesizes).
SOURCES = (
    "app.py",
    "cdk.json",
    "config",
    "infra",
    "ground",
    "deploy",
    "tools/__init__.py",
    "tools/emr",
    "tools/dashboard",
    "tools/planning",
    "consumer/__init__.py",
    "consumer/api",
    "consumer/lease_keys.py",
    "consumer/leases",
    "consumer/telemetry",
    "pipeline/__init__.py",
    "pipeline/catalog.py",
    "pipeline/errors.py",
    "pipeline/storage.py",
    "simulation/fleet_ops/templates.py",
)
KEPT_TYPES = {
    "AWS::AutoScaling::AutoScalingGroup",
    "AWS::AutoScaling::ScalingPolicy",
    "AWS::CloudWatch::Alarm",
    "AWS::SNS::Topic",
    "AWS::SNS::Subscription",
    "AWS::SNS::TopicPolicy",
    "AWS::KMS::Key",
    "AWS::Scheduler::Schedule",
    "AWS::EMRServerless::Application",
    "AWS::EC2::NatGateway",
    "AWS::EC2::VPCEndpoint",
    "AWS::EC2::LaunchTemplate",
    "AWS::DynamoDB::Table",
    "AWS::ApplicationAutoScaling::ScalableTarget",
    "AWS::ApplicationAutoScaling::ScalingPolicy",
    "Custom::FleetSize",
    "Custom::FleetSizeCarried",
    "AWS::Logs::LogGroup",
    "AWS::S3::Bucket",
    "AWS::CloudWatch::Dashboard",
}


def fingerprint(root: Path = REPO) -> str:
    digest = hashlib.sha256()
    for source in SOURCES:
        path = root / source
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts:
                continue
            digest.update(str(file.relative_to(root)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def _join(value: Any) -> str:
    """An Fn::Join of strings and tokens as text (a token becomes ``<TOKEN>``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(_join(p) for p in parts)
    return "<TOKEN>"


def extract(stacks: Mapping[str, Mapping[str, Any]], data_stack: str) -> dict[str, Any]:
    """The kept resources of both stacks (logical id -> type, properties, policies, stack), the boot
    plan from the launch template's user data."""
    resources: dict[str, Any] = {}
    plan: dict[str, Any] | None = None
    for stack_name, template in stacks.items():
        for logical, resource in template.get("Resources", {}).items():
            if resource["Type"] not in KEPT_TYPES:
                continue
            kept = {
                "Type": resource["Type"],
                "Properties": resource.get("Properties", {}),
                "Stack": "data" if stack_name == data_stack else "fleet",
            }
            for policy in (
                "CreationPolicy",
                "UpdatePolicy",
                "DeletionPolicy",
                "UpdateReplacePolicy",
                "DependsOn",
            ):
                if policy in resource:
                    kept[policy] = resource[policy]
            if resource["Type"] == "AWS::EC2::LaunchTemplate":
                text = _join(kept["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"])
                start = text.index("<<'CONSUMER_EOF'\n") + len("<<'CONSUMER_EOF'\n")
                plan = json.loads(text[start : text.index("\nCONSUMER_EOF", start)])
                kept["Properties"] = {
                    "InstanceType": kept["Properties"]["LaunchTemplateData"]["InstanceType"],
                    "UserDataBytes": len(text),
                }
            resources[logical] = kept
    if plan is None:
        raise ValueError("no launch template with a boot plan in the templates")
    return {"resources": resources, "plan": plan}


def _synthesize(env: str, out: Path) -> None:
    """In a subprocess: build both stacks of ``env`` and write the extract to ``out``."""
    import tempfile

    from infra.application import build_app
    from infra.stack import data_stack_name

    with tempfile.TemporaryDirectory() as outdir:
        app, stack = build_app(env, config_dir=REPO / "config", outdir=outdir, source_path=REPO)
        assembly = app.synth()
        names = (data_stack_name(stack.settings), stack.stack_name)
        stacks = {name: assembly.get_stack_by_name(name).template for name in names}
    out.write_text(json.dumps(extract(stacks, names[0]), sort_keys=True))


@dataclass(frozen=True)
class Templates:
    env: str
    resources: dict[str, dict[str, Any]]
    plan: BootPlan
    fingerprint: str

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.resources.items() if r["Type"] == kind}

    def one(self, kind: str) -> tuple[str, dict[str, Any]]:
        (found,) = self.of_type(kind).items()
        return found


def load(env: str = "prod") -> Templates:
    """The extract of ``env``'s templates, synthesized now when the cache does not hold this code's."""
    key = fingerprint()
    path = CACHE / f"{env}-{key}.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # one synth at a time (pytest workers, bench processes)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            _synthesize_in_subprocess(env, path)
    raw = json.loads(path.read_text())
    return Templates(env, raw["resources"], BootPlan.from_json(json.dumps(raw["plan"])), key)


def _synthesize_in_subprocess(env: str, path: Path) -> None:
    """``cdk synth`` in a subprocess (jsii's Node runtime stays out of this one), extracted to ``path``."""
    partial = path.with_suffix(".partial")
    environ = {**os.environ, **PER_ACCOUNT, "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1"}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), environ.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, "-m", "simulation.fleet_ops.templates", env, str(partial)],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cdk synth of {env} failed:\n{done.stderr[-3000:]}")
    partial.replace(path)


def settings_of(env: str = "prod") -> Any:
    """The environment's settings as the synth read them (the same per-account values)."""
    from ground.settings import load_settings

    return load_settings(env, REPO / "config", environ=PER_ACCOUNT)


if __name__ == "__main__":
    _synthesize(sys.argv[1], Path(sys.argv[2]))
