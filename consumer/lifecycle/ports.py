"""What the lifecycle needs from the lease coordinator (its shard consumers: :class:`LeaseOps`; shard
sync: :class:`SyncOps`) and the stream.

The lifecycle is written against these small protocols, not against the adapters, so it can be
driven in tests by fakes with a fake clock. The lease coordinator and
:class:`consumer.streams.reader.ShardReader` satisfy them as they are: results and errors keep the
lower layer's types (:mod:`consumer.streams.errors` for reads). The processor side needs no port of
its own: the lifecycle drives :class:`consumer.processing.api.RecordProcessor` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from consumer.leases.model import Lease, Snapshot
from consumer.streams.source import GetRecordsResult
from consumer.streams.table_scan import ScanPageResult


class LeaseOps(Protocol):
    def held(self) -> Sequence[Lease]:
        """The leases this worker holds."""
        ...

    def may_process(self, shard_id: str, counter: int | None = None) -> bool:
        """Held and not fenced: false as soon as the worker cannot prove it still owns the lease.
        With ``counter``, only under the ownership that began at that lease counter: a consumer
        started under an earlier ownership of the same shard (before a fence and a take-back, say)
        must stop, not carry on from its own, older position."""
        ...

    def handoff_requested(self, shard_id: str) -> bool: ...

    def delivering(self, shard_id: str) -> AbstractContextManager[None]:
        """Held around each delivery of the shard's records to the processor: the lease is not
        released under a delivery that has not returned (an overdue hand-over waits for it)."""
        ...

    def waiting_parents(self, parent_shard_ids: Sequence[str]) -> tuple[str, ...]:
        """The parents a shard not started yet still waits for: those with a lease not at SHARD_END,
        and a merge's parent with no lease while its sibling parent has one
        (consumer.leases.decisions.waiting_parents)."""
        ...

    def checkpoint(self, shard_id: str, position: str, counter: int | None = None) -> None:
        """Write a checkpoint (digits or SHARD_END); raises LeaseLostError when the lease is gone
        (or, with ``counter``, held under another ownership)."""
        ...

    def release(self, shard_id: str, counter: int | None = None) -> None:
        """Give the lease up after a graceful stop (checkpoint first); with ``counter``, only the
        ownership that began at it."""
        ...

    def give_up_stalled(self, shard_id: str, counter: int | None = None) -> None:
        """Release a stalled shard's lease for another worker to take (this one does not take it
        back for a stall timeout, nor while its call here is stuck: :meth:`ask_stuck_calls`):
        consumer.lifecycle.stalls."""
        ...

    def ask_stuck_calls(self, stuck: Callable[[], frozenset[str]]) -> None:
        """Where the lease side asks, at each round, which stalled shards' calls here have not
        returned (the stall mover keeps that count alone): it takes none of them back meanwhile."""
        ...

    def shards_with_children(self) -> frozenset[str]:
        """Shards some lease names as a parent, in the latest view of the leases table: they ended."""
        ...


class SyncOps(Protocol):
    """What shard sync needs of the leases table (the lease coordinator provides it, as it provides
    :class:`LeaseOps` to the shard consumers)."""

    def scan(self) -> Snapshot: ...

    def claim_first_start(self) -> bool: ...

    def lineage_generation(self) -> int: ...

    def create_leases(self, leases: Sequence[Lease], generation: int | None = None) -> int: ...

    def delete_finished(self, lease: Lease) -> None: ...

    def read_lease(self, shard_id: str) -> Lease | None: ...

    def is_sync_leader(self) -> bool: ...


# ------------------------------------------------------------------------------------ stream


class StreamReader(Protocol):
    """Reads one stream's shards (:class:`consumer.streams.reader.ShardReader` is the real one).

    Raises only :mod:`consumer.streams.errors`' classes; anything else is a bug.
    """

    def iterator_at(self, shard_id: str, position: str) -> str:
        """An iterator for TRIM_HORIZON, LATEST, or just after a sequence number (digits)."""
        ...

    def fetch(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult: ...

    def most_records_per_read(self, shard_id: str) -> int:
        """The largest ``limit`` a fetch of this shard may ask for: its stream's GetRecords maximum
        (1000 on DynamoDB Streams, 10 000 on Kinesis), what each read asks for unless
        ``worker.max_records`` asks for fewer."""
        ...


# ------------------------------------------------------------------------------- source table


class TableScanner(Protocol):
    """The source table, as a reload reads it (``worker.on_trimmed: reload``):
    :class:`consumer.streams.table_scan.DynamoDBTableScanner` is the real one."""

    region: str | None

    def describe(self) -> Mapping[str, Any]:
        """DescribeTable's ``Table``: key schema, billing mode, provisioned reads, stream view."""
        ...

    def scan_page(
        self, segment: int, total_segments: int, start_key: Mapping[str, Any] | None, limit: int
    ) -> ScanPageResult:
        """One strongly consistent page of one segment, with the capacity it consumed."""
        ...


ReloadTables = Callable[[str], TableScanner]
"""The table a shard's stream belongs to, by shard id (several streams: one table each)."""
