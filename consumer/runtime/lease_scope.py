"""The leases table as a worker reading ``streams:`` sees it: only the leases of those streams.

One leases table serves every stream of the fleet, and it keeps the leases of a stream that left
``streams:`` (or of a table's old stream, or of the one-table form used before). A worker that took
such a lease could not read its shard: the stream port refuses a key of no configured stream, the
shard consumer took that for a trimmed shard, logged RECORDS_TRIMMED_LOST (which pages) and wrote
SHARD_END on it, so that adding the stream back later skipped the rest of that shard and started
its children. Nothing was lost yet; everything after that checkpoint would have been.

So every scan the lease core and shard sync read leaves those leases out: they are never taken,
balanced, checkpointed or cleaned up, and keep their owner and position for the day the stream comes
back. The worker says once which namespaces it leaves alone, and again whenever that set changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from consumer.lease_keys import split_lease_key
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot
from consumer.leases.store import LeaseStore

log = logging.getLogger("consumer.leases")


class ConfiguredStreamsOnly:
    """A :class:`~consumer.leases.store.LeaseStore` whose scans hold only keys of ``namespaces``
    (consumer.lease_keys.stream_prefix of each configured stream). Every other call goes through
    unchanged: the lease core only ever names keys it saw in a scan."""

    def __init__(
        self,
        inner: LeaseStore,
        namespaces: Sequence[str],
        warn: Callable[[str], None] = log.warning,
    ) -> None:
        self._inner = inner
        self._namespaces = frozenset(namespaces)
        self._warn = warn
        self._left_alone: frozenset[str] = frozenset()

    def _scoped(self, snapshot: Snapshot) -> Snapshot:
        foreign = {
            key: namespace
            for key in snapshot.leases
            if (namespace := split_lease_key(key)[0]) not in self._namespaces
        }
        if not foreign:
            return snapshot
        namespaces = frozenset(namespace or "(plain shard ids)" for namespace in foreign.values())
        if namespaces != self._left_alone:
            self._left_alone = namespaces
            self._warn(
                f"leases table: {len(foreign)} leases belong to no stream in streams: and are left "
                f"alone (namespaces {', '.join(sorted(namespaces))}); add the stream back to process "
                "them, or delete them once nothing more is wanted from those streams"
            )
        kept = {key: lease for key, lease in snapshot.leases.items() if key not in foreign}
        return replace(snapshot, leases=kept)

    def scan(self) -> Snapshot:
        return self._scoped(self._inner.scan())

    def scan_workers(self) -> Snapshot:
        return self._inner.scan_workers()

    def get(self, shard_id: str) -> Lease | None:
        return self._inner.get(shard_id)

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
        return self._inner.create_if_absent(lease, generation)

    def lineage_generation(self) -> int:
        return self._inner.lineage_generation()

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Sequence[str] = ()
    ) -> tuple[HandOverRequest, ...]:
        return self._inner.heartbeat(beat, expected_counter, clear)

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        return self._inner.get_heartbeat(worker_id)

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        self._inner.delete_heartbeat(beat)

    def take(self, seen: Lease, new_owner: str) -> Lease:
        return self._inner.take(seen, new_owner)

    def ask_hand_over(self, owner: str, request: HandOverRequest) -> None:
        self._inner.ask_hand_over(owner, request)

    def request_steal(self, seen: Lease, thief: str, now_wall_millis: int) -> Lease:
        return self._inner.request_steal(seen, thief, now_wall_millis)

    def release(self, held: Lease, to: str | None = None) -> Lease:
        return self._inner.release(held, to)

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
        return self._inner.checkpoint(held, checkpoint)

    def delete_finished(self, lease: Lease) -> None:
        self._inner.delete_finished(lease)

    def claim_first_start(self, worker_id: str, at_wall_millis: int) -> bool:
        return self._inner.claim_first_start(worker_id, at_wall_millis)
