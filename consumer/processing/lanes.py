"""Per-key parallelism inside one shard (``processing.parallelization_factor``, Lambda's
ParallelizationFactor): one flush of the function form spread over N lanes that run at once.

A handler that calls a slow service record by record is bound by that service's latency: at 20 ms a
record, one shard moves 50 records/s, whatever the worker's CPU. DynamoDB Streams only orders the
changes *of one item*, so the records of different items may be handled at the same time:

* every record goes to lane ``hash(its Keys) % N`` (a stable hash of the wire form of the keys), so
  all records of one item are in one lane, in sequence order, and a lane handles them one batch at
  a time: per-key order is kept;
* each lane runs the ordinary failure policy (:class:`~consumer.processing.failure_policy.
  FailurePolicyRunner`) over its records — retries, bisection, dead letters and partial batch
  failures mean what they mean on the serial path, per lane — on a thread of a pool that belongs to
  this processor (handlers wait on I/O, so threads, not processes);
* the checkpoint only ever moves to the highest sequence number below which every record of every
  lane is finished: the record just before the first unfinished one in shard order. A lane that is
  stuck on a record holds the checkpoint there while the other lanes go on; nothing after an
  unfinished record is checkpointed and nothing is skipped;
* with ``on_failure: park_key`` a lane parks a failing key and goes on with its other keys: what it
  finishes beyond the parked record counts for the shard's checkpoint all the same, and the lane
  runner, one per lane for the whole ownership, keeps the key parked across flushes (a key always
  hashes to the same lane);
* the flush returns only when every lane has stopped (finished, interrupted by ``should_stop``, or
  left with parked keys only),
  so the lifecycle's graceful stop, hand-over and fencing — which wait for ``process_records`` to
  return — drain every lane before the lease is given away. One lane that raises (the lease is lost,
  an unexpected error) stops the others at their next record.

The serial path (factor 1) does not come here at all: :func:`consumer.processing.factory.
policy_wrapped` wraps the runner only when the factor is above 1.
"""

from __future__ import annotations

import contextvars
import threading
import zlib
from bisect import bisect_right
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import replace

import orjson

from consumer.processing.api import BatchHandler
from consumer.processing.errors import LeaseLostError
from consumer.processing.failure_policy import OPERATION, FailurePolicyRunner, created_seconds
from consumer.processing.runner import Delivery, RunnerEvents, ignore_finished, keep_every_record
from consumer.records import ShardInfo, StreamRecord
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.clock import Clock
from ground.positions import ordinal
from ground.threads import SYSTEM_THREADS, Event, Lock, Threads

MAX_LANES = 10  # Lambda's ParallelizationFactor range is 1-10 too


def lane_of(record: StreamRecord, lanes: int) -> int:
    """The lane of a record: a stable hash (CRC-32, the same in every process) of its item's keys.

    Part of what the change log stores: the changelog sink writes each lane to its own folder, and
    the pipeline takes lanes of one layout to hold disjoint records (pipeline.changelog
    .may_hold_copies). Changing this hash would let a replay across an upgrade put one change in
    two lanes of one layout; change the folder naming with it."""
    if lanes <= 1:
        return 0
    return zlib.crc32(orjson.dumps(record.typed_keys, option=orjson.OPT_SORT_KEYS)) % lanes


class _Flush:
    """One flush's progress over its lanes: what is finished, and the checkpoint it allows."""

    def __init__(
        self,
        delivered: Sequence[StreamRecord],
        lanes: dict[int, tuple[StreamRecord, ...]],
        checkpoint: Callable[[str], object],
        finished: Callable[[Sequence[str]], None] = ignore_finished,
        lock: Lock | None = None,
        *,
        stop: Event | None = None,
    ) -> None:
        self.delivered = delivered
        self.lanes = lanes
        self._checkpoint = checkpoint
        self._finished_out_of_order = finished
        self._position = {r.position: i for i, r in enumerate(delivered)}
        self._numbers = {lane: [ordinal(r.position) for r in records] for lane, records in lanes.items()}
        self._finished = dict.fromkeys(lanes, 0)  # per lane: how many of its records are finished
        # Per lane: records finished beyond that prefix (a lane that parks keys, on_failure: park_key).
        self._beyond: dict[int, set[str]] = {lane: set() for lane in lanes}
        self._checkpointed = -1  # index in ``delivered`` checkpointed by this flush
        # Held across the checkpoint write (checkpoints go up): from the worker's threads.
        self._lock: Lock = lock if lock is not None else threading.Lock()
        # One lane raised: the others stop at their next record (an event of the worker's threads).
        self.stop: Event = stop if stop is not None else SYSTEM_THREADS.event()

    def first_unfinished(self) -> StreamRecord | None:
        """The record the checkpoint waits for: the first unfinished one in shard order."""
        with self._lock:
            index = self._first_unfinished_index()
        return self.delivered[index] if index < len(self.delivered) else None

    def _first_unfinished_index(self) -> int:
        waiting = (
            self._position[records[self._finished[lane]].position]
            for lane, records in self.lanes.items()
            if self._finished[lane] < len(records)
        )
        return min(waiting, default=len(self.delivered))

    def _skip_beyond(self, lane: int) -> None:
        """Lane ``lane``'s prefix grows over the records it finished beyond it."""
        beyond, records, done = self._beyond[lane], self.lanes[lane], self._finished[lane]
        while done < len(records) and records[done].position in beyond:
            beyond.discard(records[done].position)
            done += 1
        self._finished[lane] = done

    def lane_finished(self, lane: int, sequence_numbers: Sequence[str]) -> None:
        """Lane ``lane`` finished these records beyond its own checkpoint (it parks a key before
        them): they count as finished for the shard's checkpoint, and beyond it they are reported
        (``finished``) so they are not delivered again."""
        with self._lock:
            self._beyond[lane].update(sequence_numbers)
            self._skip_beyond(lane)
            target = self._first_unfinished_index() - 1
            ahead = [n for n in sequence_numbers if self._position[n] > target]
            if ahead:
                self._finished_out_of_order(ahead)
            if target > self._checkpointed:
                self._checkpoint(self.delivered[target].position)
                self._checkpointed = target

    def lane_checkpoint(self, lane: int, sequence_number: str) -> None:
        """Lane ``lane`` finished its records up to ``sequence_number``: move the shard's checkpoint
        to just before the first unfinished record of any lane (under a lock: checkpoints go up).

        The lane's records finished beyond that checkpoint are reported first (``finished``): the
        checkpoint waits for the slowest lane, and if the worker fences itself and takes the lease
        back, the records this lane ran ahead on must not be handed to the handler again."""
        with self._lock:
            before = self._finished[lane]
            done = bisect_right(self._numbers[lane], ordinal(sequence_number))
            self._finished[lane] = max(before, done)
            self._skip_beyond(lane)
            target = self._first_unfinished_index() - 1
            ahead = [r.position for r in self.lanes[lane][before:done] if self._position[r.position] > target]
            if ahead:
                self._finished_out_of_order(ahead)
            if target > self._checkpointed:
                self._checkpoint(self.delivered[target].position)
                self._checkpointed = target


class LaneRunner(RunnerEvents):
    """A :class:`FailurePolicyRunner` over ``lanes`` lanes at once (same ``run`` contract)."""

    def __init__(
        self,
        runner: FailurePolicyRunner,
        lanes: int,
        clock: Clock,
        *,
        metrics: Metrics | None = None,
        threads: Threads = SYSTEM_THREADS,
    ) -> None:
        if not 2 <= lanes <= MAX_LANES:
            raise ValueError(f"a LaneRunner needs 2-{MAX_LANES} lanes, not {lanes}")
        self._lanes = lanes
        self._runners = tuple(runner.for_lane(i, lanes) for i in range(lanes))
        self._handler = runner.handler
        self._clock = clock
        self._metrics = metrics or NullMetrics()
        self._threads = threads
        self._pool: Executor | None = None
        self._pool_lock = threading.Lock()

    @property
    def handler(self) -> BatchHandler:
        return self._handler

    @property
    def lanes(self) -> int:
        return self._lanes

    def _executor(self, shard: ShardInfo) -> Executor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = self._threads.pool(self._lanes, f"lanes-{shard.shard_id[-12:]}")
            return self._pool

    def start(self, shard: ShardInfo, checkpoint: str) -> None:
        for runner in self._runners:
            runner.start(shard, checkpoint)

    def close(self) -> None:
        """The ownership ended: let the pool's threads go (a new flush would start a new pool), and
        the lanes forget what they kept (parked keys)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        for runner in self._runners:
            runner.close()

    def run(self, delivery: Delivery) -> bool:
        """Process ``delivered`` over the lanes; True when all are finished and checkpointed.

        False: ``should_stop`` interrupted a lane (the checkpoint is just before the first unfinished
        record). ``LeaseLostError`` from ``checkpoint`` propagates, after every lane has stopped.
        """
        shard, delivered, keep, checkpoint, should_stop = delivery.parts()
        if not delivered:
            return True
        grouped: dict[int, list[StreamRecord]] = {}
        for record in delivered:
            if keep(record):
                grouped.setdefault(lane_of(record, self._lanes), []).append(record)
        if not grouped:
            checkpoint(delivered[-1].position)  # everything was filtered out
            return True
        flush = _Flush(
            delivered,
            {lane: tuple(records) for lane, records in grouped.items()},
            checkpoint,
            delivery.finished,
            self._threads.lock(),
            stop=self._threads.event(),
        )
        sid = shard.shard_id
        self._metrics.gauge(OPERATION, "LanesInFlight", len(grouped), "Count", sid)
        self._metrics.gauge(
            OPERATION, "LaneRecordsInFlight", max(len(r) for r in grouped.values()), "Count", sid
        )

        def stop() -> bool:
            return flush.stop.is_set() or should_stop()

        def one_lane(lane: int) -> bool:
            try:
                return self._runners[lane].run(
                    replace(
                        delivery,
                        delivered=flush.lanes[lane],
                        keep=keep_every_record,
                        checkpoint=lambda sequence_number: flush.lane_checkpoint(lane, sequence_number),
                        should_stop=stop,
                        finished=lambda numbers: flush.lane_finished(lane, numbers),
                    )
                )
            except BaseException:
                flush.stop.set()
                raise
            finally:
                self._publish_lag(flush, sid)

        pool = self._executor(shard)
        futures: list[Future[bool]] = [
            pool.submit(contextvars.copy_context().run, one_lane, lane) for lane in sorted(flush.lanes)
        ]
        outcomes: list[bool] = []
        errors: list[BaseException] = []
        for future in futures:  # every lane has stopped before this returns or raises
            error = future.exception()
            if error is None:
                outcomes.append(future.result())
            else:
                errors.append(error)
        lost = [e for e in errors if isinstance(e, LeaseLostError)]
        if lost:
            raise lost[0]
        if errors:
            raise errors[0]
        return all(outcomes)

    def _publish_lag(self, flush: _Flush, shard_id: str) -> None:
        """How far behind the slowest lane is: the age of the record the checkpoint waits for."""
        waiting = flush.first_unfinished()
        created = 0.0 if waiting is None else created_seconds(waiting)  # 0: none, or it does not read
        if created <= 0:
            return
        lag = max(0.0, self._clock.wall_millis() - created * 1000)
        self._metrics.gauge(OPERATION, "SlowestLaneLag", lag, "Milliseconds", shard_id)
