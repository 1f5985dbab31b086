"""How a shard consumer's step judges what went wrong: fatal or retried, and after how long.

Kept apart from the shard's state machine (:mod:`consumer.lifecycle.shard_machine`) because these are
functions of an error, a record or a failure count (and the back-off's count itself), and the
scheduler uses them too.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from operator import attrgetter

from consumer.leases.errors import LeaseError, LeaseTableMissingError, LeaseTableSchemaError
from consumer.records import RecordFormatError, StreamRecord, WireRecord
from consumer.streams.errors import FatalStreamError
from consumer.streams.target import StreamConfigError
from ground.settings import ConfigError

MAX_BACKOFF_MILLIS = 30_000

_SIZE_BYTES = attrgetter("size_bytes")
_CHECKED = frozenset((WireRecord,))  # record types whose sequence number is digits by construction

# What no amount of retrying fixes: the worker must stop and someone must act. Everything else a
# step meets is retried for its shard alone.
FATAL_ERRORS: tuple[type[BaseException], ...] = (
    FatalStreamError,  # the stream or its table deleted or disabled, or a permission missing
    LeaseTableMissingError,  # the leases table vanished
    LeaseTableSchemaError,  # ... or was re-created with a key schema this product cannot use
    ConfigError,  # settings that cannot work
    StreamConfigError,
)


def is_fatal(exc: BaseException) -> bool:
    """Does ``exc`` end the worker? Only the errors above, and what is not an ``Exception`` at all."""
    return isinstance(exc, FATAL_ERRORS) or not isinstance(exc, Exception)


def backoff_millis(
    failures: int, base_millis: int, rng: random.Random, cap_millis: int = MAX_BACKOFF_MILLIS
) -> int:
    """Exponential back-off with full jitter: between ``base`` and ``base * 2^failures`` (``cap``).

    The jitter keeps a fleet whose shards all hit the same throttled table from retrying in step.
    The cap is 30 s, or less where the wait must not outgrow an outage (:func:`outage_cap_millis`).
    """
    ceiling = min(cap_millis, base_millis * 2 ** min(failures, 10))
    return max(min(base_millis, cap_millis), int(rng.uniform(0, ceiling)))


@dataclass
class Backoff:
    """One shard's failures in a row and the wait before the next try: :func:`backoff_millis` from
    ``task_backoff_time_millis`` (``base_millis``), drawn from the shard's own ``rng``. A step that
    goes through resets it."""

    base_millis: int
    rng: random.Random
    failures: int = 0

    def next_millis(self, cap_millis: int = MAX_BACKOFF_MILLIS) -> int:
        """The wait after one more failure in a row."""
        self.failures += 1
        return backoff_millis(self.failures, self.base_millis, self.rng, cap_millis)

    def reset(self) -> None:
        self.failures = 0


def outage_cap_millis(exc: BaseException, taker_interval_millis: int) -> int:
    """The longest wait before a step retries after ``exc``: a leases-table error (throttled,
    unreachable) is retried within one taker interval, so that a shard's SHARD_END checkpoint, or a
    graceful stop's last checkpoint, goes through within one interval of the table answering again:
    an exponential wait, up to 30 s, would outlast a throttle of a few seconds many times over.
    Anything else keeps 30 s."""
    return taker_interval_millis if isinstance(exc, LeaseError) else MAX_BACKOFF_MILLIS


def malformation(record: StreamRecord) -> str | None:
    """Why ``record`` has no usable sequence number (naming the shard and the record), or None."""
    try:
        _ = record.sequence_number
    except RecordFormatError as exc:
        return str(exc)
    return None


def first_malformed(records: tuple[StreamRecord, ...]) -> int | None:
    """Index of the first record whose sequence number is not digits, or None.

    A :class:`WireRecord` was checked when it was held (its sequence number is digits), so a batch
    of nothing else is answered by one pass over the records' types in C; only a batch holding
    another kind of record is searched record by record.
    """
    if not set(map(type, records)) - _CHECKED:
        return None
    return next((i for i, record in enumerate(records) if malformation(record) is not None), None)


def size_bytes(records: tuple[StreamRecord, ...]) -> int:
    """SizeBytes of the records, for the metric; a malformed value counts 0 rather than failing a batch
    the processor already finished (it would be delivered again, forever). Summed in C; record by
    record only when some value does not read."""
    try:
        return sum(map(_SIZE_BYTES, records))
    except (TypeError, ValueError):
        pass
    total = 0
    for record in records:
        try:
            total += record.size_bytes
        except (TypeError, ValueError):
            continue
    return total
