"""The instances the fleet benches run: ``consumer run`` processes grouped as on an instance, each
instance with its workers' heartbeat files and its real :class:`deploy.watchdog.Watchdog` (the judge
and its own read of the workers table) polling them; Auto Scaling is a stand-in that records every
``SetInstanceHealth``. Worker ids carry their instance as host (``worker-3@inst-1:...``), as they carry
the host name on an instance. Used by bench/brownout.py and bench/rolling_deploy.py."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.fleet_support import Stack
from deploy.health import HealthJudge, wait_for_healthy
from deploy.plan import BootPlan, Layout
from deploy.watchdog import Watchdog, WorkersTableProbe


class StandInGroup:
    """Auto Scaling as far as a watchdog asks: every instance InService and Healthy; the health
    reports are recorded."""

    def __init__(self, instance_ids: list[str]) -> None:
        self.instance_ids = instance_ids
        self.marked: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def describe_auto_scaling_groups(self, **_: Any) -> dict[str, Any]:
        instances = [
            {"InstanceId": i, "LifecycleState": "InService", "HealthStatus": "Healthy"}
            for i in self.instance_ids
        ]
        return {"AutoScalingGroups": [{"Instances": instances}]}

    def set_instance_health(self, **kwargs: Any) -> None:
        with self._lock:
            self.marked.append((str(kwargs["InstanceId"]), time.time()))

    def complete_lifecycle_action(self, **_: Any) -> None:
        return None


class ListeningWatchdog(Watchdog):
    """The real watchdog, whose messages are kept (with their time) instead of only printed."""

    heard: list[tuple[float, str]]

    def _say(self, message: str, kind: str) -> None:
        if kind != self._said:
            self.heard.append((time.time(), message))
        super()._say(message, kind)


@dataclass
class Instance:
    name: str
    layout: Layout
    plan: BootPlan
    workers: list[str] = field(default_factory=list)
    watchdog: ListeningWatchdog | None = None


def start_instances(
    stack: Stack, instances: int, processes: int, max_age_seconds: int, first_index: int = 0
) -> list[Instance]:
    """``instances`` x ``processes`` workers, each with its heartbeat file under its instance's root
    (instances ``inst-<first_index>`` on)."""
    worker = stack.settings.worker
    fleet: list[Instance] = []
    for k in range(first_index, first_index + instances):
        layout = Layout(stack.workdir / f"inst-{k}")
        plan = BootPlan(
            env="bench",
            region=stack.settings.region,
            worker_processes=processes,
            stop_timeout_seconds=30,
            agent_config={},
            stack_name="bench",
            signal_resource="Group",
            group_name="bench-workers",
            lifecycle_hook_name="bench-release-leases",
            health_timeout_seconds=0,
            heartbeat_max_age_seconds=max_age_seconds,
            workers_table=stack.settings.workers_table_name,
            leases_table=stack.settings.leases_table_name,
            peer_horizon_seconds=(worker.failover_time_millis + worker.max_clock_skew_millis) / 1000,
        )
        instance = Instance(f"inst-{k}", layout, plan)
        for i in range(1, processes + 1):
            number = len(stack.fleet.workers) + 1
            heartbeat = layout.heartbeat(str(i))
            heartbeat.parent.mkdir(parents=True, exist_ok=True)
            worker_id = f"worker-{number}@{instance.name}:{number}:bench"
            process = stack.fleet.start_worker(("--heartbeat-file", str(heartbeat), "--worker-id", worker_id))
            instance.workers.append(process.name)
            time.sleep(0.5)  # staggered: simultaneous start-ups overload a 2-core machine
        fleet.append(instance)
    return fleet


def booted(stack: Stack, fleet: list[Instance], since: float) -> None:
    """Every instance booted as the bootstrap decides it (every worker had a round succeed): the
    watchdog judges only after that, as on an instance (after the boot's health deadline)."""
    for instance in fleet:
        plan = dataclasses.replace(instance.plan, health_timeout_seconds=120)
        if not wait_for_healthy(plan, instance.layout, since - 1):
            raise RuntimeError(
                f"{instance.name}'s workers never had a round succeed; logs in {stack.workdir}"
            )


def watch(
    stack: Stack, fleet: list[Instance], group: StandInGroup, stop: threading.Event
) -> threading.Thread:
    """The instances' watchdogs, each polled every half second on one thread (as each polls alone)."""
    horizon = fleet[0].plan.peer_horizon_seconds
    for instance in fleet:
        probe = WorkersTableProbe(
            stack.emulator.client("dynamodb"),
            stack.settings.workers_table_name,
            instance.name,
            horizon,
            round_horizon_seconds=instance.plan.heartbeat_max_age_seconds,
            leases_table=stack.settings.leases_table_name,
        )
        watchdog = ListeningWatchdog(
            instance.plan,
            instance.layout,
            group,
            instance.name,
            HealthJudge(instance.plan, started=time.time(), grace_seconds=0),
            lifecycle_state=lambda: "InService",
            restarts=lambda: 0,
            stop=lambda: None,
            peers=probe,
        )
        watchdog.heard = []
        instance.watchdog = watchdog

    def loop() -> None:
        while not stop.wait(0.5):
            for instance in fleet:
                assert instance.watchdog is not None
                with contextlib.suppress(Exception):  # a watchdog's own trouble is in its words
                    instance.watchdog.step(time.time())

    thread = threading.Thread(target=loop, name="watchdogs", daemon=True)
    thread.start()
    return thread
