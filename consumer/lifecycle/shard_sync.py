"""Shard sync: keep the leases table in step with the stream's shards.

:func:`plan_sync` is pure (listed shards + existing leases in, leases to create and delete out);
:class:`ShardSyncer` runs it every ``shard_sync_interval_millis`` and at once when a shard ends.

Rules (KCL's, without its sharp edges):

- ``initial_position`` applies only at the application's first start (an empty leases table) and only
  to shards open then; with LATEST, shards already closed at first start are not leased (their data is
  older than the start). Every shard that appears later starts at TRIM_HORIZON, or records are lost.
- A lease records its shard's parent, so the child waits until the parent's lease is at SHARD_END.
- DescribeStream is eventually consistent: a child listed while its parent still looks open, or a
  closed parent listed without children, is normal and only noted; nothing fails the sync.
- Cleanup deletes a finished lease only when it has children, every child's lease has moved past
  TRIM_HORIZON, and its own parents' leases are gone, so no child can ever start before its parent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from consumer.clock import Clock
from consumer.leases.errors import LeaseError
from consumer.leases.model import LATEST, TRIM_HORIZON, ExtendedSequenceNumber, Lease
from consumer.lifecycle.ports import ReadError
from consumer.settings import WorkerSettings
from consumer.telemetry.catalogue import log_parent_not_closed
from consumer.telemetry.metrics import Metrics, NullMetrics

log = logging.getLogger("consumer.lifecycle")


@dataclass(frozen=True)
class SyncPlan:
    create: tuple[Lease, ...]
    delete: tuple[Lease, ...]
    open_parents: tuple[tuple[str, str], ...]  # (child, parent) listed while the parent looks open


def _is_open(shard: Mapping[str, Any]) -> bool:
    return "EndingSequenceNumber" not in shard.get("SequenceNumberRange", {})


def plan_sync(
    shards: Sequence[Mapping[str, Any]],
    leases: Mapping[str, Lease],
    *,
    initial_position: str,
    cleanup: bool,
) -> SyncPlan:
    listed = {s["ShardId"]: s for s in shards}
    first_start = not leases
    children: dict[str, set[str]] = {}
    open_parents: list[tuple[str, str]] = []
    for shard_id, shard in listed.items():
        parent = shard.get("ParentShardId")
        if parent:
            children.setdefault(parent, set()).add(shard_id)
            if parent in listed and _is_open(listed[parent]):
                open_parents.append((shard_id, parent))
    for lease in leases.values():
        for parent in lease.parent_shard_ids:
            children.setdefault(parent, set()).add(lease.shard_id)

    create: list[Lease] = []
    for shard_id, shard in sorted(listed.items()):
        if shard_id in leases:
            continue
        if first_start and initial_position == LATEST:
            if not _is_open(shard):
                continue  # closed before the application's first start: older than LATEST
            start = LATEST
        else:
            start = TRIM_HORIZON
        parent = shard.get("ParentShardId")
        parents = frozenset({parent} if parent else ())
        create.append(Lease(shard_id, None, 0, ExtendedSequenceNumber(start), parent_shard_ids=parents))

    delete: list[Lease] = []
    if cleanup:
        for lease in leases.values():
            if not lease.finished:
                continue
            kids = children.get(lease.shard_id, set())
            if not kids or any(k not in leases for k in kids):
                continue
            progressed = all(leases[k].checkpoint.sequence not in (TRIM_HORIZON, LATEST) for k in kids)
            parents_gone = all(p not in leases for p in lease.parent_shard_ids)
            if progressed and parents_gone:
                delete.append(lease)
    return SyncPlan(tuple(create), tuple(delete), tuple(open_parents))


class ShardLister(Protocol):
    def list_shards(self) -> list[dict[str, Any]]: ...


class LeaseTable(Protocol):
    def create_leases(self, leases: Sequence[Lease]) -> int: ...

    def delete_finished(self, lease: Lease) -> None: ...


class ShardSyncer:
    def __init__(
        self,
        *,
        source: ShardLister,
        coordinator: Any,
        settings: WorkerSettings,
        clock: Clock,
        metrics: Metrics | None = None,
    ) -> None:
        self._source = source
        self._coordinator = coordinator
        self._settings = settings
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._wake = threading.Event()

    def sync(self) -> SyncPlan | None:
        started = self._clock.monotonic_millis()
        try:
            shards = self._source.list_shards()
            leases = self._coordinator.store.scan().leases
            plan = plan_sync(
                shards,
                leases,
                initial_position=self._settings.initial_position,
                cleanup=self._settings.cleanup_leases_upon_shard_completion,
            )
            for child, parent in plan.open_parents:
                log_parent_not_closed(log, child, parent)
            created = self._coordinator.create_leases(plan.create)
            for lease in plan.delete:
                try:
                    self._coordinator.delete_finished(lease)
                except LeaseError:
                    continue
        except (ReadError, LeaseError) as exc:
            log.warning("shard sync failed (retrying next round): %s", exc)
            elapsed = self._clock.monotonic_millis() - started
            self._metrics.timing("ShardSyncTask", "ShardSyncTask", elapsed, False)
            return None
        if created or plan.delete:
            log.info("shard sync: %d leases created, %d finished leases removed", created, len(plan.delete))
        self._metrics.timing("ShardSyncTask", "ShardSyncTask", self._clock.monotonic_millis() - started, True)
        return plan

    def shard_ended(self, shard_id: str) -> None:
        """A shard reached its end: look for its children now rather than at the next periodic sync."""
        log.info("shard %s ended; syncing shards for its children", shard_id)
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._wake.wait(self._settings.shard_sync_interval_millis / 1000)
            self._wake.clear()
            if not stop.is_set():
                self.sync()
