"""A failed boot marks the instance Unhealthy: the instance's own start-up code, each step failing in turn.

The user data (``infra.user_data.boot_script`` for dev, as the launch template carries it) runs
under bash with its two absolute paths moved under a temporary directory and stub commands on
PATH for what an instance has (``curl`` to the metadata service, ``rpm``/``dnf``, the AWS CLI:
each call recorded). Its ``python3.11`` runs the real bootstrap (:func:`deploy.bootstrap.run_boot`,
as ``python3.11 -m deploy.bootstrap`` would) on the archive the stub ``aws s3 cp`` "downloaded",
with a host whose named step fails and a ``python`` whose ``venv`` or ``pip`` may fail; the
bootstrap's exit status goes back to the user data as on an instance.

Outside a deploy nobody hears the CloudFormation signal, and before the watchdog runs nothing else
judges the instance: every step up to starting the units must end in ``SetInstanceHealth
Unhealthy`` as well as one FAILURE signal. The user data once skipped the mark whenever the
bootstrap had signalled (exit 3), so a failed virtualenv, agent or ``systemctl`` left the instance
InService with no workers. Workers that never report healthy are the one case left to the watchdog,
which is running by then and tells this instance's failure from the fleet's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ground.settings import Settings, load_settings
from infra.user_data import ASSET_ARCHIVE, INSTALL_ROOT, PLAN_SOURCE, BootParameters, boot_script
from tests.infra.conftest import deployable_config

REPO = Path(__file__).resolve().parents[3]
REGION = "eu-west-1"
SIGNAL = (
    "aws cloudformation signal-resource --stack-name app-stack --logical-resource-id FleetGroupASG "
    f"--unique-id i-0stub --status FAILURE --region {REGION}"
)
MARK = (
    "aws autoscaling set-instance-health --instance-id i-0stub --health-status Unhealthy "
    f"--no-should-respect-grace-period --region {REGION}"
)
BOOTSTRAP_SIGNAL = "bootstrap signal FAILURE"

# The bootstrap under the user data: a host whose FAIL_STEP raises, every other step recorded.
DRIVER = """
import argparse, dataclasses, os, sys
from pathlib import Path
from deploy.bootstrap import run_boot
from deploy.plan import BootPlan, Layout

step, calls = os.environ["FAIL_STEP"], Path(os.environ["CALLS"])

class Host:
    def _step(self, name):
        if name == step:
            raise OSError(f"{name} failed")
    def ensure_user(self, name, home): self._step("user")
    def chown(self, path, user): self._step("chown")
    def start_agent(self, config_file): self._step("agent")
    def enable_and_start(self, units): self._step("systemctl")
    def instance_id(self): return "i-0stub"
    def signal(self, plan, status, reason):
        with calls.open("a") as out:
            out.write(f"bootstrap signal {status}\\n")

parser = argparse.ArgumentParser()
for option in ("--archive", "--plan", "--group-name", "--root"):
    parser.add_argument(option)
args = parser.parse_args(sys.argv[1:])
# The stub root runs no workers: the health wait ends at once instead of after the plan's timeout.
plan = dataclasses.replace(BootPlan.from_json(Path(args.plan).read_text()), health_timeout_seconds=0)
root = Path(os.environ["BOOT_ROOT"])
if step == "configuration":  # the unit directory cannot be made
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "systemd").write_text("a file where a directory goes")
sys.exit(run_boot(plan, Layout(root), Path(args.archive), Host(), python=os.environ["FAKE_PYTHON"]))
"""

# The instance's python3.11 for `-m venv` and the virtualenv's python for `-m pip`.
FAKE_PYTHON = """#!/bin/bash
case "$1 $2" in
  "-m venv") [ "$FAIL_STEP" = venv ] && exit 1; mkdir -p "$4/bin"; cp "$0" "$4/bin/python"; exit 0 ;;
  "-m pip") [ "$FAIL_STEP" = pip ] && exit 1; exit 0 ;;
esac
exit 2
"""


def dev_settings(tmp_path: Path) -> Settings:
    config = deployable_config(tmp_path / "configs")
    return load_settings("dev", config, environ={})


def run_user_data(tmp_path: Path, fail_step: str, stubs: dict[str, str]) -> tuple[int, list[str]]:
    parameters = BootParameters(
        asset_url="s3://bucket/asset.zip",
        lifecycle_hook_name="app-release-leases",
        stack_name="app-stack",
        signal_resource="FleetGroupASG",
    )
    script = "\n".join(boot_script(dev_settings(tmp_path), parameters)) + "\n"
    instance = tmp_path / "instance"
    # Only the two places the user data writes move under the temporary directory.
    script = script.replace(PLAN_SOURCE, str(instance / "consumer-boot.json"))
    script = script.replace(INSTALL_ROOT, str(instance / "opt-consumer"))
    assert ASSET_ARCHIVE.startswith(INSTALL_ROOT) and "/opt/consumer" not in script
    (tmp_path / "user-data.sh").write_text(script)
    directory = tmp_path / "bin"
    directory.mkdir()
    calls = tmp_path / "calls"
    calls.touch()
    asset = tmp_path / "asset.zip"
    with zipfile.ZipFile(asset, "w") as archive:
        archive.writestr("wheelhouse/install.txt", "")
    (tmp_path / "driver.py").write_text(DRIVER)
    fake_python = tmp_path / "fake-python"
    fake_python.write_text(FAKE_PYTHON)
    fake_python.chmod(0o755)
    base = {
        "curl": 'case "$*" in *api/token*) echo token ;; *) echo i-0stub ;; esac',
        "rpm": "exit 0",
        "aws": 'echo "aws $*" >> {calls}\n'
        'case "$*" in\n'
        "  *describe-auto-scaling-instances*) echo app-stack-FleetGroup-1A2B ;;\n"
        f'  *"s3 cp"*) [ "$FAIL_STEP" = unpack ] && echo "not a zip" > "$4" || cp {asset} "$4" ;;\n'
        "esac",
        "python3.11": f'echo "python3.11 $*" >> {{calls}}\nPYTHONPATH={REPO} exec {sys.executable} '
        f'{tmp_path / "driver.py"} "${{@:3}}"',
        **stubs,
    }
    for name, body in base.items():
        (directory / name).write_text("#!/bin/bash\n" + body.replace("{calls}", str(calls)) + "\n")
        (directory / name).chmod(0o755)
    ran = subprocess.run(
        ["bash", str(tmp_path / "user-data.sh")],
        cwd=tmp_path,
        env={
            "PATH": f"{directory}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "FAIL_STEP": fail_step,
            "CALLS": str(calls),
            "BOOT_ROOT": str(instance / "root"),
            "FAKE_PYTHON": str(fake_python),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in ran.stderr or fail_step == "died", ran.stderr[-2000:]
    return ran.returncode, calls.read_text().splitlines()


def after_boot(calls: list[str]) -> list[str]:
    """What happened from the bootstrap on (the user data's own steps before it are recorded too)."""
    (start,) = [i for i, c in enumerate(calls) if c.startswith("python3.11")]
    return calls[start + 1 :]


@pytest.mark.parametrize(
    "step", ["unpack", "venv", "pip", "configuration", "user", "chown", "agent", "systemctl"]
)
def test_each_bootstrap_step_failing_signals_once_and_marks_the_instance_unhealthy(
    tmp_path: Path, step: str
) -> None:
    status, calls = run_user_data(tmp_path, step, {})
    assert status != 0
    assert after_boot(calls) == [BOOTSTRAP_SIGNAL, MARK], calls


def test_workers_that_never_report_signal_failure_and_leave_the_verdict_to_the_running_watchdog(
    tmp_path: Path,
) -> None:
    """Every step worked, the units run, and no worker reported a good round in time (the boot
    plan's timeout, 0 s here): FAILURE for a deploy, and the watchdog judges the instance from then
    on (it blames workers failing while others are fine, a crash loop, stalled loops while the
    tables answer; not a DynamoDB outage of the whole fleet)."""
    import json

    status, calls = run_user_data(tmp_path, "none", {})
    plan = json.loads((tmp_path / "instance" / "consumer-boot.json").read_text())
    assert plan["health_timeout_seconds"] > 0  # the shipped plan waits; the stub root has no workers
    assert status != 0
    assert after_boot(calls) == [BOOTSTRAP_SIGNAL]


@pytest.mark.parametrize(
    ("step", "stubs"),
    [
        ("dnf", {"rpm": "exit 1", "dnf": "exit 1"}),
        ("download", {"aws": 'echo "aws $*" >> {calls}; case "$*" in *"s3 cp"*) exit 1 ;; esac'}),
        (
            "group",
            {
                "aws": 'echo "aws $*" >> {calls}; case "$*" in *describe-auto-scaling-instances*) exit 255 ;; esac'
            },
        ),
        (
            "no-group",
            {
                "aws": 'echo "aws $*" >> {calls}; case "$*" in *describe-auto-scaling-instances*) echo None ;; '
                '*"s3 cp"*) true ;; esac'
            },
        ),
        ("died", {"python3.11": 'echo "python3.11 $*" >> {calls}; exit 1'}),
    ],
)
def test_each_user_data_step_failing_signals_and_marks_the_instance_unhealthy(
    tmp_path: Path, step: str, stubs: dict[str, str]
) -> None:
    status, calls = run_user_data(tmp_path, step, stubs)
    assert status != 0
    assert calls[-2:] == [SIGNAL, MARK], calls
    assert calls.count(SIGNAL) == 1 and BOOTSTRAP_SIGNAL not in calls


def test_a_boot_without_the_instance_metadata_powers_off(tmp_path: Path) -> None:
    """Without its id the instance can neither signal nor mark itself: it shuts down, and Auto
    Scaling's EC2 health check replaces an instance that is not running (the deployed fleet's model,
    seed 1 000 018: a boot that lost the metadata service stayed InService with no workers)."""
    stubs = {"curl": "exit 22", "shutdown": 'echo "shutdown $*" >> {calls}'}
    status, calls = run_user_data(tmp_path, "metadata", stubs)
    assert status != 0
    assert calls == ["shutdown -h now"], calls


def test_a_boot_that_works_signals_nothing_from_the_shell(tmp_path: Path) -> None:
    status, calls = run_user_data(tmp_path, "none", {"python3.11": 'echo "python3.11 $*" >> {calls}; exit 0'})
    assert status == 0
    assert after_boot(calls) == [] and SIGNAL not in calls and MARK not in calls
    assert os.path.exists(tmp_path / "instance" / "consumer-boot.json")
