"""The world bench/discovery_scale.py simulates: the stream's shards as DescribeStream shows them,
the leases table as shard sync sees it, and each worker's place in the fleet's DescribeStream
timetable (when its view of the fleet has settled)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from consumer.api.leases import Lease, Snapshot
from consumer.api.worker import FleetPosition, InMemoryLeaseStore, Shard
from ground.clock import FakeClock
from ground.settings import WorkerSettings

LISTING_LAG_MILLIS = 3_000  # DescribeStream shows a new child up to this late


@dataclass
class SimStream:
    """The stream's shards with their birth and close times; a listing as DescribeStream shows it."""

    rng: random.Random
    shards: dict[str, Shard] = field(default_factory=dict)
    born: dict[str, int] = field(default_factory=dict)
    closes: dict[str, int] = field(default_factory=dict)
    _next: int = 0

    def new_shard(self, parent: str | None, born: int) -> str:
        self._next += 1
        shard_id = f"shardId-{born:020d}-{self._next:08x}"
        self.shards[shard_id] = Shard(shard_id, parent, "1")
        self.born[shard_id] = born
        return shard_id

    def close(self, shard_id: str, at: int) -> None:
        self.shards[shard_id] = Shard(shard_id, self.shards[shard_id].parent_shard_id, "1", str(at))
        self.closes[shard_id] = at

    def listing(self, now: int) -> list[Shard]:
        return [s for sid, s in self.shards.items() if self.born[sid] + LISTING_LAG_MILLIS // 2 <= now]


class SimTable:
    """What shard sync needs of the leases table, for one worker. Creates are stamped with the time
    the call that asked for them went out (``at``, its slot), not the simulation's instant."""

    def __init__(
        self,
        store: InMemoryLeaseStore,
        me: str,
        leader: list[str],
        clock: FakeClock,
        created_at: dict[str, int],
    ) -> None:
        self._store, self._me, self._leader = store, me, leader
        self._clock, self._created_at = clock, created_at
        self.at: int | None = None

    def scan(self) -> Snapshot:
        return self._store.scan()

    def claim_first_start(self) -> bool:
        return False

    def lineage_generation(self) -> int:
        return self._store.lineage_generation()

    def create_leases(self, leases: Sequence[Lease], generation: int | None = None) -> int:
        created = 0
        for lease in leases:
            if self._store.create_if_absent(lease, generation):
                self._created_at[lease.shard_id] = (
                    self.at if self.at is not None else self._clock.monotonic_millis()
                )
                created += 1
        return created

    def delete_finished(self, lease: Lease) -> None:
        self._store.delete_finished(lease)

    def read_lease(self, shard_id: str) -> Lease | None:
        return self._store.get(shard_id)

    def is_sync_leader(self) -> bool:
        return self._me == self._leader[0]


class Fleet:
    """Who stands where in the timetable, and when a worker's view of the fleet is settled: each
    worker registers at its start and reads the workers table every half taker interval; its view
    is who had registered by its last read, and it uses slots once that view held one taker
    interval (LeaseCoordinator.fleet_position's rule)."""

    def __init__(self, names: list[str], starts: dict[str, int], settings: WorkerSettings) -> None:
        self.names = sorted(names)
        self.starts = starts
        self.rounds = max(1, settings.taker_interval_millis // 2)
        self.settle = settings.taker_interval_millis
        last = max(starts.values())
        # Every view is whole from each worker's first read after the last registration.
        self.settled_at = {
            n: starts[n] + math.ceil((last - starts[n]) / self.rounds) * self.rounds + self.settle
            for n in names
        }

    def position(self, name: str, at: int) -> FleetPosition | None:
        if at < self.settled_at[name]:
            return None
        return FleetPosition(self.names.index(name), len(self.names), name == self.names[0])
