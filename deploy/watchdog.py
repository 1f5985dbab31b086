"""The instance's watchdog (``consumer-watchdog.service``, run with the virtualenv's python).

Two duties, polled every few seconds:

* **hand-off on termination**: when the instance metadata's Auto Scaling target lifecycle state
  is ``Terminated`` (scale-in, rolling replacement, health replacement), stop the worker units
  (each gets SIGTERM, checkpoints and releases its leases) and complete the lifecycle action;
* **health**: when the workers fail in a way that is this instance's own
  (:class:`deploy.health.HealthJudge`: a crash loop, or workers failing or stalled while others are
  fine), mark the instance Unhealthy with ``autoscaling:SetInstanceHealth``, so the group replaces
  it instead of keeping a half-working instance InService. A failure the whole fleet shares (a
  DynamoDB brownout) is not the instance's and replaces nothing. Replacements are limited for the
  whole fleet: while another instance of the group is not InService and Healthy (being replaced,
  starting, draining), the watchdog waits. The judging starts after the boot's own health
  deadline: until then the bootstrap's signal decides.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.health import HealthJudge, PeerView, heartbeats
from deploy.imds import metadata
from deploy.peers import LOOK_SECONDS, PeerLook, Silent, host_of
from deploy.plan import WORKER_UNIT, BootPlan, Layout

# The heartbeat row's attribute of the worker's last good lease-taking round (wall ms); the worker
# writes it (consumer.leases.items.ROUND_OK_ATTRIBUTE: the watchdog imports nothing of consumer).
ROUND_OK_ATTRIBUTE = "leaseRoundOkAt"

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


def agent_flush_seconds(plan: BootPlan) -> float:
    """Twice the CloudWatch agent's log flush interval (``force_flush_interval``, 5 s by default)."""
    logs = plan.agent_config.get("logs", {})
    interval = logs.get("force_flush_interval", 5) if isinstance(logs, dict) else 5
    return 2.0 * float(interval)


def hand_off(
    plan: BootPlan, *, stop: Callable[[], None] = stop_workers, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Stop the workers, then give the agent time to ship what they sent last.

    Each stopping worker sends its last EMF document (the final period's checkpoints, released
    leases and the shutdown itself) to the agent, which buffers logs up to its flush interval;
    completing the lifecycle action right away would let the instance terminate with that document
    still in the agent's buffer, and the dashboard and alarms would miss the hand-over's last minute.
    """
    stop()
    sleep(agent_flush_seconds(plan))


class WorkersTableProbe:
    """The watchdog's own look at the fleet and its tables, asked only while this instance's workers
    look unwell.

    * **The workers table**: one consistent Scan (a row per worker), counting the workers on *other*
      hosts that are fine: a heartbeat row younger than ``horizon_seconds`` (failover + skew) whose
      last lease-taking round with successful reads (``leaseRoundOkAt``) is younger than
      ``round_horizon_seconds`` (the age limit the watchdog holds its own workers to). The heartbeat
      alone says nothing about the leases table: a separate loop keeps writing it while every
      leases-table round fails, and counting by it would make every instance blame itself when the
      leases table alone fails. A row without ``leaseRoundOkAt`` (no round succeeded yet, or a
      worker of an older release) is not counted as fine.
    * **The leases table** (``leases_table``): one item (an eventually consistent Scan with
      ``Limit`` 1, half a read unit). Refused, throttled or unreachable: the table every worker
      needs is failing, which is not this instance's fault.

    Worker ids start ``<unit name>@<host>:``, so this host's own workers are told apart by the part
    after ``@``."""

    def __init__(
        self,
        client: Any,
        table: str,
        host: str,
        horizon_seconds: float,
        *,
        round_horizon_seconds: float,
        leases_table: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._clock = clock
        self._table = table
        self._host = host
        self._horizon = horizon_seconds
        self._round_horizon = round_horizon_seconds
        self._leases_table = leases_table

    def __call__(self) -> PeerView:
        from botocore.exceptions import BotoCoreError, ClientError

        if self._leases_table is not None:
            try:
                self._client.scan(TableName=self._leases_table, Limit=1)
            except (BotoCoreError, ClientError) as exc:
                return PeerView(readable=False, error=f"leases table {self._leases_table}: {str(exc)[:200]}")
        now = self._clock()
        fresh = 0
        request: dict[str, Any] = {"TableName": self._table, "ConsistentRead": True}
        try:
            while True:
                page = self._client.scan(**request)
                for item in page.get("Items", []):
                    fresh += self._fine(item, now)
                if "LastEvaluatedKey" not in page:
                    return PeerView(readable=True, fresh_peers=fresh)
                request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except (BotoCoreError, ClientError) as exc:
            return PeerView(readable=False, error=f"workers table {self._table}: {str(exc)[:200]}")

    def _fine(self, item: dict[str, Any], now: float) -> bool:
        """A worker of another host whose heartbeat and whose last good round are both recent."""
        host = host_of(str(item.get("workerId", {}).get("S", "")))
        beat = item.get("heartbeatAt", {}).get("N")
        round_ok = item.get(ROUND_OK_ATTRIBUTE, {}).get("N")
        return (
            host not in ("", self._host.split(".", 1)[0])
            and beat is not None
            and round_ok is not None
            and now - int(beat) / 1000 <= self._horizon
            and now - int(round_ok) / 1000 <= self._round_horizon
        )


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
    peers: Callable[[], PeerView] = lambda: PeerView(readable=False, error="no probe configured")
    # Peers cut off from the tables (deploy.peers), looked for while this instance's workers are fine.
    peer_look: Callable[[], Silent | None] | None = None
    reported: str | None = None
    _said: str | None = None
    _next_peer_look: float = 0.0

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
        if self.reported is not None:
            return True
        beats = heartbeats(self.plan, self.layout, now)
        judgement = self.judge.observe(now, beats, self.restarts(), self.peers)
        if (
            judgement.unhealthy is None
            and judgement.excused is None
            and beats
            and now - self.judge.started >= self.judge.grace_seconds
        ):
            self._look_at_peers(now)
        if judgement.excused is not None:
            self._say(
                f"not blamed on this instance: {judgement.excused}", f"excused: {judgement.why_excused}"
            )
        elif judgement.unhealthy is None:
            self._said = None  # well again: the next trouble is said anew
        if judgement.unhealthy is None:
            return True
        busy = self.replacement_in_progress()
        if busy is not None:
            self._say(f"unhealthy ({judgement.unhealthy}), waiting: {busy}", "waiting")
            return True
        print(f"instance unhealthy: {judgement.unhealthy}", flush=True)
        self.autoscaling.set_instance_health(
            InstanceId=self.instance_id, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False
        )
        self.reported = judgement.unhealthy
        return True

    def _look_at_peers(self, now: float) -> None:
        """Mark a peer cut off from the tables Unhealthy (deploy.peers), one replacement at a time."""
        if self.peer_look is None or now < self._next_peer_look:
            return
        self._next_peer_look = now + LOOK_SECONDS
        silent = self.peer_look()
        if silent is None:
            return
        member = silent.member
        why = (
            f"peer {member.instance_id} ({member.host}): its workers' heartbeats are "
            f"{silent.silent_seconds:.0f} s old while {silent.fresh_hosts} instance(s)' are fresh"
        )
        busy = self.replacement_in_progress(also=member.instance_id)
        if busy is not None:
            self._say(f"{why}; waiting: {busy}", f"peer waiting {member.instance_id}")
            return
        try:
            self.autoscaling.set_instance_health(
                InstanceId=member.instance_id, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False
            )
        except Exception as exc:  # botocore's errors; the next look tries again
            self._say(f"{why}; could not mark it Unhealthy: {exc}", f"peer failed {member.instance_id}")
            return
        print(f"{why}: marked Unhealthy", flush=True)

    def replacement_in_progress(self, also: str | None = None) -> str | None:
        """Why not now: another instance of the group (than this one and ``also``) is not InService
        and Healthy (one replacement at a time for the whole fleet), or the group cannot be read
        (then nothing is replaced)."""
        try:
            groups = self.autoscaling.describe_auto_scaling_groups(
                AutoScalingGroupNames=[self.plan.group_name]
            )
        except Exception as exc:  # botocore's errors; the next poll asks again
            return f"the group {self.plan.group_name} cannot be read ({exc})"
        for group in groups.get("AutoScalingGroups", []):
            for instance in group.get("Instances", []):
                if instance.get("InstanceId") in (self.instance_id, also):
                    continue
                state, health = instance.get("LifecycleState"), instance.get("HealthStatus")
                if state != "InService" or health != "Healthy":
                    return f"instance {instance.get('InstanceId')} of the group is {state} / {health}"
        return None

    def _say(self, message: str, kind: str) -> None:
        """Print a message when its kind changes (the watchdog polls every few seconds)."""
        if kind != self._said:
            print(message, flush=True)
            self._said = kind


def peer_look(
    plan: BootPlan,
    dynamodb: Any,
    ec2: Any,
    autoscaling: Any,
    host: str,
    *,
    clock: Callable[[], float] = time.time,
) -> PeerLook:
    """The look for peers cut off from the tables, with the plan's limits (deploy.peers)."""
    assert plan.workers_table is not None
    return PeerLook(
        dynamodb=dynamodb,
        ec2=ec2,
        autoscaling=autoscaling,
        workers_table=plan.workers_table,
        group_name=plan.group_name,
        own_host=host,
        limit=plan.heartbeat_max_age_seconds,
        settle=plan.health_timeout_seconds + plan.heartbeat_max_age_seconds,
        clock=clock,
    )


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
    from botocore.config import Config

    quick = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"})
    watchdog = Watchdog(
        plan,
        layout,
        boto3.client("autoscaling", region_name=plan.region, config=quick),
        instance_id,
        HealthJudge(plan, started=time.time(), grace_seconds=plan.health_timeout_seconds),
        restarts=lambda: systemd_restarts(plan.unit_names()),
        stop=lambda: hand_off(plan, stop=stop_workers, sleep=time.sleep),
    )
    if plan.workers_table:
        dynamodb = boto3.client("dynamodb", region_name=plan.region, config=quick)
        watchdog.peers = WorkersTableProbe(
            dynamodb,
            plan.workers_table,
            socket.gethostname(),
            plan.peer_horizon_seconds,
            round_horizon_seconds=plan.heartbeat_max_age_seconds,
            leases_table=plan.leases_table,
        )
        watchdog.peer_look = peer_look(
            plan, dynamodb, boto3.client("ec2", region_name=plan.region, config=quick), watchdog.autoscaling,
            socket.gethostname(),
        )  # fmt: skip
    while watchdog.step(time.time()):
        time.sleep(POLL_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
