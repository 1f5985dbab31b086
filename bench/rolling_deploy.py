"""A deploy of a new version: the worker group replaced, as the stack's update policy does it.

infra/fleet.py gives the group ``AutoScalingReplacingUpdate``: a change to the launch template makes
CloudFormation create a new group of ``fleet.min_instances`` beside the old one, wait for every new
instance's signal, then delete the old group, whose instances all terminate together. (The module
keeps the name of issue 33's figures; the group used to be updated instance by instance.)

Method: ``consumer run`` processes on the emulator grouped into instances (bench/instances.py's set-
up: heartbeat files and each instance's real :class:`deploy.watchdog.Watchdog`; Auto Scaling is a
stand-in). A writer keeps writing round-robin over one key per partition. Then:

1. launch: as many new instances as the fleet has, with the same units (``consumer run`` with its
   heartbeat file); each one's signal is the bootstrap's own wait
   (:func:`deploy.health.wait_for_healthy`: every worker completed a lease-taking round). The new
   workers join the fleet at once and take their share of the leases beside the old ones;
2. delete the old group once every new instance signalled: every old instance's lifecycle state
   turns ``Terminated`` at the same moment; each watchdog stops its units (SIGTERM to each at once,
   as ``systemctl stop consumer-worker@*``), each drains, checkpoints and hands its leases to a
   worker of the new group, and the watchdog completes the lifecycle action.

Figures, over the whole deploy:

- duplicates: a (shard, sequence number) delivered to a processor twice (goal 0);
- the pause: for every shard whose owner changed, from the moment its old owner stopped processing
  it (its consumer's ``PROCESSING -> SHUTTING_DOWN``) to its first delivery by the new one; the
  longest, over the taker interval (goal <= 1; a record is written to each shard every
  ``partitions / writes_per_second`` s, which the figure includes). The gap between the two owners'
  deliveries is shown beside it;
- the update policy against what it waits for: each launch's time to its signal against the
  policy's signal timeout, each drain against the lifecycle hook's heartbeat timeout (systemd's stop
  timeout is a little shorter: a drain cut short is SIGKILL), and how long after the old group's
  deletion the fleet was balanced again.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import statistics
import threading
import time
from dataclasses import dataclass

from bench.common import Ratio, at_most
from bench.fleet_load import spread
from bench.fleet_support import Stack, bench_stack, drain_lost, lost_writes_ratio
from bench.instances import Instance, ListeningWatchdog, StandInGroup, booted, start_instances
from deploy.health import HealthJudge, wait_for_healthy
from ground.settings import FleetSettings

INSTANCES = 3
PROCESSES = 2
PARTITIONS = 24
FAILOVER_MILLIS = 6_000
WRITES_PER_SECOND = 72
# Deploys per run: one deploy's longest pause swung 0.90-1.44 on a quiet machine, so the row is a median.
ROUNDS = int(os.environ.get("ROLLING_DEPLOY_ROUNDS", "5"))
LIMITS = (
    "a move's pause is the old owner's release, the receiver's next taker round and its consumer's start; "
    "the slowest are shards moved twice: the old group's stoppers deal from leases tables read a moment "
    "apart while each other's hand-overs land, so a new worker is handed more than its share, adopts it "
    "and sheds the surplus, which waits for another worker's round (2.5 s, 1.25 taker intervals, in one "
    "of five deploys on 12 worker processes, the emulator and the writer sharing 2 cores)"
)


@dataclass
class Replacement:
    old: str
    new: str
    launched: float
    signalled: float  # seconds from launch to the new instance's signal
    drained: float  # seconds from the lifecycle hook to every old unit's exit
    balanced: float  # seconds from the terminate's end until the fleet was balanced again
    exit_codes: list[int]


def launch_group(stack: Stack, fleet: list[Instance], first_index: int) -> list[tuple[Instance, float]]:
    """The new group: as many instances as ``fleet``, started together; each with the seconds until
    its signal."""
    max_age = fleet[0].plan.heartbeat_max_age_seconds
    started = time.time()
    instances = start_instances(stack, len(fleet), PROCESSES, max_age, first_index=first_index)
    signalled: list[tuple[Instance, float]] = []
    for instance in instances:
        plan = dataclasses.replace(instance.plan, health_timeout_seconds=120)
        if not wait_for_healthy(plan, instance.layout, started - 1, sleep=time.sleep):
            raise RuntimeError(f"{instance.name} never signalled; logs in {stack.workdir}")
        signalled.append((instance, time.time() - started))
    return signalled


def terminate(stack: Stack, instance: Instance, group: StandInGroup) -> tuple[float, list[int]]:
    """The lifecycle hook: the old instance's real watchdog stops its units and completes the action."""
    codes: list[int] = []

    def stop_units() -> None:  # systemctl stop consumer-worker@*: every unit at once, waited for
        threads = [
            threading.Thread(target=lambda name=name: codes.append(stack.fleet.terminate(name, timeout=120)))
            for name in instance.workers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    watchdog = ListeningWatchdog(
        instance.plan,
        instance.layout,
        group,
        instance.name,
        HealthJudge(instance.plan, started=time.time(), grace_seconds=3600),
        lifecycle_state=lambda: "Terminated",
        stop=stop_units,
    )
    watchdog.heard = []
    began = time.time()
    assert watchdog.step(time.time()) is False  # handed over: the watchdog exits
    return time.time() - began, codes


def owner_changes(stack: Stack, since: float) -> tuple[list[float], list[float], list[str]]:
    """For every change of a shard's processor after ``since``: the pause, from the moment the old
    owner stopped processing it (its consumer's ``PROCESSING -> SHUTTING_DOWN``, or its last delivery
    when that came later) to the new owner's first delivery; and the raw gap between the two owners'
    deliveries (which also holds the write load's own spacing before the stop)."""
    pid_of = {process.pid: name for name, process in stack.fleet.workers.items()}
    stops: dict[tuple[str, str], list[float]] = {}
    for name in stack.fleet.workers:
        for at, message in stack.log_times(name, "PROCESSING -> SHUTTING_DOWN"):
            shard = message.split()[1].rstrip(":")
            stops.setdefault((name, shard), []).append(at)
    by_shard: dict[str, list[tuple[float, int]]] = {}
    for d in stack.deliveries.all:
        by_shard.setdefault(d.shard, []).append((d.arrived, d.pid))
    pauses: list[float] = []
    gaps: list[float] = []
    moves: list[tuple[float, str, str, str, float, float]] = []
    for shard, arrivals in by_shard.items():
        arrivals.sort()
        for (before, old), (after, new) in itertools.pairwise(arrivals):
            if new == old or after <= since:
                continue
            stopped = [t for t in stops.get((pid_of.get(old, ""), shard), []) if before - 1 <= t <= after]
            pause = after - max([before, *stopped])
            pauses.append(pause)
            gaps.append(after - before)
            moves.append((pause, shard, pid_of.get(old) or "?", pid_of.get(new) or "?", after - pause, after))
    slowest = sorted(moves, reverse=True)[:3]
    return pauses, gaps, [_timeline(stack, since, *move) for move in slowest]


def _timeline(
    stack: Stack, since: float, pause: float, shard: str, old: str, new: str, stopped: float, first: float
) -> str:
    """One move, step by step: when the old owner let the lease go, when the new one held it, when it
    began processing, each in seconds after the old owner stopped processing the shard."""

    def first_after(worker: str, contains: str) -> str:
        times = [at for at, _ in stack.log_times(worker, contains) if stopped - 1 <= at <= first]
        return f"{min(times) - stopped:+.2f}" if times else "-"

    released = first_after(old, f"released lease {shard}")
    held = first_after(new, f"re-adopted {shard}")
    if held == "-":
        held = first_after(new, f"took lease {shard}")
    processing = first_after(new, f"{shard}: INITIALIZING -> PROCESSING")
    return (
        f"{shard[-8:]} {old} -> {new} {pause:.2f} s at +{first - since:.1f} s "
        f"(released {released}, held {held}, processing {processing}, delivered {first - stopped:+.2f})"
    )


def run() -> list[Ratio]:
    print(__doc__)
    rounds = []
    for round_number in range(1, ROUNDS + 1):
        print(f"deploy {round_number} of {ROUNDS}", flush=True)
        rounds.append(deploy())
    return [_over_rounds(same) for same in zip(*rounds, strict=True)]


def _over_rounds(same: tuple[Ratio, ...]) -> Ratio:
    """One row from every deploy's: the median against the goal, and a count goal (0 duplicates, 0
    lost) held in every deploy."""
    values = tuple(value for ratio in same for value in ratio.values)
    limit = float(same[0].goal.removeprefix("<="))
    ok = max(values) <= limit if limit == 0 else statistics.median(values) <= limit
    return Ratio(same[0].name, values, same[0].goal, ok, f"{same[0].method}; {len(same)} deploys")


def deploy() -> list[Ratio]:
    """One deploy of the whole group on a fresh emulator stack, its figures as one-value rows."""
    worker = {
        "failover_time_millis": FAILOVER_MILLIS,
        "max_clock_skew_millis": 100,
        "idle_time_between_reads_millis": 200,
        "parent_shard_poll_interval_millis": 500,
        "shard_sync_interval_millis": 10_000,
        "task_backoff_time_millis": 100,
    }
    fleet_settings = FleetSettings()
    with bench_stack("rolling-deploy", partitions=PARTITIONS, worker=worker) as stack:
        taker = stack.taker_millis / 1000
        began = time.time()
        fleet = start_instances(stack, INSTANCES, PROCESSES, max(2, 4 * FAILOVER_MILLIS // 1000))
        booted(stack, fleet, began)
        stack.wait_balanced(120, PARTITIONS)
        group = StandInGroup([i.name for i in fleet])
        writer = stack.writer(WRITES_PER_SECOND, threads=2).start()
        replacements: list[Replacement] = []
        try:
            time.sleep(3 * taker)
            stack.deliveries.poll()
            deploy_began = time.time()
            launched = time.time()
            new_group = launch_group(stack, fleet, INSTANCES)
            group.instance_ids.extend(instance.name for instance, _ in new_group)
            # Every new instance signalled: CloudFormation deletes the old group, all of it at once.
            ended_at: dict[str, tuple[float, list[int]]] = {}

            def retire(old: Instance) -> None:
                ended_at[old.name] = terminate(stack, old, group)

            retiring = [threading.Thread(target=retire, args=(old,)) for old in fleet]
            for thread in retiring:
                thread.start()
            for thread in retiring:
                thread.join()
            ended = time.time()
            stack.wait_balanced(120, PARTITIONS)
            balanced = time.time() - ended
            for (old, (drained, codes)), (new, signalled) in zip(
                sorted((name, ended_at[name]) for name in ended_at), new_group, strict=True
            ):
                replacements.append(Replacement(old, new.name, launched, signalled, drained, balanced, codes))
                print(
                    f"  {old} -> {new.name}: signal after {signalled:.1f} s, drain {drained:.1f} s "
                    f"(exit codes {codes}), balanced {balanced:.1f} s after the old group's deletion",
                    flush=True,
                )
            time.sleep(3 * taker)
        finally:
            writer.stop()
        lost = drain_lost(stack, writer, timeout_seconds=60)
        stack.deliveries.poll()
        seen: set[tuple[str, str]] = set()
        duplicates = 0
        for d in stack.deliveries.all:
            duplicates += (d.shard, d.seq) in seen
            seen.add((d.shard, d.seq))
        pauses, gaps, slowest = owner_changes(stack, deploy_began)
        problems = stack.problems()
        settings = stack.settings

    hook = settings.fleet.lifecycle_hook_timeout_seconds
    if any(code != 0 for r in replacements for code in r.exit_codes):
        raise RuntimeError(f"a unit did not stop cleanly: {[r.exit_codes for r in replacements]}")
    print(
        f"{len(replacements)} instances replaced; {len(stack.deliveries.all)} deliveries, {duplicates} twice, "
        f"{len(lost)} lost; {len(pauses)} shard moves, pause per move (s): {spread(pauses)} (between the two "
        f"owners' deliveries: {spread(gaps)}); per-shard write interval {PARTITIONS / WRITES_PER_SECOND:.2f} s; "
        f"taker interval {taker:g} s"
    )
    print(
        "each new instance signalled "
        f"{spread([r.signalled for r in replacements], '{:.1f}')} s after its launch (the update policy waits "
        "up to 20 minutes for it, infra/user_data.py; on AWS the boot, dnf and the virtualenv add minutes); a "
        f"drain took {spread([r.drained for r in replacements], '{:.1f}')} s (the lifecycle hook gives {hook} s); the fleet was balanced {spread([r.balanced for r in replacements], '{:.1f}')} s "
        f"after the old group's deletion (default lifecycle_hook_timeout_seconds {fleet_settings.lifecycle_hook_timeout_seconds} s)"
    )
    print(f"slowest moves: {slowest}")
    if problems:
        print(f"ERROR lines in worker logs ({len(problems)}): {problems[:5]}")
    method = (
        f"{INSTANCES} instances x {PROCESSES} consumer run processes on the emulator, {PARTITIONS} shards, "
        f"{WRITES_PER_SECOND} writes/s, failover {FAILOVER_MILLIS} ms"
        "; the group replaced (new instances launched together and signalled, then every old one's "
        "lifecycle hook, SIGTERM and drain at once)"
    )
    return [
        at_most("rolling_deploy_duplicates", (float(duplicates),), 0, method + "; records delivered twice"),
        at_most(
            "rolling_deploy_pause_over_taker_interval",
            (max(pauses) / taker,),
            1,
            method
            + f"; longest pause of a shard: its old owner stopped processing it -> its new owner's first "
            f"delivery ({len(pauses)} moves), over the taker interval",
        ),
        Ratio(
            "rolling_deploy_drain_over_lifecycle_hook",
            (max(r.drained for r in replacements) / hook,),
            "<=1",
            max(r.drained for r in replacements) <= hook,
            method + f"; longest drain over the lifecycle hook's heartbeat timeout ({hook} s)",
        ),
        lost_writes_ratio("rolling_deploy_lost_writes", lost),
    ]
