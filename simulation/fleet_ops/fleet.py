"""One history of the deployed fleet: the environment's templates, its groups and instances, its
tables and stream, its alarms and pages, run under one scenario's faults.

Every 5 s the groups act (instances InService, hooks, replacements, launches), each worker's
rounds and puts are brought up to date, the leases follow the live workers and the fleet processes
what it can (:mod:`simulation.fleet_ops.leasing`); every instance's watchdog steps on its own 5 s
rhythm. Every minute the tables plan their capacity, the workers flush their metrics, DynamoDB and
Auto Scaling publish theirs, the follow jobs report, the alarms are evaluated and act, and the bill
runs. The record the checker reads is this object itself.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any

from consumer.leases.items import lease_to_item
from consumer.leases.model import ExtendedSequenceNumber, Lease
from simulation.fleet_ops.alarms import AlarmBook, AlarmSpec, MetricStore
from simulation.fleet_ops.aws_clients import FakeAutoScaling, FakeDynamoDB, FakeEC2
from simulation.fleet_ops.clock import WALL0, Loop
from simulation.fleet_ops.cost import Bill
from simulation.fleet_ops.environment import Environment, Sample
from simulation.fleet_ops.group import Group, Member
from simulation.fleet_ops.heartbeat_files import Filesystem, standing_in
from simulation.fleet_ops.instance import Machine
from simulation.fleet_ops.leasing import balance, process
from simulation.fleet_ops.minutes import publish_minute, ship_period
from simulation.fleet_ops.pipeline_jobs import Follow, Pager
from simulation.fleet_ops.scenarios import Scenario
from simulation.fleet_ops.stack import Stack
from simulation.fleet_ops.stream import Stream
from simulation.fleet_ops.tables import Table, table_scaling
from simulation.fleet_ops.workers import Timing, WorkerProcess

TICK = 10.0  # the groups, the leases' moves and the processing (each watchdog keeps its own 5 s)
CONFIRM_WITHIN = 1_200.0  # the on-call person confirms the subscription within 20 minutes
RECONFIRM_WITHIN = 12 * 3_600.0  # ... and a subscription created again, once somebody notices
RETIRED_AFTER = 100.0  # a dead worker's row is removed by the others after this


class Fleet:
    def __init__(self, environment: Environment, scenario: Scenario) -> None:
        self.environment = environment
        self.scenario = scenario
        self.settings = settings = environment.settings
        templates = environment.templates
        seed = scenario.seed
        self.rng = random.Random(f"fleet-{seed}")
        self.loop = Loop(random.Random(f"loop-{seed}"))
        self.timing = Timing.of(settings)
        self.files = Filesystem()
        self.plan = templates.plan
        budget = settings.worker.lease_call_budget_millis / 1000
        tables = {
            t["Properties"]["TableName"]: t["Properties"]
            for t in templates.of_type("AWS::DynamoDB::Table").values()
        }

        def table(role: str, name: str) -> Table:
            throughput = tables.get(name, {}).get("ProvisionedThroughput")
            units = (
                (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"])
                if throughput
                else (None, None)
            )
            made = Table(role, name, units[0], units[1], read_timeout=budget / 5)
            made.scaling = table_scaling(templates, name)
            return made

        self.leases_table = table("leases", settings.leases_table_name)
        self.workers_table = table("workers", settings.workers_table_name)
        for outage in scenario.outages:
            moved = type(outage)(
                outage.table,
                outage.kind,
                WALL0 + outage.start,
                WALL0 + outage.end,
                outage.rate,
                outage.latency,
            )
            (self.leases_table if outage.table == "leases" else self.workers_table).outages.append(moved)
        fleet = settings.fleet
        self.per_process = fleet.records_per_second_per_process
        per_instance = fleet.worker_processes_per_instance * self.per_process
        base = scenario.load_share * fleet.min_instances * per_instance
        if scenario.peak_share is not None:
            base = scenario.peak_share * fleet.max_instances * per_instance / 10
        self.stream = Stream(
            settings.table.expected_partitions()[0],
            base,
            random.Random(f"stream-{seed}"),
            WALL0,
            settings.worker.cleanup_delay_millis / 1000,
            settings.worker.shard_sync_interval_millis / 1000,
            profile=[(WALL0 + at, factor) for at, factor in scenario.profile],
            next_rollover=0.0 if scenario.first_rollover is None else WALL0 + scenario.first_rollover,
        )
        self.store = MetricStore()
        self.alarms = AlarmBook(environment.alarms, self.store, self._notify, self._invoke)
        self.pager = Pager.from_templates(templates, random.Random(f"pager-{seed}"))
        follow = Follow.from_templates(
            templates,
            settings.pipeline.freshness_seconds,
            settings.metrics_namespace,
            settings.table.name,
            random.Random(f"follow-{seed}"),
        )
        self.follow = follow
        if follow is not None:
            follow.release_at = WALL0 + scenario.release_after
            follow.failing = [(WALL0 + a, WALL0 + b) for a, b in scenario.follow_failing]
        (_, launch), (group_logical, group_resource) = (
            templates.one("AWS::EC2::LaunchTemplate"),
            templates.one("AWS::AutoScaling::AutoScalingGroup"),
        )
        self.group_logical = group_logical
        self.group_props = group_resource["Properties"]
        self.bill = Bill(templates, launch["Properties"]["InstanceType"], 20, environment.totals)
        destination = settings.processing.options.get("destination") if settings.processing.options else None
        self.change_log = isinstance(destination, str) and destination.startswith("s3://")
        self.stack = Stack(templates, self._new_group, self._fleet_stack_created, self.alarms.group_created)
        self.machines: dict[str, Machine] = {}
        self.by_host: dict[str, Machine] = {}
        self.workers: list[WorkerProcess] = []
        self.version_failures: dict[int, tuple[str, str]] = {}
        self.samples: list[Sample] = []
        self.processed_minute = 0.0
        self.lost_before = 0.0
        self.live_count = 0  # workers whose heartbeat row is fresh, as of the last tick
        self.free_since: float | None = None  # leases free while a live worker had room, since

    # ------------------------------------------------------------------------- the history

    def run(self) -> Fleet:
        with standing_in(self.files):
            self.start()
            self.loop.run_until(WALL0 + self.scenario.duration)
        return self

    def start(self) -> None:
        """The first deploy and every scheduled event of the scenario (run them with the loop,
        inside :func:`standing_in`)."""
        loop, s = self.loop, self.scenario
        self.pager.created("data", WALL0, CONFIRM_WITHIN)
        self.stack.create(WALL0)
        loop.every(TICK, self._tick, phase=TICK)
        loop.every(60.0, self._minute, phase=60.0)
        for fault in s.instance_faults:
            loop.at(WALL0 + fault.start, functools.partial(self._instance_fault, fault))
        if s.zone_loss is not None:
            zone, start, end = s.zone_loss
            loop.at(WALL0 + start, lambda: self._zone(zone, WALL0 + end, lost=True))
            loop.at(WALL0 + end, lambda: self._zone(zone, WALL0 + end, lost=False))
        for at, step, cause in s.deploys:
            loop.at(WALL0 + at, functools.partial(self._deploy, step, cause))
        if s.replace_at is not None:
            loop.at(WALL0 + s.replace_at, self._replace)

    def _replace(self) -> None:
        self.stack.replace(self.loop.now)

    def _fleet_stack_created(self, now: float) -> None:
        self.alarms.create(now)
        self.pager.created("fleet", now, CONFIRM_WITHIN if now == WALL0 else RECONFIRM_WITHIN)
        if self.follow is not None:
            self.follow.created(now)

    def _deploy(self, step: str | None, cause: str) -> None:
        operation = self.stack.deploy(self.loop.now)
        if operation is not None and step is not None:
            self.version_failures[operation.version] = (step, cause)

    def _zone(self, zone: str, end: float, lost: bool) -> None:
        for group in self.stack.groups:
            (group.lost_zones.add if lost else group.lost_zones.discard)(zone)
        if lost:
            for machine in self.machines.values():
                if machine.member.zone == zone and not machine.gone:
                    machine.partition("host", self.loop.now, end)

    def _instance_fault(self, fault: Any) -> None:
        group = self.stack.current
        if group is None:
            return
        serving = sorted((m for m in group.serving()), key=lambda m: m.instance_id)
        if not serving:
            return
        machine = self.machines[serving[min(len(serving) - 1, int(fault.pick * len(serving)))].instance_id]
        start, end = WALL0 + fault.start, WALL0 + fault.end
        if fault.kind == "crash":
            machine.crash_loop(start, end)
        elif fault.kind == "wedge":
            machine.wedge(start, end)
        elif fault.kind in ("tables", "host"):
            machine.partition(fault.kind, start, end)
        elif fault.kind == "lost":  # EC2 lost the instance (its host failed): status checks fail
            machine.partition("host", start, math.inf)

    # -------------------------------------------------------------------------- groups

    def _new_group(self, name: str, version: int) -> Group:
        props = self.group_props
        hook = props["LifecycleHookSpecificationList"][0]
        rng = random.Random(f"{name}-{self.scenario.seed}")

        def launched(member: Member) -> None:
            failing = self.version_failures.get(version)
            if failing is None:
                for start, end, failing_step, why in self.scenario.boot_faults:
                    if WALL0 + start <= self.loop.now < WALL0 + end:
                        failing = (failing_step, why)
            step: str | None = None
            cause = ""
            if failing is not None:
                step, cause = failing
            machine = Machine(
                self,
                member,
                self.plan,
                self.environment.outcomes[step],
                random.Random(rng.random()),
                worker_fault=cause or None,
                on_timeout=self.environment.outcomes["workers"],
            )
            self.machines[member.instance_id] = machine
            self.by_host[machine.host] = machine
            machine.boot(member.running_at)

        return Group(
            name,
            int(props["MinSize"]),
            int(props["MaxSize"]),
            float(hook["HeartbeatTimeout"]),
            rng,
            on_launch=launched,
            on_terminating=lambda m: self.machines[m.instance_id].terminating(),
            on_terminated=lambda m: self.machines[m.instance_id].terminated(self.loop.now),
            running_after=lambda: rng.uniform(25.0, 50.0),
        )

    def _group_of(self, name: str) -> Group | None:
        return next((g for g in self.stack.groups if g.name == name), None)

    # ----------------------------------------------------------- Site (what instances need)

    def signal(self, member: Member, status: str) -> None:
        self.stack.signal(member, status, self.loop.now)

    def set_unhealthy(self, member: Member, by: str) -> None:
        group = self._group_of(member.group)
        if group is not None:
            group.set_unhealthy(member, self.loop.now, by)

    def clients(self, machine: Machine) -> tuple[Any, Any, Any]:
        fleet = self

        class Groups:
            def describe(self, name: str) -> list[dict[str, str]]:
                group = fleet._group_of(name)
                return [] if group is None else group.describe()

            def set_unhealthy(self, instance_id: str) -> None:
                fleet.set_unhealthy(fleet.machines[instance_id].member, "watchdog")

            def complete_hook(self, group_name: str, instance_id: str, hook: str) -> None:
                group = fleet._group_of(group_name)
                if group is not None:
                    group.complete_hook(fleet.machines[instance_id].member, fleet.loop.now)

        autoscaling = FakeAutoScaling(Groups(), lambda: not machine.cut_off(self.loop.now, "aws"))
        dynamodb = FakeDynamoDB(
            {t.name: t for t in (self.leases_table, self.workers_table)},
            self._rows,
            lambda: self.loop.now,
            lambda: not machine.cut_off(self.loop.now, "tables"),
            random.Random(machine.rng.random()),
        )
        ec2 = FakeEC2(
            lambda instance_id: (
                (m.host, m.member.launched_at) if (m := self.machines.get(instance_id)) is not None else None
            ),
            lambda: not machine.cut_off(self.loop.now, "aws"),
        )
        return autoscaling, dynamodb, ec2

    def _rows(self, role: str) -> list[dict[str, Any]]:
        if role == "leases":
            lease = Lease(
                "shardId-00000001700000000000-00000001", None, 1, ExtendedSequenceNumber("TRIM_HORIZON")
            )
            return [lease_to_item(lease)]
        now = self.loop.now
        return [w.item() for w in self.workers if w.row is not None and now - w.row["at"] <= RETIRED_AFTER]

    def advance_workers(self, machine: Machine, t: float) -> None:
        for worker in machine.workers.values():
            worker.advance(t, self)

    def worker_started(self, worker: WorkerProcess) -> None:
        worker.on_scan = lambda at, w=worker: self._scanned(w)
        self.workers.append(worker)

    def _scanned(self, worker: WorkerProcess) -> None:
        worker.live_seen = self.live_count

    def workers_stopping(self, machine: Machine) -> None:
        for worker in machine.workers.values():
            self.loop.after(self.rng.uniform(1.0, 3.0), functools.partial(self._exited, worker))

    def _exited(self, worker: WorkerProcess) -> None:
        if worker.alive:  # a graceful stop ships the last period (MetricsRecorder.stop)
            ship_period(self, worker, self.loop.now, leader=False)
        worker.alive = False

    # ------------------------------------------------ Surroundings (what workers' calls meet)

    def minute(self, t: float) -> int:
        return int((t - WALL0) // 60)

    def reaches_tables(self, host: str, t: float) -> bool:
        return not self.by_host[host].cut_off(t, "tables")

    def calm(self, host: str, t0: float, t1: float) -> bool:
        machine = self.by_host[host]
        if machine.partitions and any(start < t1 and end > t0 for _, start, end in machine.partitions):
            return False
        return self.leases_table.calm(t0, t1, WALL0) and self.workers_table.calm(t0, t1, WALL0, writes=True)

    def lease_count(self) -> float:
        return float(self.stream.lease_count())

    # ------------------------------------------------------------------------ the rhythms

    def _tick(self) -> None:
        now = self.loop.now
        self.stack.tick(now)
        for group in self.stack.groups:
            group.tick(now)
        for machine in self.machines.values():
            since = machine.impaired(now)
            if since is not None and not machine.gone and now - since >= machine.impaired_after:
                self.set_unhealthy(machine.member, "ec2")
        alive = [w for w in self.workers if w.alive]
        for worker in alive:
            worker.advance(now, self)
        self.live_count = sum(1 for w in alive if w.row_fresh(now))
        holders = [w for w in self.workers if w.alive or w.leases]
        balance(
            holders,
            self.stream.lease_count(),
            now,
            lambda w: (
                self.leases_table.write_lands(now, self.minute(now), self.rng)
                and w.last_full is not None
                and now - w.last_full <= self.timing.full_scan + self.timing.taker
                and not self.by_host[w.host].cut_off(now, "tables")
            ),
            self.settings.worker.max_leases_to_steal_at_one_time,
        )
        live = [w for w in alive if w.row_fresh(now) and not w.stopping]
        free = self.stream.lease_count() - sum(w.leases for w in live)
        room = any(w.leases < self.timing.cap for w in live)
        self.free_since = (self.free_since or now) if free > 0 and room else None
        self.processed_minute += process(alive, self.stream, now, TICK, self.per_process)
        self.workers = [
            w for w in self.workers if w.alive or w.leases or (w.row and now - w.row["at"] <= RETIRED_AFTER)
        ]

    def _minute(self) -> None:
        publish_minute(self)

    # ------------------------------------------------------------------------ alarm actions

    def _notify(self, topic: str, alarm: AlarmSpec, now: float, names: str) -> None:
        self.pager.publish(topic, alarm.name, now, names)

    def _invoke(self, policy: str, alarm: AlarmSpec, now: float) -> None:
        group = self.stack.current
        if group is None:
            return
        props = self.environment.templates.resources[policy]["Properties"]
        group.scale(int(props["ScalingAdjustment"]), float(props.get("Cooldown", 0)), now, alarm.name)
