"""What the lifecycle needs from the lease coordinator, the stream and the processor.

The lifecycle is written against these small protocols, not against the adapters, so it can be
driven in tests by fakes with a fake clock; :mod:`consumer.lifecycle.stream_binding` binds them to the
lease coordinator, the DynamoDB Streams adapter and the processing layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from consumer.leases.model import SHARD_END, TRIM_HORIZON, Lease
from consumer.records import ShardInfo, StreamRecord

__all__ = ["SHARD_END", "TRIM_HORIZON"]


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

    def is_shard_finished(self, shard_id: str) -> bool:
        """The shard's lease is at SHARD_END, or there is no lease (a missing parent is finished)."""
        ...

    def checkpoint(self, shard_id: str, position: str, counter: int | None = None) -> None:
        """Write a checkpoint (digits or SHARD_END); raises LeaseLostError when the lease is gone
        (or, with ``counter``, held under another ownership)."""
        ...

    def release(self, shard_id: str, counter: int | None = None) -> None:
        """Give the lease up after a graceful stop (checkpoint first); with ``counter``, only the
        ownership that began at it."""
        ...


# ------------------------------------------------------------------------------------ stream


class ReadError(Exception):
    """Base of what a :class:`StreamReader` raises; anything else is a bug."""


class IteratorExpiredError(ReadError):
    """The iterator is older than its 15 minutes: get a new one from the last position."""


class DataTrimmedError(ReadError):
    """The position is older than the stream's 24 h retention: records were lost."""


class ShardGoneError(ReadError):
    """The shard no longer exists (trimmed away entirely)."""


class StreamGoneError(ReadError):
    """The stream or table was deleted or disabled: fatal for the worker."""


class ReadThrottledError(ReadError):
    """Too many requests, or a transient service error: back off and retry."""


@dataclass(frozen=True, slots=True)
class Fetched:
    records: tuple[StreamRecord, ...]
    next_iterator: str | None  # None once a closed shard has been read to its end
    millis_behind_latest: int


class StreamReader(Protocol):
    def iterator_at(self, shard_id: str, position: str) -> str:
        """An iterator for TRIM_HORIZON, LATEST, or just after a sequence number (digits)."""
        ...

    def fetch(self, shard_id: str, iterator: str, limit: int) -> Fetched: ...


# --------------------------------------------------------------------------------- processor


class Checkpointer(Protocol):
    def checkpoint(self, sequence_number: str | None = None) -> None:
        """Record progress up to ``sequence_number`` (None: everything delivered; SHARD_END at the end)."""
        ...

    def checkpoint_shard_end(self) -> None: ...


class ShardProcessor(Protocol):
    """One shard's processor, as the lifecycle drives it (the processing layer adapts user code)."""

    def initialize(self, shard: ShardInfo, checkpoint: str) -> None: ...

    def process(
        self,
        records: tuple[StreamRecord, ...],
        millis_behind_latest: int,
        checkpointer: Checkpointer,
        should_stop: Callable[[], bool],
        lease_held: Callable[[], bool] | None = None,
    ) -> None:
        """Handle the batch; checkpoint through ``checkpointer``. Raising means: deliver it again later.

        ``should_stop``: lease going or a stop asked for; ``lease_held``: false only once the lease is
        lost or fenced (what a side effect must check)."""
        ...

    def shard_ended(self, checkpointer: Checkpointer) -> None:
        """The shard is finished: must checkpoint (no argument = SHARD_END) so the children can start."""
        ...

    def lease_lost(self) -> None:
        """Another worker owns the shard now: stop, never checkpoint."""
        ...

    def shutdown_requested(self, checkpointer: Checkpointer) -> None:
        """Graceful stop or hand-off: checkpoint what was processed; the lease is released after."""
        ...


ProcessorFactory = Callable[[ShardInfo], ShardProcessor]
