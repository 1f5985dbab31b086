"""The table's stream at the fleet's scale: N open shards, rollovers, the load and the backlog.

* **Shards and leases.** N partitions, each writing to one open shard; every ~4 hours the shards
  roll over (docs/streams.md: the stream briefly has about 2N shards), the partitions within a few
  minutes of each other. A parent's lease stays until the fleet has processed the parent's last
  record, then shard sync removes it (``cleanup_delay``: three failover times, then at the next
  sync). So the leases table holds N leases, and N more from each rollover until the fleet has
  caught up past it: what the 2N scale-out alarm reads.
* **Records.** The load (records/s) follows the history's profile. The fleet processes what its
  processing workers can (``fleet.records_per_second_per_process`` each, the planning figure) of
  the backlog on the shards they hold; shards whose owner is fenced, dead or cut off wait. The lag
  is the age of the oldest record not processed (the backlog kept oldest first); records older than
  the stream's 24 h are trimmed and lost.

The shard-level data path (order, lineage, checkpoints, hand-overs) is not modelled here: the real
worker runs it in simulation/world.py (the slices of simulation/fleet_ops/slices.py).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

RETENTION = 24 * 3600.0
ROLLOVER_EVERY = 4 * 3600.0
ROLLOVER_SPREAD = 300.0  # the partitions roll over within this of each other


@dataclass
class Rollover:
    at: float  # the last partition's parent closed (the partitions' spread is folded into it)
    shards: int
    finished_at: float | None = None
    cleanup_due: float | None = None
    cleaned_at: float | None = None


@dataclass
class Stream:
    open_shards: int
    base_load: float  # records per second
    rng: random.Random
    start: float
    cleanup: float  # seconds a finished parent's lease waits (3 failovers) before the next sync
    sync_interval: float
    profile: list[tuple[float, float]] = field(default_factory=list)  # (from time, load factor)
    rollovers: list[Rollover] = field(default_factory=list)
    next_rollover: float = 0.0
    backlog: float = 0.0
    # The records not processed yet, oldest first: (when written, how many) per step.
    waiting: deque[list[float]] = field(default_factory=deque)
    lost: float = 0.0
    processed: float = 0.0
    written: float = 0.0

    def __post_init__(self) -> None:
        if not self.next_rollover:
            self.next_rollover = self.start + self.rng.uniform(0.1, 1.0) * ROLLOVER_EVERY

    def load(self, t: float) -> float:
        factor = 1.0
        for since, value in self.profile:
            if since <= t:
                factor = value
        return self.base_load * factor

    def lag(self, t: float) -> float:
        """Age in seconds of the oldest record not processed."""
        return t - self.waiting[0][0] if self.waiting else 0.0

    def lease_count(self) -> int:
        extra = sum(r.shards for r in self.rollovers if r.cleaned_at is None)
        return self.open_shards + extra

    def step(self, t: float, dt: float, capacity: float, served_share: float) -> float:
        """``dt`` seconds up to ``t``: records arrive; the fleet processes up to ``capacity`` records/s
        of the backlog on the ``served_share`` of leases whose owners process. Returns the records
        processed."""
        if t >= self.next_rollover:
            self.rollovers.append(Rollover(self.next_rollover, self.open_shards))
            self.next_rollover += ROLLOVER_EVERY * self.rng.uniform(0.9, 1.1)
        arriving = self.load(t) * dt
        self.written += arriving
        self.backlog += arriving
        self.waiting.append([t - dt / 2, arriving])
        done = min(capacity * dt, served_share * self.backlog)
        self.backlog -= done
        self.processed += done
        left = done
        while left > 0 and self.waiting:  # oldest first (each shard's records in order)
            chunk = self.waiting[0]
            taken = min(left, chunk[1])
            chunk[1] -= taken
            left -= taken
            if chunk[1] <= 1e-9:
                self.waiting.popleft()
        while self.waiting and t - self.waiting[0][0] > RETENTION:
            trimmed = self.waiting.popleft()[1]
            self.lost += trimmed
            self.backlog -= trimmed
        through = self.waiting[0][0] if self.waiting else t
        for rollover in self.rollovers:
            if rollover.finished_at is None and through >= rollover.at:
                rollover.finished_at = t
                rollover.cleanup_due = t + self.cleanup + self.rng.uniform(0, self.sync_interval)
            if rollover.cleanup_due is not None and rollover.cleaned_at is None and t >= rollover.cleanup_due:
                rollover.cleaned_at = t
        self.rollovers = [r for r in self.rollovers if r.cleaned_at is None or t - r.cleaned_at < 60]
        return done
