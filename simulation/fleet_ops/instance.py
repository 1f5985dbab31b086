"""One EC2 instance of the fleet: its boot, its systemd units (the workers and the real watchdog),
and what can break it (a boot step, its workers, its network).

**Boot.** EC2 starts it; cloud-init runs the user data and the bootstrap step by step (modelled
durations: :data:`STEP_SECONDS`); a step that fails ends the boot as the real scripts end it (the
outcome table of :mod:`simulation.fleet_ops.boot_outcomes`: the signals, whether the instance marks
itself Unhealthy, which units run). A boot that goes through starts the worker units and the
watchdog unit, then waits for healthy workers with the real ``deploy.health.fresh_workers`` (every
2 s, until ``health_timeout_seconds``) and signals SUCCESS or FAILURE.

**Units.** Each worker unit runs a :class:`~simulation.fleet_ops.workers.WorkerProcess`; one that
exits is started again 5 s later (``Restart=on-failure``, ``RestartSec=5``) and counts in
``NRestarts``. The watchdog unit runs ``deploy.watchdog.Watchdog`` built as ``deploy.watchdog.main``
builds it (:func:`build_watchdog`), stepped every ``POLL_SECONDS``; a step that raises ends the
process and systemd starts a new one 5 s later (``Restart=always``), with a new health judge.

**Faults.** Workers that crash at start (a crash loop) or whose taker loops stop (wedged); a
partition from the tables (this host's DynamoDB traffic fails, its watchdog's too) or of the whole
host (nothing reaches it or leaves it; EC2's status checks fail). Each is recorded as a stretch
during which the instance is itself broken: what the checker holds replacements against.
"""

from __future__ import annotations

import functools
import io
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from deploy.health import HealthJudge, fresh_workers
from deploy.plan import BootPlan, Layout
from deploy.watchdog import POLL_SECONDS, Watchdog, WorkersTableProbe, peer_look
from simulation.fleet_ops.boot_outcomes import BOOTSTRAP_STEPS, USER_DATA_STEPS, BootOutcome
from simulation.fleet_ops.clock import Loop
from simulation.fleet_ops.group import Member
from simulation.fleet_ops.heartbeat_files import HealthDir
from simulation.fleet_ops.workers import Timing, WorkerProcess

# Seconds each boot step takes (uniform between the two): our estimates for an AL2023 instance,
# not measured (docs/deploy.md: 3-6 minutes to the first round).
STEP_SECONDS = {
    "metadata": (1.0, 2.0),
    "packages": (30.0, 90.0),
    "download": (3.0, 15.0),
    "group-name": (1.0, 3.0),
    "unpack": (2.0, 5.0),
    "venv": (40.0, 120.0),
    "configuration": (0.1, 0.3),
    "user": (0.3, 1.0),
    "agent": (3.0, 8.0),
    "units": (1.0, 3.0),
}
BOOT_ORDER = tuple(s for s in USER_DATA_STEPS + BOOTSTRAP_STEPS if s != "workers")
RESTART_SECONDS = 5.0
# Auto Scaling's EC2 health check (periodic) finds a stopped instance not running.
STOPPED_NOTICED_SECONDS = 60.0
# EC2's status checks (every minute) mark a host without network impaired after two or three.
EC2_IMPAIRED = (120.0, 180.0)


class Site(Protocol):
    """What an instance needs of the fleet around it."""

    loop: Loop
    timing: Timing
    files: Any

    def signal(self, member: Member, status: str) -> None: ...

    def set_unhealthy(self, member: Member, by: str) -> None: ...

    def clients(self, machine: Machine) -> tuple[Any, Any, Any]: ...

    def advance_workers(self, machine: Machine, t: float) -> None: ...

    def worker_started(self, worker: WorkerProcess) -> None: ...

    def workers_stopping(self, machine: Machine) -> None: ...


@dataclass
class Broken:
    start: float
    end: float | None
    why: str


def build_watchdog(
    plan: BootPlan,
    layout: Layout,
    *,
    autoscaling: Any,
    dynamodb: Any,
    ec2: Any,
    instance_id: str,
    host: str,
    started: float,
    restarts: Callable[[], int | None],
    lifecycle_state: Callable[[], str | None],
    stop: Callable[[], None],
    clock: Callable[[], float],
) -> Watchdog:
    """The watchdog as ``deploy.watchdog.main`` assembles it (tests/simulation holds the two equal)."""
    watchdog = Watchdog(
        plan,
        layout,
        autoscaling,
        instance_id,
        HealthJudge(plan, started=started, grace_seconds=plan.health_timeout_seconds),
        lifecycle_state=lifecycle_state,
        restarts=restarts,
        stop=stop,
    )
    if plan.workers_table:
        watchdog.peers = WorkersTableProbe(
            dynamodb,
            plan.workers_table,
            host,
            plan.peer_horizon_seconds,
            round_horizon_seconds=plan.heartbeat_max_age_seconds,
            leases_table=plan.leases_table,
            clock=clock,
        )
        watchdog.peer_look = peer_look(plan, dynamodb, ec2, autoscaling, host, clock=clock)
    return watchdog


@dataclass(eq=False)
class Machine:
    site: Site
    member: Member
    plan: BootPlan
    outcome: BootOutcome
    rng: random.Random
    worker_fault: str | None = None  # "crash" or "denied" when the boot fails at "workers"
    on_timeout: BootOutcome | None = None  # what the boot does when its workers never report
    host: str = ""
    layout: Layout = field(default_factory=Layout)
    health: HealthDir = field(default_factory=HealthDir)
    workers: dict[str, WorkerProcess] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    watchdog: Watchdog | None = None
    watchdog_runs: int = 0
    target: str = "InService"
    crash_until: float = -1.0
    partitions: list[tuple[str, float, float]] = field(default_factory=list)
    broken: list[Broken] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    boot_started: float | None = None
    units_at: float | None = None
    signalled: str | None = None
    gone: bool = False
    impaired_after: float = 0.0

    def __post_init__(self) -> None:
        self.impaired_after = self.rng.uniform(*EC2_IMPAIRED)
        octets = self.rng.randint(0, 255), self.rng.randint(0, 255)
        self.host = f"ip-10-0-{octets[0]}-{octets[1]}"
        self.layout = Layout(Path("/sim") / self.member.instance_id)
        self.health = self.site.files.of(self.layout)

    # ----------------------------------------------------------------------------------- boot

    def boot(self, running_at: float) -> None:
        loop = self.site.loop
        t = running_at + self.rng.uniform(5.0, 15.0)  # cloud-init reaches the user data
        failing = self.outcome.step
        for step in BOOT_ORDER:
            if step == "unpack":
                self.boot_started = t
            low, high = STEP_SECONDS[step]
            t += self.rng.uniform(low, high)
            if step == failing:
                loop.at(t, lambda: self._boot_failed(failing))
                return
        loop.at(t, self._units_started)

    def _boot_failed(self, step: str) -> None:
        if self.gone:
            return
        now = self.site.loop.now
        self.broken.append(Broken(now, None, f"boot failed at {step}"))
        for status in self.outcome.signals:
            self.site.signal(self.member, status)
        if self.outcome.unhealthy:
            self.site.set_unhealthy(self.member, "boot")
        elif self.outcome.powered_off:  # stopped: Auto Scaling's next EC2 health check sees it
            self.site.loop.after(STOPPED_NOTICED_SECONDS, self._stopped_noticed)

    def _stopped_noticed(self) -> None:
        if not self.gone:
            self.site.set_unhealthy(self.member, "ec2")

    def _units_started(self) -> None:
        if self.gone:
            return
        now = self.site.loop.now
        self.units_at = now
        if self.outcome.step == "workers":
            self.broken.append(Broken(now, None, f"workers never healthy ({self.worker_fault})"))
            if self.worker_fault == "denied":
                self.partitions.append(("denied", now, float("inf")))
            else:
                self.crash_until = float("inf")
        for unit in self.plan.unit_names():
            self._start_worker(unit.split("@", 1)[1], now)
        self.site.loop.after(1.0, self._start_watchdog)
        self.site.loop.after(2.0, self._wait_for_healthy)

    def _wait_for_healthy(self) -> None:
        if self.gone or self.boot_started is None:
            return
        now = self.site.loop.now
        self.site.advance_workers(self, now)
        fresh = fresh_workers(self.plan, self.layout, self.boot_started, now)
        if len(fresh) == self.plan.worker_processes:
            self._signal_once("SUCCESS")
        elif now >= self.boot_started + self.plan.health_timeout_seconds:
            self._signal_once("FAILURE")
        else:
            self.site.loop.after(2.0, self._wait_for_healthy)

    def _signal_once(self, status: str) -> None:
        """The bootstrap's verdict after its wait; a FAILURE then ends the boot as the real one
        ends a boot whose workers never reported (the outcome table's "workers" row)."""
        self.signalled = status
        self.site.signal(self.member, status)
        if status == "FAILURE" and self.on_timeout is not None and self.on_timeout.unhealthy:
            self.site.set_unhealthy(self.member, "boot")

    # ---------------------------------------------------------------------------------- units

    def _start_worker(self, unit: str, now: float) -> None:
        file = self.health.file(unit)
        worker = WorkerProcess.start(self.host, unit, now, timing=self.site.timing, file=file, rng=self.rng)
        self.workers[unit] = worker
        self.site.worker_started(worker)
        if now < self.crash_until:
            self.site.loop.after(self.rng.uniform(0.5, 3.0), lambda: self._crashed(unit, worker))

    def _crashed(self, unit: str, worker: WorkerProcess) -> None:
        if self.gone or not worker.alive or self.workers.get(unit) is not worker:
            return
        worker.alive = False
        self.site.loop.after(RESTART_SECONDS, lambda: self._restart(unit))

    def _restart(self, unit: str) -> None:
        if self.gone or self.target == "Terminated":
            return
        self.restarts[unit] = self.restarts.get(unit, 0) + 1
        self._start_worker(unit, self.site.loop.now)

    def crash_loop(self, start: float, end: float) -> None:
        """From ``start`` its workers exit soon after each start until ``end``."""

        def begin() -> None:
            if self.gone:
                return
            self.crash_until = end
            self.broken.append(Broken(start, end, "workers crash-looping"))
            for unit, worker in list(self.workers.items()):
                self.site.loop.after(
                    self.rng.uniform(0.0, 2.0), functools.partial(self._crashed, unit, worker)
                )

        self.site.loop.at(start, begin)

    def wedge(self, start: float, end: float) -> None:
        """From ``start`` to ``end`` its workers' taker loops are stuck (their heartbeat rows go on)."""

        def begin() -> None:
            self.broken.append(Broken(start, end, "workers wedged"))
            for worker in self.workers.values():
                worker.wedged = True

        def over() -> None:
            now = self.site.loop.now
            for worker in self.workers.values():
                if worker.wedged:
                    worker.wedged = False
                    worker.next_round = max(worker.next_round, now)

        self.site.loop.at(start, begin)
        self.site.loop.at(end, over)

    def partition(self, kind: str, start: float, end: float) -> None:
        """``kind`` "tables" (its DynamoDB traffic fails) or "host" (its network is gone)."""
        self.partitions.append((kind, start, end))
        self.broken.append(Broken(start, end, f"partitioned ({kind})"))

    def cut_off(self, t: float, what: str) -> bool:
        """Whether ``what`` ("tables", "aws", "metrics") is out of this host's reach at ``t``."""
        for kind, start, end in self.partitions:
            if start <= t < end and (kind == "host" or (what == "tables" and kind in ("tables", "denied"))):
                return True
        return False

    def impaired(self, t: float) -> float | None:
        """Since when EC2's status checks have failed (a host without network), or None."""
        for kind, start, end in self.partitions:
            if kind == "host" and start <= t < end:
                return start
        return None

    def nrestarts(self) -> int:
        return sum(self.restarts.values())

    # ------------------------------------------------------------------------------ watchdog

    def _start_watchdog(self) -> None:
        if self.gone:
            return
        now = self.site.loop.now
        autoscaling, dynamodb, ec2 = self.site.clients(self)
        self.watchdog = build_watchdog(
            replace(self.plan, group_name=self.member.group),
            self.layout,
            autoscaling=autoscaling,
            dynamodb=dynamodb,
            ec2=ec2,
            instance_id=self.member.instance_id,
            host=self.host,
            started=now,
            restarts=self.nrestarts,
            lifecycle_state=lambda: self.target,
            stop=self._stop_units,
            clock=lambda: self.site.loop.now,
        )
        self.watchdog_runs += 1
        self.site.loop.after(self.rng.uniform(0.0, POLL_SECONDS), self._poll)

    def _poll(self) -> None:
        watchdog = self.watchdog
        if self.gone or watchdog is None:
            return
        now = self.site.loop.now
        self.site.advance_workers(self, now)
        said = io.StringIO()
        stdout, sys.stdout = sys.stdout, said
        try:
            going = watchdog.step(now)
        except Exception as exc:  # the process dies; systemd starts it again (Restart=always)
            self.log.append(f"{now:.0f} watchdog exited: {type(exc).__name__}: {exc}")
            self.watchdog = None
            self.site.loop.after(RESTART_SECONDS, self._start_watchdog)
            return
        finally:
            sys.stdout = stdout
            for line in said.getvalue().splitlines():
                self.log.append(f"{now:.0f} {line}")
        if going:
            self.site.loop.after(POLL_SECONDS, self._poll)
        else:
            self.watchdog = None

    def _stop_units(self) -> None:
        """systemctl stop consumer-worker@*: every worker checkpoints and hands its leases on."""
        for worker in self.workers.values():
            worker.stopping = True
        self.site.workers_stopping(self)

    # ---------------------------------------------------------------------------- lifecycle

    def terminating(self) -> None:
        self.target = "Terminated"

    def terminated(self, now: float) -> None:
        self.gone = True
        self.watchdog = None
        for worker in self.workers.values():
            worker.alive = False
        for stretch in self.broken:
            if stretch.end is None or stretch.end > now:
                stretch.end = now
