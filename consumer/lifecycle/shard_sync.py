"""Shard sync: keep the leases table in step with the stream's shards.

The decision is :func:`consumer.streams.sync.plan_shard_sync` (pure: listed shards + existing leases
in, leases to create and delete out; its docstring has the rules). :class:`ShardSyncer` performs it:
every ``shard_sync_interval_millis``, and at once when one of this worker's shards ends, so that the
children get leases without waiting for the next period. DescribeStream's eventual consistency only
produces warnings (logged as the benign "parent not closed" race); nothing fails the sync.

The leases are read *before* the shards are listed. A worker paused between the two (SIGSTOP, a GC
pause, slow throttled calls) then holds an older view of the leases and a newer listing — never a
fresh leases table, whose finished parents are already cleaned up, beside an old listing that lacks
the descendants proving they are finished (which would re-create the parents' leases at TRIM_HORIZON
and replay them after their grandchildren).

A plan is only as good as the scan it came from, and a create sent late — the worker stopped
between planning and sending for any length of time (GC, SIGSTOP, a suspended VM), a slow call,
botocore's retries — could re-create a lease that was created, finished and cleaned up meanwhile,
and replay that shard after its children. No check the worker makes before sending can close that
gap (it can stop right after the check), so the table does: the sync reads the *lineage generation*
before its scan, and every create is conditional on it; every cleanup moves it before deleting
(:mod:`consumer.leases.conditions`). A create planned before a cleanup it could not see fails, and
the next sync plans again from a fresh view. A finished lease is deleted only once *this* worker has
seen it finished for :data:`CLEANUP_DELAY_FAILOVERS` failover periods, longer than any scan is stale,
so no scan read after the generation can predate a lease that was created and cleaned up before it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from consumer.clock import Clock
from consumer.leases.errors import LeaseError, LineageChangedError
from consumer.leases.model import LATEST, ExtendedSequenceNumber, Lease, Snapshot
from consumer.lifecycle.ports import ReadError
from consumer.settings import WorkerSettings
from consumer.streams.errors import StreamSourceError
from consumer.streams.source import Shard
from consumer.streams.sync import LeaseView, ShardSyncPlan, plan_shard_sync
from consumer.telemetry.catalogue import log_parent_not_closed
from consumer.telemetry.metrics import Metrics, NullMetrics

log = logging.getLogger("consumer.lifecycle")

CLEANUP_DELAY_FAILOVERS = 3


class LeaseTable(Protocol):
    """What shard sync needs of the leases table (the lease coordinator provides it)."""

    def scan(self) -> Snapshot: ...

    def claim_first_start(self) -> bool: ...

    def lineage_generation(self) -> int: ...

    def create_leases(self, leases: Sequence[Lease], generation: int | None = None) -> int: ...

    def delete_finished(self, lease: Lease) -> None: ...


class ShardSyncer:
    def __init__(
        self,
        *,
        list_shards: Callable[[], Iterable[Shard]],
        coordinator: LeaseTable,
        settings: WorkerSettings,
        clock: Clock,
        metrics: Metrics | None = None,
    ) -> None:
        self._list_shards = list_shards
        self._coordinator = coordinator
        self._settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._wake = threading.Event()
        self._finished_since: dict[str, int] = {}  # shard -> when I first saw its lease finished

    def sync(self) -> ShardSyncPlan | None:
        started = self._clock.monotonic_millis()
        try:
            generation = self._coordinator.lineage_generation()  # before the scan: module docstring
            snapshot = self._coordinator.scan()  # before the listing: module docstring
            shards = tuple(self._list_shards())
            leases = snapshot.leases
            first_start = not leases and not snapshot.first_start_claimed
            # Exactly one worker may plan the first start at LATEST: two doing it from empty scans
            # across a rollover would lease the new child at LATEST and skip its first records. The
            # loser creates nothing this round; its next sync sees the winner's leases (or, if the
            # winner died first, an empty table with the marker: every shard at TRIM_HORIZON).
            if (
                first_start
                and self._settings.initial_position == LATEST
                and not self._coordinator.claim_first_start()
            ):
                log.info("shard sync: another worker is doing the first start; syncing next round")
                return None
            plan = plan_shard_sync(
                shards,
                [LeaseView.of(lease) for lease in leases.values()],
                initial_position=self._settings.initial_position,
                first_start=first_start,
                cleanup=self._settings.cleanup_leases_upon_shard_completion,
            )
            for warning in plan.warnings:
                if warning.kind == "parent_looks_open" and warning.parent_shard_id:
                    log_parent_not_closed(log, warning.shard_id, warning.parent_shard_id)
                else:
                    log.warning("shard sync: %s", warning.message)
            created = self._create(plan, generation)
            deleted = 0
            for shard_id in self._old_enough(snapshot, plan.leases_to_delete, started):
                try:
                    self._coordinator.delete_finished(leases[shard_id])
                    deleted += 1
                except LeaseError:
                    continue
        except (ReadError, StreamSourceError, LeaseError) as exc:
            elapsed = self._clock.monotonic_millis() - started
            log.warning("shard sync failed (retrying next round): %s", exc)
            self._metrics.timing("ShardSyncTask", "ShardSyncTask", elapsed, False)
            return None
        if created or deleted:
            log.info("shard sync: %d leases created, %d finished leases removed", created, deleted)
        self._metrics.timing("ShardSyncTask", "ShardSyncTask", self._clock.monotonic_millis() - started, True)
        return plan

    def _create(self, plan: ShardSyncPlan, generation: int) -> int:
        created = 0
        for new in plan.leases_to_create:
            lease = Lease(
                new.shard_id,
                None,
                0,
                ExtendedSequenceNumber(new.checkpoint),
                parent_shard_ids=new.parent_shard_ids,
            )
            try:
                created += self._coordinator.create_leases([lease], generation)
            except LineageChangedError as exc:
                log.info("shard sync: %s", exc)
                break
        return created

    def _old_enough(self, snapshot: Snapshot, candidates: Sequence[str], scanned_at: int) -> list[str]:
        """The finished leases I have seen finished for long enough to delete (module docstring)."""
        finished = {shard_id for shard_id, lease in snapshot.leases.items() if lease.finished}
        self._finished_since = {
            shard_id: self._finished_since.get(shard_id, scanned_at) for shard_id in finished
        }
        delay = CLEANUP_DELAY_FAILOVERS * self._settings.failover_time_millis
        return [s for s in candidates if scanned_at - self._finished_since.get(s, scanned_at) >= delay]

    def shard_ended(self, shard_id: str) -> None:
        """A shard reached its end: look for its children now rather than at the next periodic sync."""
        log.info("shard %s ended; syncing shards for its children", shard_id)
        self.wake()

    def wake(self) -> None:
        """Cut the current wait short (a stop was requested, or a shard ended)."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._wake.wait(self._settings.shard_sync_interval_millis / 1000)
            self._wake.clear()
            if not stop.is_set():
                self.sync()
