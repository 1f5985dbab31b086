"""What the bootstrap asks of the machine, behind one small interface.

:class:`SystemdHost` is the instance: ``useradd``, ``systemctl``, the CloudWatch agent's control
script and the AWS CLI (present on Amazon Linux 2023) for the CloudFormation signal, which thereby
works even when the virtualenv could not be built. A test passes its own host: it runs the units
that were written with a small unit runner instead of systemd, and records the signal.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from deploy.imds import metadata
from deploy.plan import BootPlan

AGENT_CTL = "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
SERVICE_USER = "consumer"


class Host(Protocol):
    def ensure_user(self, name: str, home: Path) -> None: ...

    def chown(self, path: Path, user: str) -> None: ...

    def start_agent(self, config_file: Path) -> None: ...

    def enable_and_start(self, units: Sequence[str]) -> None: ...

    def instance_id(self) -> str: ...

    def signal(self, plan: BootPlan, status: str, reason: str) -> None: ...


def run(command: Sequence[str]) -> None:
    """Run a command; its output goes to the boot log (cloud-init's output on an instance)."""
    print("+", " ".join(command), flush=True)
    subprocess.run(list(command), check=True, timeout=600)


class SystemdHost:
    """The instance's own tools."""

    def ensure_user(self, name: str, home: Path) -> None:
        exists = subprocess.run(["id", name], capture_output=True, check=False).returncode == 0
        if not exists:
            run(["useradd", "--system", "--home-dir", str(home), "--shell", "/sbin/nologin", name])

    def chown(self, path: Path, user: str) -> None:
        run(["chown", "-R", f"{user}:{user}", str(path)])

    def start_agent(self, config_file: Path) -> None:
        run([AGENT_CTL, "-a", "fetch-config", "-m", "ec2", "-s", "-c", f"file:{config_file}"])

    def enable_and_start(self, units: Sequence[str]) -> None:
        run(["systemctl", "daemon-reload"])
        run(["systemctl", "enable", "--now", *units])

    def instance_id(self) -> str:
        return metadata("instance-id") or "unknown-instance"

    def signal(self, plan: BootPlan, status: str, reason: str) -> None:
        print(f"signal {status}: {reason}", flush=True)
        run(
            [
                "aws",
                "cloudformation",
                "signal-resource",
                "--stack-name",
                plan.stack_name,
                "--logical-resource-id",
                plan.signal_resource,
                "--unique-id",
                self.instance_id(),
                "--status",
                status,
                "--region",
                plan.region,
            ]
        )
