"""Shard sync: keep the leases table in step with the stream's shards.

The decision is :func:`consumer.streams.sync.plan_shard_sync` (pure: listed shards + existing leases
in, leases to create and delete out; its docstring has the rules). :class:`ShardSyncer` performs it:
every ``shard_sync_interval_millis``, and at once when one of this worker's shards ends, so that the
children get leases without waiting for the next period. DescribeStream's eventual consistency only
produces warnings (logged as the benign "parent not closed" race); nothing fails the sync.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from consumer.clock import Clock
from consumer.leases.errors import LeaseError
from consumer.leases.model import LATEST, ExtendedSequenceNumber, Lease
from consumer.lifecycle.ports import ReadError
from consumer.settings import WorkerSettings
from consumer.streams.errors import StreamSourceError
from consumer.streams.source import Shard
from consumer.streams.sync import LeaseView, ShardSyncPlan, plan_shard_sync
from consumer.telemetry.catalogue import log_parent_not_closed
from consumer.telemetry.metrics import Metrics, NullMetrics

log = logging.getLogger("consumer.lifecycle")


class ShardSyncer:
    def __init__(
        self,
        *,
        list_shards: Callable[[], Iterable[Shard]],
        coordinator: Any,
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

    def sync(self) -> ShardSyncPlan | None:
        started = self._clock.monotonic_millis()
        try:
            shards = tuple(self._list_shards())
            snapshot = self._coordinator.store.scan()
            leases = snapshot.leases
            first_start = not leases and not snapshot.first_start_claimed
            # Exactly one worker may plan the first start at LATEST: two doing it from empty scans
            # across a rollover would lease the new child at LATEST and skip its first records. The
            # loser creates nothing this round; its next sync sees the winner's leases (or, if the
            # winner died first, an empty table with the marker: every shard at TRIM_HORIZON).
            if (
                first_start
                and self._settings.initial_position == LATEST
                and not self._coordinator.store.claim_first_start(
                    self._coordinator.worker_id, self._clock.wall_millis()
                )
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
            created = self._coordinator.create_leases(
                [
                    Lease(
                        new.shard_id,
                        None,
                        0,
                        ExtendedSequenceNumber(new.checkpoint),
                        parent_shard_ids=new.parent_shard_ids,
                    )
                    for new in plan.leases_to_create
                ]
            )
            deleted = 0
            for shard_id in plan.leases_to_delete:
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
