"""The instance's watchdog (``consumer-watchdog.service``, run with the virtualenv's python).

Two duties, polled every few seconds:

* **hand-off on termination**: when the instance metadata's Auto Scaling target lifecycle state
  is ``Terminated`` (scale-in, rolling replacement, health replacement), stop the worker units
  (each gets SIGTERM, checkpoints and releases its leases) and complete the lifecycle action;
* **health**: when the workers crash-loop or stop reporting lease-taking rounds
  (:class:`deploy.health.HealthJudge`), mark the instance Unhealthy with
  ``autoscaling:SetInstanceHealth``, so the group replaces it instead of keeping a half-working
  instance InService. The judging starts after the boot's own health deadline: until then the
  bootstrap's signal decides.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.health import HealthJudge, heartbeat_ages
from deploy.imds import metadata
from deploy.plan import WORKER_UNIT, BootPlan, Layout

POLL_SECONDS = 5.0


def systemd_restarts(units: Sequence[str]) -> int | None:
    """Restarts systemd made of the worker units so far (``NRestarts``), or None without systemd."""
    total = 0
    for unit in units:
        try:
            result = subprocess.run(
                ["systemctl", "show", "--property", "NRestarts", "--value", unit],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        value = result.stdout.strip()
        total += int(value) if value.isdigit() else 0
    return total


def stop_workers() -> None:
    """Stop every worker unit; systemd waits up to each unit's TimeoutStopSec for the hand-off."""
    try:
        subprocess.run(["systemctl", "stop", f"{WORKER_UNIT}@*"], check=False, timeout=3600)
    except (OSError, subprocess.SubprocessError) as exc:  # the lifecycle action completes regardless
        print(f"could not stop the workers: {exc}", file=sys.stderr, flush=True)


@dataclass
class Watchdog:
    plan: BootPlan
    layout: Layout
    autoscaling: Any  # a boto3 autoscaling client
    instance_id: str
    judge: HealthJudge
    lifecycle_state: Callable[[], str | None] = lambda: metadata("autoscaling/target-lifecycle-state")
    restarts: Callable[[], int | None] = lambda: None
    stop: Callable[[], None] = stop_workers
    reported: str | None = None

    def step(self, now: float) -> bool:
        """One poll; False once the instance was handed over (the watchdog exits)."""
        if self.lifecycle_state() == "Terminated":
            self.stop()
            self.autoscaling.complete_lifecycle_action(
                LifecycleHookName=self.plan.lifecycle_hook_name,
                AutoScalingGroupName=self.plan.group_name,
                LifecycleActionResult="CONTINUE",
                InstanceId=self.instance_id,
            )
            return False
        verdict = self.judge.observe(now, heartbeat_ages(self.plan, self.layout), self.restarts())
        if verdict is not None and self.reported is None:
            print(f"instance unhealthy: {verdict}", flush=True)
            self.autoscaling.set_instance_health(
                InstanceId=self.instance_id, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False
            )
            self.reported = verdict
        return True


def main(argv: Sequence[str] | None = None) -> int:
    import boto3

    parser = argparse.ArgumentParser(prog="python -m deploy.watchdog", description=__doc__.split("\n")[0])
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--root", type=Path, default=Path("/"))
    args = parser.parse_args(argv)
    plan = BootPlan.from_json(args.plan.read_text())
    layout = Layout(args.root)
    instance_id = metadata("instance-id")
    if instance_id is None:
        print("no instance metadata: not on an instance", file=sys.stderr)
        return 2
    watchdog = Watchdog(
        plan,
        layout,
        boto3.client("autoscaling", region_name=plan.region),
        instance_id,
        HealthJudge(plan, started=time.time(), grace_seconds=plan.health_timeout_seconds),
        restarts=lambda: systemd_restarts(plan.unit_names()),
    )
    while watchdog.step(time.time()):
        time.sleep(POLL_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
