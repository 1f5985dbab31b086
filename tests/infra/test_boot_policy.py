"""Boot that cannot half-work, as the synthesized templates (dev and prod) state it.

* the group's CreationPolicy waits for ``min_instances`` signals, its rolling update for each new
  instance's signal (WaitOnResourceSignals), with the same timeout;
* the instance role may signal this stack only, and set the health of instances of this group only;
* the user data installs nothing from an index: it downloads the asset and runs the bootstrap,
  whose plan names the group's logical id as the resource to signal;
* the asset's wheelhouse holds exactly the lock's wheels for the instance type's architecture
  and the product's wheel, each with its hash in the file the instance installs from.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from infra.fleet import wheel_architecture
from infra.user_data import HEALTH_TIMEOUT_SECONDS, SIGNAL_TIMEOUT_MINUTES
from infra.wheelhouse import LOCK_PATH, read_lock
from tests.infra.conftest import REPO, Synthesized, boot_plan_of, resolve_join, resources_of, user_data_of
from tests.infra.test_asset import staged_asset

pytestmark = pytest.mark.infra


@pytest.fixture(params=["dev", "prod"])
def synth(request: pytest.FixtureRequest, synthesized: dict[str, Synthesized]) -> Synthesized:
    return synthesized[request.param]


def _group(raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (k, r) for k, r in raw["Resources"].items() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"
    ]
    return found


def _statements(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for p in resources_of(raw, "AWS::IAM::Policy") for s in p["PolicyDocument"]["Statement"]]


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return action if isinstance(action, list) else [action]


def test_creation_and_rolling_update_wait_for_healthy_instances(synth: Synthesized) -> None:
    _, group = _group(synth.raw)
    fleet = synth.settings.fleet
    timeout = f"PT{SIGNAL_TIMEOUT_MINUTES}M"
    assert group["CreationPolicy"]["ResourceSignal"] == {"Count": fleet.min_instances, "Timeout": timeout}
    rolling = group["UpdatePolicy"]["AutoScalingRollingUpdate"]
    assert rolling["WaitOnResourceSignals"] is True
    assert rolling["PauseTime"] == timeout
    assert rolling["MaxBatchSize"] == 1
    assert rolling["MinInstancesInService"] == min(fleet.min_instances, fleet.max_instances - 1)
    # The boot gives its verdict before CloudFormation stops waiting.
    assert HEALTH_TIMEOUT_SECONDS < SIGNAL_TIMEOUT_MINUTES * 60


def test_the_boot_signals_the_group_of_this_stack(synth: Synthesized) -> None:
    logical_id, _ = _group(synth.raw)
    plan = boot_plan_of(synth.raw)
    assert plan.signal_resource == logical_id
    assert plan.stack_name == f"{synth.settings.application_name}-{synth.settings.env}"
    assert plan.group_name == f"{plan.stack_name}-workers"
    assert plan.health_timeout_seconds == HEALTH_TIMEOUT_SECONDS
    # The shell only signals for the steps before the bootstrap (dnf, the download).
    assert f"--logical-resource-id {logical_id}" in user_data_of(synth.raw)


def test_signal_and_health_permissions_are_scoped(synth: Synthesized) -> None:
    statements = _statements(synth.raw)
    # CDK grants it with the group's signals: this stack only, no other action alongside.
    signals = [s for s in statements if "cloudformation:SignalResource" in _actions(s)]
    assert signals
    for signal in signals:
        assert _actions(signal) == ["cloudformation:SignalResource"]
        assert signal["Resource"] == {"Ref": "AWS::StackId"}
    (health,) = [s for s in statements if "autoscaling:SetInstanceHealth" in _actions(s)]
    assert set(_actions(health)) == {"autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceHealth"}
    resource = resolve_join(health["Resource"])
    assert resource.endswith(
        f":autoScalingGroupName/{synth.settings.application_name}-{synth.settings.env}-workers"
    )
    assert ":autoscaling:" in resource
    assert not any(s["Resource"] == "*" for s in statements if "autoscaling:SetInstanceHealth" in _actions(s))


def test_user_data_installs_nothing_from_an_index(synth: Synthesized) -> None:
    user_data = user_data_of(synth.raw)
    assert "pip install" not in user_data and "pip3 install" not in user_data
    assert "pypi" not in user_data.lower() and "requirements.txt" not in user_data
    assert "python3.11 -m deploy.bootstrap --archive /opt/consumer/asset.zip" in user_data
    assert "--root /" in user_data
    # Small: the boot logic is in the asset, not in the 16 KB of user data.
    assert len(user_data) < 4096, len(user_data)


def test_the_asset_carries_the_locked_wheelhouse_for_the_instance_architecture(synth: Synthesized) -> None:
    _, directory = staged_asset(synth)
    wheelhouse = directory / "wheelhouse"
    architecture = wheel_architecture(synth.settings.fleet.instance_type)
    assert architecture == "x86_64"  # t3 and c7i
    locked = {r.name: r for r in read_lock(REPO / LOCK_PATH)}
    install = (wheelhouse / "install.txt").read_text()
    wheels = sorted(wheelhouse.glob("*.whl"))
    product = [w for w in wheels if w.name.startswith("dynamodb_stream_fleet-")]
    assert len(product) == 1 and len(wheels) == len(locked) + 1
    for wheel in wheels:
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert f"--hash=sha256:{digest}" in install, wheel.name
        tag = wheel.name.removesuffix(".whl").split("-")[-1]
        assert tag == "any" or tag.endswith("_x86_64"), wheel.name
    # The product's wheel holds the worker and its entry point, and nothing the instance never runs.
    with zipfile.ZipFile(product[0]) as archive:
        names = archive.namelist()
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "tools/cli.py" in names and not [n for n in names if n.startswith(("infra/", "emulator/"))]
    assert "consumer = tools.cli:main" in entry_points


def test_the_lock_covers_exactly_the_runtime_closure_at_the_repository_pins() -> None:
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version.strip()
    locked = read_lock(REPO / LOCK_PATH)
    for requirement in locked:
        assert pins[requirement.name] == requirement.version, requirement.name
        assert requirement.hashes
    names = {r.name for r in locked}
    assert {"boto3", "pydantic", "pyyaml", "orjson", "rich", "watchtower", "aws-embedded-metrics"} <= names
    # Tooling and infrastructure packages are not shipped to instances.
    assert not names & {"aws-cdk-lib", "moto", "pytest", "pyspark", "mypy", "cfn-lint", "flask"}


@pytest.mark.parametrize(
    ("instance_type", "architecture"),
    [("c7i.xlarge", "x86_64"), ("t3.medium", "x86_64"), ("c7g.large", "aarch64"), ("t4g.small", "aarch64")],
)
def test_the_wheelhouse_follows_the_instance_types_processor(instance_type: str, architecture: str) -> None:
    assert wheel_architecture(instance_type) == architecture


def test_the_plan_in_user_data_is_what_the_bootstrap_reads(synth: Synthesized) -> None:
    from deploy.plan import BootPlan

    plan = boot_plan_of(synth.raw)
    assert BootPlan.from_json(plan.to_json()) == plan
    assert (
        json.loads(plan.to_json())["worker_processes"] == synth.settings.fleet.worker_processes_per_instance
    )


def test_the_product_wheel_is_reproducible(tmp_path: Path) -> None:
    from infra.wheelhouse import build_product_wheel

    first = build_product_wheel(REPO, tmp_path / "a")
    second = build_product_wheel(REPO, tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()


def _script(synth: Synthesized) -> str:
    from infra.user_data import BootParameters, boot_script

    parameters = BootParameters(
        asset_url="s3://bucket/asset.zip",
        auto_scaling_group_name="app-workers",
        lifecycle_hook_name="app-release-leases",
        stack_name="app-stack",
        signal_resource="FleetGroupASG",
    )
    return "\n".join(boot_script(synth.settings, parameters)) + "\n"


def test_the_user_data_is_valid_bash(synthesized: dict[str, Synthesized], tmp_path: Path) -> None:
    script = tmp_path / "user-data.sh"
    script.write_text(_script(synthesized["prod"]))
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_a_failure_before_the_bootstrap_signals_failure_from_the_shell(
    synthesized: dict[str, Synthesized], tmp_path: Path
) -> None:
    """dnf fails (a mirror down): the ERR trap signals FAILURE with the instance's id, and the
    script stops there (nothing is downloaded, the bootstrap never runs)."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "calls"
    for name, body in {
        "curl": 'case "$*" in *api/token*) echo token ;; *) echo i-0stub ;; esac',
        "dnf": "exit 1",
        "aws": f'echo "aws $*" >> {calls}',
        "python3.11": f'echo "python3.11 $*" >> {calls}',
    }.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    script = tmp_path / "user-data.sh"
    script.write_text(_script(synthesized["dev"]))
    ran = subprocess.run(
        ["bash", str(script)],
        env={"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode != 0
    assert calls.read_text().splitlines() == [
        "aws cloudformation signal-resource --stack-name app-stack --logical-resource-id FleetGroupASG "
        "--unique-id i-0stub --status FAILURE --region eu-west-1"
    ]


def test_a_group_that_may_start_empty_waits_for_no_creation_signal(tmp_path: Path) -> None:
    """``fleet.min_instances: 0``: nothing boots at creation, so no CreationPolicy (a count of 0);
    a rolling update still waits for each new instance's signal."""
    import shutil

    import yaml

    from tests.infra.conftest import synthesize

    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    dev = yaml.safe_load((config / "dev.yaml").read_text())
    dev["fleet"].update(min_instances=0, desired_instances=0)
    (config / "dev.yaml").write_text(yaml.safe_dump(dev))
    edited = synthesize("dev", tmp_path / "out", config_dir=config)
    _, group = _group(edited.raw)
    assert "CreationPolicy" not in group
    assert group["UpdatePolicy"]["AutoScalingRollingUpdate"]["WaitOnResourceSignals"] is True
