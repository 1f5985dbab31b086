"""The processing package's errors.

The checkpointer's two refusals are the leases package's own classes (re-exported here), so the
lifecycle and a user's processor catch the same thing whichever checkpointer they hold.
"""

from __future__ import annotations

from consumer.leases.errors import CheckpointRefusedError, LeaseLostError

__all__ = [
    "CheckpointRefusedError",
    "DeadLetterError",
    "HandlerStoppedError",
    "LeaseLostError",
    "NonRetryableError",
    "PartialBatchFailureError",
    "ProcessingConfigError",
    "ProcessingError",
    "SinkError",
]


class ProcessingError(Exception):
    """Base of every error the processing package (and its built-in sinks) raises."""


class ProcessingConfigError(ProcessingError):
    """``processing`` settings that cannot work; raised at start-up, before any lease is taken."""


class HandlerStoppedError(ProcessingError):
    """Raise it from a handler that saw ``batch.should_stop()`` before its side effect.

    The batch is neither retried nor checkpointed: the lease is going away (lost, fenced, handed
    over) or the worker is stopping, and whoever owns the shard next delivers it again. Checking just
    before a write keeps a worker that was frozen mid-batch (a long pause) from landing the batch
    after its lease was taken over.
    """


class NonRetryableError(ProcessingError):
    """Raise it (or a subclass) from a processor for input that will never succeed.

    The failure policy does not retry it: the record goes straight to the dead letter (after
    bisecting, so only the records that raise it do). Classes listed in
    ``processing.retry.non_retryable_exceptions`` are treated the same way.
    """


class PartialBatchFailureError(ProcessingError):
    """A handler returned a BatchResult naming failed records (the error the dead letter records)."""


class DeadLetterError(ProcessingError):
    """The dead-letter destination could not be written; nothing is checkpointed past the records."""


class SinkError(ProcessingError):
    """A built-in sink could not land a batch (the failure policy retries it)."""
