"""A checkpointer that keeps progress in memory, with the lifecycle's exact rules.

Tests (and the runnable examples) drive processors with it; it refuses everything the real one
refuses, so a processor that passes against it cannot move a real checkpoint past a record it
did not finish.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from consumer.processing.errors import CheckpointRefusedError, LeaseLostError
from ground.positions import LATEST, SHARD_END, TRIM_HORIZON, is_position, ordinal

_STARTS = (TRIM_HORIZON, LATEST)


class InMemoryCheckpointer:
    def __init__(self, shard_id: str = "shard-0", last_checkpoint: str = "TRIM_HORIZON") -> None:
        self.shard_id = shard_id
        self.last_checkpoint = last_checkpoint
        self.largest_delivered: str | None = None
        self.at_shard_end = False
        self.lease_held = True
        self.history: list[str] = []
        self.finished_out_of_order: list[str] = []
        self._lock = threading.Lock()

    def delivered(self, sequence_number: str) -> None:
        """What the lifecycle does before handing a batch over: widen the allowed range."""
        with self._lock:
            if self.largest_delivered is None or ordinal(sequence_number) > ordinal(self.largest_delivered):
                self.largest_delivered = sequence_number

    def lose_lease(self) -> None:
        with self._lock:
            self.lease_held = False

    def checkpoint(self, sequence_number: str | None = None) -> None:
        with self._lock:
            if not self.lease_held:
                raise LeaseLostError("checkpoint", self.shard_id, None)
            target = self.largest_delivered if sequence_number is None else sequence_number
            if target is None:
                return
            if not is_position(target):
                raise CheckpointRefusedError(f"{target!r} is not a sequence number")
            if self.largest_delivered is None or ordinal(target) > ordinal(self.largest_delivered):
                raise CheckpointRefusedError(
                    f"{self.shard_id}: {target} is beyond the largest delivered ({self.largest_delivered})"
                )
            if self.last_checkpoint == SHARD_END:
                raise CheckpointRefusedError(f"{self.shard_id}: already at SHARD_END")
            if self.last_checkpoint not in _STARTS and ordinal(target) < ordinal(self.last_checkpoint):
                raise CheckpointRefusedError(
                    f"{self.shard_id}: {target} is before the last checkpoint {self.last_checkpoint}"
                )
            self.last_checkpoint = target
            self.history.append(target)

    def finished(self, sequence_numbers: Sequence[str]) -> None:
        with self._lock:
            self.finished_out_of_order.extend(sequence_numbers)

    def checkpoint_shard_end(self) -> None:
        with self._lock:
            if not self.lease_held:
                raise LeaseLostError("checkpoint", self.shard_id, None)
            if not self.at_shard_end:
                raise CheckpointRefusedError(f"{self.shard_id} has not reached its end")
            self.last_checkpoint = SHARD_END
            self.history.append(SHARD_END)
