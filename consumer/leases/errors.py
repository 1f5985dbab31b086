"""The leases package's errors. Foreign (botocore) errors are wrapped ``from`` the original."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from consumer.leases.model import HandOverRequest, Heartbeat, Lease


class LeaseError(Exception):
    """Base of every error the leases package raises."""


class LeaseItemError(LeaseError):
    """An item in the leases table that does not have the KCL format."""

    def __init__(self, key: str, attribute: str, problem: str) -> None:
        self.key, self.attribute = key, attribute
        super().__init__(f"leases-table item {key!r}: attribute {attribute!r} {problem}")


class LeaseConflictError(LeaseError):
    """A conditional write lost a race; ``current`` is the item as it is now (None: it is gone)."""

    def __init__(self, operation: str, shard_id: str, current: Lease | None) -> None:
        self.operation, self.shard_id, self.current = operation, shard_id, current
        owner = current.owner if current else None
        counter = current.counter if current else None
        super().__init__(f"{operation} {shard_id}: condition failed (now owner={owner}, counter={counter})")


class HeartbeatConflictError(LeaseError):
    """My heartbeat row was not as I expected; ``current`` is the row as it is now (None: deleted).

    The caller resolves it by looking at ``current``: my own earlier write that committed and was
    reported failed (same counter and time), a row I must resynchronise with, or no row at all
    (another worker judged me dead and removed it).
    """

    def __init__(
        self, worker_id: str, current: Heartbeat | None, requests: tuple[HandOverRequest, ...] = ()
    ) -> None:
        self.worker_id, self.current, self.requests = worker_id, current, requests
        seen = f"counter={current.counter}, at={current.at_wall_millis}" if current else "no row"
        super().__init__(f"heartbeat of {worker_id}: condition failed ({seen})")


class LineageChangedError(LeaseError):
    """A lease create refused because a finished lease was cleaned up after the creator read the
    lineage generation: its plan may rest on a view in which that shard had not finished yet."""

    def __init__(self, shard_id: str, generation: int) -> None:
        self.shard_id, self.generation = shard_id, generation
        super().__init__(
            f"create {shard_id}: a finished lease was cleaned up since lineage generation {generation} "
            "was read; the next shard sync plans again"
        )


class LeaseLostError(LeaseConflictError):
    """This worker no longer holds the lease: stop processing, never checkpoint it again."""


class CheckpointRefusedError(LeaseError):
    """A checkpoint that would move backwards, or overwrite SHARD_END."""


class LeaseTableSchemaError(LeaseError):
    """The leases table exists with a key schema this product cannot use."""


class LeaseTableMissingError(LeaseError):
    """The leases table does not exist (and was not to be created)."""


class LeaseStoreUnavailableError(LeaseError):
    """The leases table could not be reached, or throttled past the retries: back off and retry."""


class LeaseStoreThrottledError(LeaseStoreUnavailableError):
    """The leases table refused a request for lack of capacity (counted as LeaseTableThrottles)."""
