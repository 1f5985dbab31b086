"""What the leases table costs: DynamoDB's capacity rules applied to the requests a store makes.

:class:`MeteredStore` wraps any :class:`~consumer.leases.store.LeaseStore` and charges each request
as DynamoDB would: a write costs ⌈item KB⌉ write units (the larger of the item before and after); an
eventually consistent Scan costs 0.5 read units per 4 KB of all items it reads, a strongly consistent
GetItem 1 unit per 4 KB.

It is the benchmarks' instrument (bench/lease_cost.py, bench/taker_scale.py), never part of a worker;
the steady-state formulas of this design and of the Java KCL, and their comparison, are in
:mod:`bench.lease_cost_model` (``consumer plan`` has its own figures in :mod:`tools.planning`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from consumer.api.leases import (
    ExtendedSequenceNumber,
    HandOverRequest,
    Heartbeat,
    Lease,
    Snapshot,
    heartbeat_to_item,
    lease_to_item,
)
from consumer.api.worker import LeaseStore


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
    worker_scans: int = 0  # scans of the workers table alone (a taker round with no full scan)
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

    def scan_workers(self) -> Snapshot:
        snapshot = self.inner.scan_workers()
        beats = sum(item_bytes(heartbeat_to_item(beat)) for beat in snapshot.heartbeats.values())
        self.meter.read_units += scan_units(beats)
        self.meter.worker_scans += 1
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
