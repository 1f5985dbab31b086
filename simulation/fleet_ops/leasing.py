"""How the fleet's leases follow its workers, and what they process: the fleet-level part of the
worker model (simulation/fleet_ops/workers.py has the per-process part).

Every few seconds, as the lease takers of ``consumer/leases`` would over their rounds:

* a worker others see as dead (its heartbeat row older than failover + skew), stopping, or gone
  loses its leases to the others; they take them once their own rounds read the leases table
  (a taker that was cut off itself waits failover + skew more: ``LeaseState.forgiving``); a worker that
  comes back finds them taken at its next full scan (``LostLeases``);
* the live workers even out their counts (at most ``max_leases_to_steal_at_one_time`` a worker a
  round), each up to ``max_leases_for_worker``;
* a worker processes while it holds leases and is not fenced, up to
  ``fleet.records_per_second_per_process`` records a second (the planning figure), over the
  backlog of the leases it holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from simulation.fleet_ops.stream import Stream
from simulation.fleet_ops.workers import WorkerProcess

CATCH_UP_CHECKPOINTS = 3.0  # checkpoints a second of a shard being caught up (catch-up reads)


def balance(
    workers: Sequence[WorkerProcess],
    total: int,
    now: float,
    taking: Callable[[WorkerProcess], bool],
    steal: int,
) -> None:
    """Move leases between ``workers`` (all that hold or may hold some) for the moment ``now``."""
    live = [w for w in workers if w.alive and not w.stopping and w.row_fresh(now)]
    for w in workers:
        if w.leases and w not in live:
            held = w.leases
            w.leases = 0
            if w.alive and not w.stopping:
                w.lost_pending += held
    takers = [w for w in live if w.processing(now) and taking(w)]
    owned = sum(w.leases for w in live)
    if owned > total:  # leases finished and cleaned up: the fullest let theirs go first
        for w in sorted(live, key=lambda x: -x.leases):
            cut = min(w.leases, owned - total)
            w.leases -= cut
            owned -= cut
            if owned <= total:
                break
    if not takers or not live:
        return
    target = min(max(1, math.ceil(total / len(live))), takers[0].timing.cap)
    free = total - owned
    for w in sorted(takers, key=lambda x: x.leases):
        if free <= 0:
            break
        take = min(free, max(0, target - w.leases))
        w.leases += take
        free -= take
    for w in sorted(takers, key=lambda x: x.leases):
        while w.leases < target - 1:
            donor = max(live, key=lambda x: x.leases)
            if donor.leases <= w.leases + 1:
                break
            moved = min(steal, donor.leases - target, target - w.leases)
            if moved <= 0:
                break
            donor.leases -= moved
            w.leases += moved


def process(
    workers: Sequence[WorkerProcess], stream: Stream, now: float, dt: float, per_process: float
) -> float:
    """``dt`` seconds of processing up to ``now``; the records each worker did go to its period."""
    total = max(1, stream.lease_count())
    active = [w for w in workers if w.leases and w.processing(now)]
    capacity = per_process * len(active)
    served = min(1.0, sum(w.leases for w in active) / total)
    lost_before = stream.lost
    done = stream.step(now, dt, capacity, served)
    lag_millis = stream.lag(now) * 1000 + 500
    for w in active:
        w.period.records += done / len(active)
        w.period.lag_millis = max(w.period.lag_millis or 0.0, lag_millis)
    if stream.lost > lost_before and active:
        active[0].period.trimmed += stream.lost - lost_before
    return done


def checkpoint_writes(workers: Sequence[WorkerProcess], stream: Stream, now: float) -> float:
    """Leases-table write units a minute: a checkpoint a second per shard being processed (three
    while catching up), and a lease created per new shard."""
    held = sum(w.leases for w in workers if w.processing(now))
    rate = CATCH_UP_CHECKPOINTS if stream.lag(now) > 10 else 1.0
    return held * rate * 60
