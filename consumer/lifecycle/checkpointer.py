"""The checkpointer a shard's processor receives.

It enforces KCL's validation: a checkpoint must lie in (last checkpoint, largest delivered], so a
processor can never record progress past a record it was not given; at shard end, a checkpoint with
no argument becomes SHARD_END (which is what lets the children start). Writes go through the lease
coordinator, whose conditional write fails when the lease is gone.
"""

from __future__ import annotations

import threading

from consumer.leases.errors import CheckpointRefusedError
from consumer.leases.model import ExtendedSequenceNumber
from consumer.lifecycle.ports import LeaseOps
from ground.positions import SHARD_END


def position_rank(position: str) -> tuple[int, int, int]:
    """KCL's order of checkpoint values: sentinels around integer sequence numbers."""
    return ExtendedSequenceNumber(position).rank


class ShardCheckpointer:
    def __init__(
        self, shard_id: str, leases: LeaseOps, last_checkpoint: str, counter: int | None = None
    ) -> None:
        self._shard_id = shard_id
        self._leases = leases
        self._counter = counter  # the ownership the consumer runs under: checkpoints only under it
        self._lock = threading.Lock()
        self.last_checkpoint = last_checkpoint
        self.largest_delivered: str | None = None
        self.at_shard_end = False

    def delivered(self, sequence_number: str) -> None:
        with self._lock:
            self.largest_delivered = sequence_number

    def checkpoint(self, sequence_number: str | None = None) -> None:
        with self._lock:
            target = self._target(sequence_number)
            if target is None:
                return
            self._leases.checkpoint(self._shard_id, target, self._counter)
            self.last_checkpoint = target

    def checkpoint_shard_end(self) -> None:
        with self._lock:
            if not self.at_shard_end:
                raise CheckpointRefusedError(f"{self._shard_id} has not reached its end")
            self._leases.checkpoint(self._shard_id, SHARD_END, self._counter)
            self.last_checkpoint = SHARD_END

    def _target(self, sequence_number: str | None) -> str | None:
        if sequence_number is None:
            if self.at_shard_end:
                return SHARD_END
            if self.largest_delivered is None or self.largest_delivered == self.last_checkpoint:
                return None  # nothing delivered since the last checkpoint
            return self.largest_delivered
        if not sequence_number.isdigit():
            raise CheckpointRefusedError(f"{sequence_number!r} is not a sequence number")
        if self.largest_delivered is None or int(sequence_number) > int(self.largest_delivered):
            raise CheckpointRefusedError(
                f"{self._shard_id}: {sequence_number} is beyond the largest sequence number delivered "
                f"({self.largest_delivered})"
            )
        if position_rank(sequence_number) < position_rank(self.last_checkpoint):
            raise CheckpointRefusedError(
                f"{self._shard_id}: {sequence_number} is before the last checkpoint {self.last_checkpoint}"
            )
        return sequence_number
