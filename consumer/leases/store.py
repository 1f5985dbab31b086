"""The lease store port: every mutation of the leases table, each one a conditional write.

Implementations: :class:`consumer.leases.dynamodb.DynamoDBLeaseStore` (the table) and
:class:`consumer.leases.memory.InMemoryLeaseStore` (same conditions, for simulations). The
functional tests run one contract suite against both.

Every method that changes a lease either succeeds and returns the lease as written, or raises
:class:`~consumer.leases.errors.LeaseConflictError` carrying the item as it is now.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot


class LeaseStore(Protocol):
    def scan(self) -> Snapshot:
        """Both tables, eventually consistent: every lease and every heartbeat row."""
        ...

    def scan_workers(self) -> Snapshot:
        """The workers table only (heartbeats, the first-start marker), eventually consistent; the
        snapshot's ``leases`` is empty. What a taker round reads when no full scan is due."""
        ...

    def get(self, shard_id: str) -> Lease | None:
        """A strongly consistent read of one lease."""
        ...

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
        """Create the lease unless one exists for the shard; False when it already existed. With
        ``generation`` (read by :meth:`lineage_generation` before the view the create was planned
        from), only if no cleanup has happened since: else
        :class:`~consumer.leases.errors.LineageChangedError` (conditions.py, "the lineage generation")."""
        ...

    def lineage_generation(self) -> int:
        """A strongly consistent read of the lineage generation (0 before the first cleanup)."""
        ...

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Sequence[str] = ()
    ) -> tuple[HandOverRequest, ...]:
        """Write my heartbeat row: absent, or still at ``expected_counter``. Returns the hand-over
        requests on the row after the write. Requests stay on the row until their owner clears them
        (``clear``: shard ids), so an answer lost to a retried or timed-out write loses none. Raises
        :class:`~consumer.leases.errors.HeartbeatConflictError` carrying the row and its requests."""
        ...

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        """A strongly consistent read of one worker's heartbeat row (None: it has none)."""
        ...

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        """Remove a dead worker's row, only if it has not beaten since it was seen."""
        ...

    def take(self, seen: Lease, new_owner: str) -> Lease:
        """Become the owner of a lease seen free or expired (counter and owner as seen)."""
        ...

    def ask_hand_over(self, owner: str, request: HandOverRequest) -> None:
        """Write ``request`` onto ``owner``'s heartbeat row (conflict when it has no row): the owner
        reads it with its next heartbeat. Comes before :meth:`request_steal`."""
        ...

    def request_steal(self, seen: Lease, thief: str, now_wall_millis: int) -> Lease:
        """Mark the lease ``pendingOwner = thief, pendingSince = now_wall_millis``; read the clock
        after :meth:`ask_hand_over` succeeded (the timeline in :mod:`consumer.leases.conditions`)."""
        ...

    def release(self, held: Lease, to: str | None = None) -> Lease:
        """Give up a lease I hold: free it, or hand it straight to ``to`` (a pending thief)."""
        ...

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
        """Record progress on a lease I hold (never overwrites SHARD_END)."""
        ...

    def delete_finished(self, lease: Lease) -> None:
        """Delete a lease whose checkpoint is SHARD_END (shard-sync cleanup), after moving the
        lineage generation on (so that creates planned before the delete fail)."""
        ...

    def claim_first_start(self, worker_id: str, at_wall_millis: int) -> bool:
        """Write the first-start marker unless it exists; True only for the one worker that wrote it."""
        ...
