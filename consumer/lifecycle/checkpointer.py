"""The checkpointer a shard's processor receives.

It enforces KCL's validation: a checkpoint must lie in (last checkpoint, largest delivered], so a
processor can never record progress past a record it was not given; at shard end, a checkpoint with
no argument becomes SHARD_END (which is what lets the children start). Writes go through the lease
coordinator, whose conditional write fails when the lease is gone.

It also collects what the processor :meth:`~ShardCheckpointer.finished` out of order beyond the
checkpoint (lanes): the shard consumer takes it after each call into the processor, so those
records are not delivered again while this worker keeps the shard (consumer/lifecycle/shard_machine.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from consumer.leases.errors import CheckpointRefusedError
from consumer.leases.model import ExtendedSequenceNumber
from consumer.lifecycle.ports import LeaseOps
from ground.positions import SHARD_END, is_position, ordinal
from ground.threads import Lock


def position_rank(position: str) -> tuple[int, int, int]:
    """KCL's order of checkpoint values: sentinels around positions (sequence number, sub-sequence)."""
    return ExtendedSequenceNumber.parse(position).rank


class ShardCheckpointer:
    def __init__(
        self,
        shard_id: str,
        leases: LeaseOps,
        last_checkpoint: str,
        counter: int | None = None,
        lock: Lock | None = None,
    ) -> None:
        self._shard_id = shard_id
        self._leases = leases
        self._counter = counter  # the ownership the consumer runs under: checkpoints only under it
        # Held across the checkpoint write, so that two writers (lanes) never move it back: it comes
        # from the worker's threads (ground/threads.py).
        self._lock: Lock = lock if lock is not None else threading.Lock()
        self._finished_lock = threading.Lock()  # never held across a call
        self.last_checkpoint = last_checkpoint
        self.largest_delivered: str | None = None
        self.at_shard_end = False
        # The furthest position the processor asked to checkpoint, written or not (a throttled table):
        # the records up to it are processed, so this consumer does not deliver them again.
        self.declared: str | None = None
        self._finished: list[str] = []

    def delivered(self, sequence_number: str) -> None:
        with self._lock:
            self.largest_delivered = sequence_number

    def taken_back(self, previous: str | None) -> None:
        """The processor raised on the batch delivered last: it is delivered again, so until then no
        checkpoint may cover more of it than the processor checkpointed itself — or asked to, the
        table refusing for now (``checkpoint()`` in ``shutdown_requested`` would otherwise record as
        done a batch that failed, and a deferred checkpoint could never be written)."""
        with self._lock:
            floor = self.last_checkpoint if is_position(self.last_checkpoint) else None
            known = [p for p in (previous, floor, self.declared) if p is not None]
            self.largest_delivered = max(known, key=ordinal) if known else None

    def finished(self, sequence_numbers: Sequence[str]) -> None:
        """Records finished beyond the checkpoint, out of order (from any thread)."""
        with self._finished_lock:
            self._finished.extend(sequence_numbers)

    def take_finished(self) -> tuple[str, ...]:
        """What :meth:`finished` collected since the last call (the shard consumer's)."""
        with self._finished_lock:
            taken, self._finished = tuple(self._finished), []
        return taken

    def checkpoint(self, sequence_number: str | None = None) -> None:
        with self._lock:
            target = self._target(sequence_number)
            if target is None:
                return
            self.declared = target  # processed through here, whether or not the write goes through
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
        if not is_position(sequence_number):
            raise CheckpointRefusedError(f"{sequence_number!r} is not a sequence number")
        if self.largest_delivered is None or ordinal(sequence_number) > ordinal(self.largest_delivered):
            raise CheckpointRefusedError(
                f"{self._shard_id}: {sequence_number} is beyond the largest sequence number delivered "
                f"({self.largest_delivered})"
            )
        if position_rank(sequence_number) < position_rank(self.last_checkpoint):
            raise CheckpointRefusedError(
                f"{self._shard_id}: {sequence_number} is before the last checkpoint {self.last_checkpoint}"
            )
        return sequence_number
