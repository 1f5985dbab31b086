"""An in-memory lease store with the DynamoDB store's conditions, for simulations and unit tests.

The functional contract suite runs against both stores, which is what keeps the two in step. The
conditions mirror :mod:`consumer.leases.conditions` one for one (named in each method).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from consumer.leases.errors import (
    CheckpointRefusedError,
    HeartbeatConflictError,
    LeaseConflictError,
    LeaseLostError,
    LineageChangedError,
)
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot


class InMemoryLeaseStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._beats: dict[str, Heartbeat] = {}
        self._asks: dict[str, dict[str, HandOverRequest]] = {}  # owner -> shard -> request on its row
        self.writes = 0
        self.scans = 0
        self.first_start_by: str | None = None
        self._generation = 0  # the lineage row's generation
        self.unavailable = False  # simulate an unreachable table

    def _check_available(self) -> None:
        if self.unavailable:
            from consumer.leases.errors import LeaseStoreUnavailableError

            raise LeaseStoreUnavailableError("in-memory store marked unavailable")

    def scan(self) -> Snapshot:
        with self._lock:
            self._check_available()
            self.scans += 1
            return Snapshot(dict(self._leases), dict(self._beats), (), self.first_start_by is not None)

    def scan_workers(self) -> Snapshot:
        """:meth:`scan` without the leases (so a subclass that makes scans stale makes these stale too)."""
        full = self.scan()
        return Snapshot({}, full.heartbeats, (), full.first_start_claimed)

    def lineage_generation(self) -> int:
        with self._lock:
            self._check_available()
            return self._generation

    def get(self, shard_id: str) -> Lease | None:
        with self._lock:
            self._check_available()
            return self._leases.get(shard_id)

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:  # CREATE_IF_ABSENT
        with self._lock:
            self._check_available()
            if lease.shard_id in self._leases:
                return False
            if generation is not None and generation != self._generation:  # LINEAGE_UNCHANGED
                raise LineageChangedError(lease.shard_id, generation)
            self._leases[lease.shard_id] = lease
            self.writes += 1
            return True

    def heartbeat(  # HEARTBEAT_NEW / _MINE
        self, beat: Heartbeat, expected_counter: int | None, clear: Sequence[str] = ()
    ) -> tuple[HandOverRequest, ...]:
        with self._lock:
            self._check_available()
            current = self._beats.get(beat.worker_id)
            if (expected_counter is None and current is not None) or (
                expected_counter is not None and (current is None or current.counter != expected_counter)
            ):
                raise HeartbeatConflictError(beat.worker_id, current, self._requests(beat.worker_id))
            self._beats[beat.worker_id] = beat
            asks = self._asks.setdefault(beat.worker_id, {})
            for shard_id in clear:
                asks.pop(shard_id, None)
            self.writes += 1
            return self._requests(beat.worker_id)

    def _requests(self, worker_id: str) -> tuple[HandOverRequest, ...]:
        asks = self._asks.get(worker_id, {})
        return tuple(sorted(asks.values(), key=lambda r: (r.at_wall_millis, r.shard_id)))

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        with self._lock:
            self._check_available()
            return self._beats.get(worker_id)

    def delete_heartbeat(self, beat: Heartbeat) -> None:  # HEARTBEAT_STALE
        with self._lock:
            self._check_available()
            current = self._beats.get(beat.worker_id)
            if current is None or current.counter != beat.counter:
                raise LeaseConflictError("delete_heartbeat", beat.worker_id, None)
            del self._beats[beat.worker_id]
            self._asks.pop(beat.worker_id, None)
            self.writes += 1

    def _current(self, op: str, shard_id: str, lost: bool = False) -> Lease:
        current = self._leases.get(shard_id)
        if current is None:
            raise (LeaseLostError if lost else LeaseConflictError)(op, shard_id, None)
        return current

    def take(self, seen: Lease, new_owner: str) -> Lease:  # TAKE_FREE / TAKE_FROM
        with self._lock:
            self._check_available()
            current = self._current("take", seen.shard_id)
            if current.counter != seen.counter or current.owner != seen.owner:
                raise LeaseConflictError("take", seen.shard_id, current)
            switches = current.owner_switches_since_checkpoint + (0 if current.owner == new_owner else 1)
            taken = replace(
                current,
                owner=new_owner,
                counter=current.counter + 1,
                owner_switches_since_checkpoint=switches,
                pending_owner=None,
                pending_since=None,
            )
            self._leases[seen.shard_id] = taken
            self.writes += 1
            return taken

    def ask_hand_over(self, owner: str, request: HandOverRequest) -> None:  # HAND_OVER_ASK
        with self._lock:
            self._check_available()
            if owner not in self._beats:
                raise LeaseConflictError(
                    "ask_hand_over", request.shard_id, self._leases.get(request.shard_id)
                )
            self._asks.setdefault(owner, {})[request.shard_id] = request
            self.writes += 1

    def request_steal(self, seen: Lease, thief: str, now_wall_millis: int) -> Lease:  # STEAL_REQUEST
        if seen.owner is None:
            raise ValueError(f"{seen.shard_id} has no owner to steal from; take it instead")
        with self._lock:
            self._check_available()
            current = self._current("request_steal", seen.shard_id)
            if (
                current.counter != seen.counter
                or current.owner != seen.owner
                or current.pending_owner is not None
            ):
                raise LeaseConflictError("request_steal", seen.shard_id, current)
            marked = replace(current, pending_owner=thief, pending_since=now_wall_millis)
            self._leases[seen.shard_id] = marked
            self.writes += 1
            return marked

    def release(self, held: Lease, to: str | None = None) -> Lease:  # HELD
        with self._lock:
            self._check_available()
            current = self._current("release", held.shard_id, lost=True)
            if current.owner != held.owner or current.counter != held.counter:
                raise LeaseLostError("release", held.shard_id, current)
            released = replace(
                current,
                owner=to,
                counter=current.counter + 1,
                owner_switches_since_checkpoint=current.owner_switches_since_checkpoint + (1 if to else 0),
                pending_owner=None,
                pending_since=None,
            )
            self._leases[held.shard_id] = released
            self.writes += 1
            return released

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:  # CHECKPOINT
        if held.checkpoint.is_shard_end:
            raise CheckpointRefusedError(f"{held.shard_id} is already at SHARD_END")
        if checkpoint < held.checkpoint:
            raise CheckpointRefusedError(
                f"{held.shard_id}: checkpoint {checkpoint} would move back from {held.checkpoint}"
            )
        with self._lock:
            self._check_available()
            current = self._current("checkpoint", held.shard_id, lost=True)
            if (
                current.owner != held.owner
                or current.counter != held.counter
                or current.checkpoint.is_shard_end
            ):
                raise LeaseLostError("checkpoint", held.shard_id, current)
            updated = replace(current, checkpoint=checkpoint, owner_switches_since_checkpoint=0)
            self._leases[held.shard_id] = updated
            self.writes += 1
            return updated

    def delete_finished(self, lease: Lease) -> None:  # DELETE_FINISHED
        with self._lock:
            self._check_available()
            current = self._current("delete", lease.shard_id)
            if not current.checkpoint.is_shard_end:
                raise LeaseConflictError("delete", lease.shard_id, current)
            self._generation += 1  # first, as the DynamoDB store does
            del self._leases[lease.shard_id]
            self.writes += 1

    def claim_first_start(self, worker_id: str, at_wall_millis: int) -> bool:  # FIRST_START_ABSENT
        with self._lock:
            self._check_available()
            if self.first_start_by is not None:
                return self.first_start_by == worker_id  # a retried claim finds its own marker
            self.first_start_by = worker_id
            self.writes += 1
            return True
