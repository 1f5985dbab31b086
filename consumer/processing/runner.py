"""The runner: what the function form (:class:`~consumer.processing.function_processor.FunctionProcessor`)
hands each flush to, and the ownership events it passes on.

Three runners stack on one another and share this one contract: the failure policy (retries,
bisection, dead letters; the serial path), lanes (the same policy over ``parallelization_factor``
lanes at once) and tumbling windows (the policy window by window, the state saved before each
checkpoint). The function form calls every method whatever the runner is; a runner with nothing to
do for an event inherits the no-op from :class:`RunnerEvents`, so no caller asks which one it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from consumer.processing.api import _always
from consumer.records import ShardInfo, StreamRecord


def keep_every_record(record: StreamRecord) -> bool:
    """The ``keep`` of a function form with no filter: a runner that sees it takes the records as
    they are instead of asking about each one."""
    return True


def ignore_finished(sequence_numbers: Sequence[str]) -> None:
    """The serial path finishes records in order: its checkpoint says it all."""


@dataclass(frozen=True)
class Delivery:
    """One flush handed to a runner: the records, and the callbacks that tie them to the lease.

    ``keep`` picks the records the handler sees (the filter); ``checkpoint`` records a position
    (False: refused for now, written later); ``should_stop`` is asked between attempts;
    ``lease_held`` by a handler that wants to know; ``finished`` hears of records finished beyond
    the checkpoint, out of order (lanes, parked keys)."""

    shard: ShardInfo
    delivered: Sequence[StreamRecord]
    keep: Callable[[StreamRecord], bool]
    checkpoint: Callable[[str], object]
    should_stop: Callable[[], bool]
    millis_behind_latest: int = 0
    lease_held: Callable[[], bool] = _always
    finished: Callable[[Sequence[str]], None] = ignore_finished
    # Shard end: every record must be finished before this returns (a runner that parks keys,
    # processing.on_failure: park_key, waits for them instead of handing them back).
    drain: bool = False

    def parts(
        self,
    ) -> tuple[
        ShardInfo,
        Sequence[StreamRecord],
        Callable[[StreamRecord], bool],
        Callable[[str], object],
        Callable[[], bool],
    ]:
        """The five a runner always reads, for unpacking in one line."""
        return self.shard, self.delivered, self.keep, self.checkpoint, self.should_stop


class BatchRunner(Protocol):
    @property
    def handler(self) -> object:
        """The user's handler (or the windowed adapter around it): its per-shard hooks are called."""
        ...

    def run(self, delivery: Delivery) -> bool:
        """Process the delivered records (those ``keep`` accepts); True when all are finished and
        checkpointed.

        False means ``should_stop`` interrupted, or (``on_failure: park_key``, unless ``drain``)
        keys are parked: the checkpoint is just before the first unfinished record, and the
        unfinished records come back with the next delivery. ``LeaseLostError`` from ``checkpoint``
        propagates (stop, never retry); ``checkpoint`` returns False when the table refused it for
        now (it is written later: windows keep the state it would resume from). ``finished`` hears
        of records finished beyond the checkpoint, out of order (lanes, parked keys), before any
        checkpoint that covers them is tried.
        """
        ...

    def start(self, shard: ShardInfo, checkpoint: str) -> None:
        """A new ownership of ``shard`` resumes from ``checkpoint``."""
        ...

    def idle(self, shard: ShardInfo, millis_behind_latest: int, should_stop: Callable[[], bool]) -> None:
        """A call with nothing buffered (an empty poll, or a flush that finished everything)."""
        ...

    def finish(self, shard: ShardInfo, should_stop: Callable[[], bool]) -> None:
        """Shard end, after the last flush and before SHARD_END is checkpointed (raising retries it)."""
        ...

    def forget(self, shard: ShardInfo) -> None:
        """SHARD_END is checkpointed: whatever the runner kept for the shard is of no use any more."""
        ...

    def close(self) -> None:
        """The ownership ended (lost, stopped or finished); nothing more is run until ``start``."""
        ...


class RunnerEvents:
    """The ownership events a runner ignores unless it overrides them."""

    def start(self, shard: ShardInfo, checkpoint: str) -> None:
        return None

    def idle(self, shard: ShardInfo, millis_behind_latest: int, should_stop: Callable[[], bool]) -> None:
        return None

    def finish(self, shard: ShardInfo, should_stop: Callable[[], bool]) -> None:
        return None

    def forget(self, shard: ShardInfo) -> None:
        return None

    def close(self) -> None:
        return None
