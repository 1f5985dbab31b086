"""What the leases table costs: DynamoDB's capacity rules applied to the requests a store makes.

:class:`MeteredStore` wraps any :class:`~consumer.leases.store.LeaseStore` and charges each request
as DynamoDB would: a write costs ⌈item KB⌉ write units (the larger of the item before and after); an
eventually consistent Scan costs 0.5 read units per 4 KB of all items it reads, a strongly consistent
GetItem 1 unit per 4 KB. :func:`kcl_units_per_second` is the Java KCL's steady state for the same
settings, from its documented timers:

- writes/s = L / (failover/3)            every held lease renewed every failover/3 (minus ε)
- reads/s  = M × scan(L) / (2 × failover) every worker's taker scans the table every 2 × (failover + ε)

with L leases of ``lease_bytes`` each and M workers. Checkpoint writes are the same for both designs
and are left out of both sides of the comparison. :func:`design_units_per_second` is this design's:

- writes/s = M × ⌈heartbeat bytes / 1 KB⌉ / renewal_interval      one heartbeat row per worker
- reads/s  = M × scan(L + M heartbeat rows) / taker_interval       every worker scans every failover/3

So writes fall from one per lease to one per worker (≈ M/L of KCL's), and reads rise by
2 × failover / taker_interval (6 × with the defaults). Reads cannot reach KCL's while failover stays
within 1.5 × failover: someone must look at a dead worker's liveness within failover/2 − skew of its
expiry, and the cheapest look (one eventually consistent read, 0.5 unit) every failover/2 by each of
two workers already costs more than KCL's two scans of a small table every 2 × failover. What this
design buys is the total: :func:`compare` gives both and the provisioned-price ratio (a write unit
costs 5 read units).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from consumer.leases.model import (
    ExtendedSequenceNumber,
    HandOverRequest,
    Heartbeat,
    Lease,
    Snapshot,
    heartbeat_to_item,
    lease_to_item,
)
from consumer.leases.store import LeaseStore
from consumer.settings import WorkerSettings

# Provisioned capacity: a write unit costs 5 x a read unit (us-east-1 list prices, also eu-west-1).
WRITE_UNIT_PRICE_IN_READ_UNITS = 5.0


def item_bytes(item: dict[str, dict[str, object]]) -> int:
    """DynamoDB's item size: attribute names plus values (strings and number digits, sets summed)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        ((kind, raw),) = value.items()
        if kind in ("SS", "NS") and isinstance(raw, list):
            size += sum(len(str(v).encode()) for v in raw)
        else:
            size += len(str(raw).encode())
    return size


def lease_size(lease: Lease) -> int:
    return item_bytes(lease_to_item(lease))


def scan_units(total_bytes: int) -> float:
    return max(1, math.ceil(total_bytes / 4096)) * 0.5


def write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


@dataclass
class Meter:
    read_units: float = 0.0
    write_units: float = 0.0
    scans: int = 0
    writes: int = 0


class MeteredStore:
    """A store that charges every request with DynamoDB's rules (see the module docstring)."""

    def __init__(self, inner: LeaseStore) -> None:
        self.inner = inner
        self.meter = Meter()

    def _write(self, size: int) -> None:
        self.meter.write_units += write_units(size)
        self.meter.writes += 1

    def scan(self) -> Snapshot:
        snapshot = self.inner.scan()
        leases = sum(lease_size(lease) for lease in snapshot.leases.values())
        beats = sum(item_bytes(heartbeat_to_item(beat)) for beat in snapshot.heartbeats.values())
        self.meter.read_units += scan_units(leases) + scan_units(beats)  # one Scan of each table
        self.meter.scans += 1
        return snapshot

    def get(self, shard_id: str) -> Lease | None:
        lease = self.inner.get(shard_id)
        self.meter.read_units += max(1, math.ceil((lease_size(lease) if lease else 1) / 4096))
        return lease

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        beat = self.inner.get_heartbeat(worker_id)
        self.meter.read_units += 1  # a consistent read of one small row
        return beat

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
        if generation is None:
            self._write(lease_size(lease))
        else:  # a transaction: every item in it (the condition check too) at twice the write price
            self.meter.write_units += 2 * write_units(lease_size(lease)) + 2
            self.meter.writes += 1
        return self.inner.create_if_absent(lease, generation)

    def lineage_generation(self) -> int:
        self.meter.read_units += 1
        return self.inner.lineage_generation()

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Sequence[str] = ()
    ) -> tuple[HandOverRequest, ...]:
        self._write(item_bytes(heartbeat_to_item(beat)))
        return self.inner.heartbeat(beat, expected_counter, clear)

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        self._write(item_bytes(heartbeat_to_item(beat)))
        self.inner.delete_heartbeat(beat)

    def take(self, seen: Lease, new_owner: str) -> Lease:
        self._write(lease_size(seen))
        return self.inner.take(seen, new_owner)

    def ask_hand_over(self, owner: str, request: HandOverRequest) -> None:
        self._write(item_bytes(heartbeat_to_item(Heartbeat(owner, 10**6, request.at_wall_millis))) + 80)
        self.inner.ask_hand_over(owner, request)

    def request_steal(self, seen: Lease, thief: str, now_wall_millis: int) -> Lease:
        self._write(lease_size(seen))
        return self.inner.request_steal(seen, thief, now_wall_millis)

    def release(self, held: Lease, to: str | None = None) -> Lease:
        self._write(lease_size(held))
        return self.inner.release(held, to)

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
        self._write(lease_size(held))
        return self.inner.checkpoint(held, checkpoint)

    def delete_finished(self, lease: Lease) -> None:
        self._write(100)  # the lineage row's generation moves first
        self._write(lease_size(lease))
        self.inner.delete_finished(lease)

    def claim_first_start(self, worker_id: str, at_wall_millis: int) -> bool:
        self._write(100)
        return self.inner.claim_first_start(worker_id, at_wall_millis)


@dataclass(frozen=True)
class Units:
    reads_per_second: float
    writes_per_second: float


def kcl_units_per_second(
    leases: int, workers: int, lease_bytes: int, failover_millis: int, *, epsilon_millis: int = 0
) -> Units:
    """KCL's renewer every failover/3 − ε, its taker's full scan every 2 × (failover + ε)."""
    renewal = (failover_millis / 3 - epsilon_millis) / 1000
    taker = 2 * (failover_millis + epsilon_millis) / 1000
    writes = leases * write_units(lease_bytes) / renewal
    reads = workers * scan_units(leases * lease_bytes) / taker
    return Units(reads, writes)


def design_units_per_second(
    leases: int, workers: int, lease_bytes: int, heartbeat_bytes: int, settings: WorkerSettings
) -> Units:
    """This design's steady state: a heartbeat per worker per renewal, a scan of each table (leases,
    workers) per worker per taker round."""
    writes = workers * write_units(heartbeat_bytes) / (settings.renewal_interval_millis / 1000)
    scan = scan_units(leases * lease_bytes) + scan_units(workers * heartbeat_bytes)
    reads = workers * scan / (settings.taker_interval_millis / 1000)
    return Units(reads, writes)


@dataclass(frozen=True)
class Comparison:
    ours: Units
    kcl: Units

    @property
    def read_ratio(self) -> float:
        return self.ours.reads_per_second / self.kcl.reads_per_second

    @property
    def write_ratio(self) -> float:
        return self.ours.writes_per_second / self.kcl.writes_per_second

    @property
    def cost_ratio(self) -> float:
        """Provisioned price of ours over KCL's (RCU + 5 x WCU)."""

        def price(units: Units) -> float:
            return units.reads_per_second + WRITE_UNIT_PRICE_IN_READ_UNITS * units.writes_per_second

        return price(self.ours) / price(self.kcl)


def compare(
    leases: int,
    workers: int,
    settings: WorkerSettings,
    *,
    lease_bytes: int | None = None,
    heartbeat_bytes: int | None = None,
) -> Comparison:
    """Both designs' steady-state units for S leases and M workers; item sizes default to typical
    DynamoDB Streams leases (shard id, a 56-digit checkpoint) and heartbeat rows."""
    if lease_bytes is None:
        lease_bytes = lease_size(
            Lease(
                "shardId-00000001700000000000-0123abcd",
                "ip-10-0-1-7.ec2.internal:4001:0000000a",
                1,
                ExtendedSequenceNumber("4" * 56),
                parent_shard_ids=frozenset({"shardId-00000001690000000000-0123abcd"}),
            )
        )
    if heartbeat_bytes is None:
        heartbeat_bytes = item_bytes(
            heartbeat_to_item(Heartbeat("ip-10-0-1-7.ec2.internal:4001:0000000a", 10**6, 10**12 * 1700, 64))
        )
    return Comparison(
        design_units_per_second(leases, workers, lease_bytes, heartbeat_bytes, settings),
        kcl_units_per_second(
            leases,
            workers,
            lease_bytes,
            settings.failover_time_millis,
            epsilon_millis=settings.epsilon_millis,
        ),
    )
