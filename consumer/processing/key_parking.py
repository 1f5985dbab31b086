"""``processing.on_failure: park_key``: a record that fails parks its item's key; that key's later
records wait behind it, in order, while every other key of the shard goes on.

DynamoDB Streams orders only the changes of one item, so a poison record need not hold up the
records of other items (what Powertools users ask for as "stop on the first failure, per key"; SQS
FIFO's ``skip_group_on_error``). Under the default policy (``block``,
:class:`~consumer.processing.failure_policy.FailurePolicyRunner`) a failing record holds its whole
shard until it succeeds or is dead-lettered. Here:

* a handler's answer is read **per key**: each record it names failed parks its key from that record
  on; the records before the first it names are done, and the other keys' records after it are
  delivered again at once, once (the answer may stop at its first failure, as AWS's example handler
  does, so they may not have been handled; a handler that names every failure, as Powertools' batch
  utility does, gets each of them once more);
* a call that raises is split in two (``bisect_on_error``) until a failing span holds one key's
  records, which then park that key; without bisection a failing span parks each key it holds;
* a parked key is retried on its own, with its records only: bisected within itself, backed off,
  given up to the dead letter exactly as the serial policy does, and a given-up record lets the key's
  next record go (a dead letter is the key's only way past a poison record, as it is the shard's);
* its new records join it in sequence order, whatever flush they arrive in; a key is unparked when
  it has nothing left to handle;
* the checkpoint is just before the first record not finished, in shard order: a parked record holds
  it, and the records of other keys finished beyond it are reported ``finished`` (not delivered
  again while this worker keeps the shard; a new owner reads them again from the checkpoint, as with
  lanes).

A flush does not wait for its parked keys: it returns with them unfinished (the function form keeps
them buffered and hands them back with the next flush), and each flush first retries the keys whose
back-off is over. So a parked key is retried when records arrive or, on a quiet shard, on the empty
calls ``worker.call_process_records_even_for_empty_record_list`` makes (required with this policy).
A flush does wait, as ``block`` would, at shard end (the children may only start once every record
is finished) and when ``max_parked_records`` records are held back (the parked ones and those
finished beyond them): that bounds the memory they take and what a new owner would read again.

One instance per shard (per lane with ``parallelization_factor``; a key always hashes to one lane),
on one thread at a time, like the serial policy it extends.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from consumer.processing.api import BatchHandler
from consumer.processing.dead_letter import DeadLetter
from consumer.processing.errors import HandlerStoppedError
from consumer.processing.failure_policy import OPERATION, FailurePolicyRunner, _Span
from consumer.processing.progress import FlushProgress, item_key
from consumer.processing.retry import RetryPolicy
from consumer.processing.runner import Delivery, keep_every_record
from consumer.records import ShardInfo, StreamRecord
from consumer.telemetry.metrics import Metrics
from ground.clock import Clock
from ground.positions import ordinal

log = logging.getLogger("consumer.processing")
DEFAULT_MAX_PARKED_RECORDS = 10_000


@dataclass
class _Parked:
    """One parked key: its unfinished records in order, and where its retries stand."""

    records: list[StreamRecord]
    spans: deque[int] = field(default_factory=deque)  # lengths of the next spans over ``records``
    attempts: int = 0  # failed attempts of the head span once it cannot be split any more
    due: int = 0  # monotonic ms of the next attempt


class KeyParkingRunner(FailurePolicyRunner):
    """The failure policy with ``on_failure: park_key`` (same ``run`` contract, module docstring)."""

    def __init__(
        self,
        handler: BatchHandler,
        policy: RetryPolicy,
        clock: Clock,
        *,
        dead_letter: DeadLetter | None = None,
        metrics: Metrics | None = None,
        batch_size: int = 1000,
        lane: int = 0,
        lanes: int = 1,
        max_parked_records: int = DEFAULT_MAX_PARKED_RECORDS,
    ) -> None:
        super().__init__(
            handler,
            policy,
            clock,
            dead_letter=dead_letter,
            metrics=metrics,
            batch_size=batch_size,
            lane=lane,
            lanes=lanes,
        )
        self._max_parked = max_parked_records
        self._parked: dict[bytes, _Parked] = {}
        self._ahead: set[int] = set()  # finished beyond this runner's checkpoint

    def for_lane(self, lane: int, lanes: int) -> KeyParkingRunner:
        return KeyParkingRunner(
            self._handler,
            self._policy,
            self._clock,
            dead_letter=self._dead_letter,
            metrics=self._metrics,
            batch_size=self._batch_size,
            lane=lane,
            lanes=lanes,
            max_parked_records=self._max_parked,
        )

    @property
    def parked_keys(self) -> int:
        return len(self._parked)

    @property
    def held_back(self) -> int:
        """Records this shard holds back: parked, and finished beyond the checkpoint they hold."""
        return sum(len(p.records) for p in self._parked.values()) + len(self._ahead)

    def start(self, shard: ShardInfo, checkpoint: str) -> None:
        self._forget()

    def close(self) -> None:
        self._forget()

    def _forget(self) -> None:
        self._parked.clear()
        self._ahead.clear()

    # ------------------------------------------------------------------------------ the flush

    def run(self, delivery: Delivery) -> bool:
        """Process the delivered records; True when every one is finished and checkpointed.

        False: some keys are still parked (their records are unfinished and the checkpoint stays
        before the first of them), or ``should_stop`` interrupted."""
        shard, delivered, keep, checkpoint, should_stop = delivery.parts()
        if not delivered:
            return not self._parked
        progress = FlushProgress(delivered, checkpoint, delivery.finished)
        first = ordinal(delivered[0].position)  # all before it is finished and checkpointed
        self._ahead = {n for n in self._ahead if n > first}
        if keep is keep_every_record:
            kept = list(delivered)
        else:
            kept = [r for r in delivered if keep(r)]
            self._note(progress, progress.finish([r for r in delivered if not keep(r)]))
        free = self._take_parked_records(kept)
        spans = deque(
            _Span(tuple(free[i : i + self._batch_size])) for i in range(0, len(free), self._batch_size)
        )
        try:
            if not self._run_due(shard, delivery, progress):
                return False
            if not self._run_free(shard, delivery, progress, spans):
                return False
            if not self._run_due(shard, delivery, progress):
                return False
            while self._parked and (delivery.drain or self.held_back >= self._max_parked):
                if not self._wait_for_due(should_stop) or not self._run_due(shard, delivery, progress):
                    return False
        except HandlerStoppedError:
            return False
        finally:
            sid = shard.shard_id
            self._metrics.gauge(OPERATION, "ParkedKeys", len(self._parked), "Count", sid)
            self._metrics.gauge(OPERATION, "ParkedRecords", self.held_back, "Count", sid)
        return not self._parked

    def _note(self, progress: FlushProgress, ahead: list[int]) -> None:
        """Keep count of what is finished beyond the checkpoint (the held-back bound)."""
        self._ahead.update(ahead)
        checkpointed = progress.checkpointed
        if checkpointed is not None and self._ahead and min(self._ahead) <= checkpointed:
            self._ahead = {n for n in self._ahead if n > checkpointed}

    def _take_parked_records(self, kept: list[StreamRecord]) -> list[StreamRecord]:
        """Give each parked key its records of this flush (in order); the others are free. A parked
        key with no record here was dropped by the function form (it no longer holds it): forgotten."""
        if not self._parked:
            return kept
        mine: dict[bytes, list[StreamRecord]] = {}
        free: list[StreamRecord] = []
        for record in kept:
            key = item_key(record)
            (mine.setdefault(key, []) if key in self._parked else free).append(record)
        for key in list(self._parked):
            parked = self._parked[key]
            records = mine.get(key)
            if not records:
                del self._parked[key]
            elif records[0].position != parked.records[0].position:
                self._parked[key] = _Parked(records)  # its head is another record now: start afresh
            else:
                parked.records = records
        return free

    def _park(self, key: bytes, records: list[StreamRecord], head: int) -> _Parked:
        parked = _Parked(records, deque([head]), due=self._clock.monotonic_millis())
        self._parked[key] = parked
        return parked

    # ------------------------------------------------------------------------------ free records

    def _run_free(
        self, shard: ShardInfo, delivery: Delivery, progress: FlushProgress, spans: deque[_Span]
    ) -> bool:
        """The records of keys that are not parked, span by span; a failure parks keys."""
        while spans:
            if delivery.should_stop():
                return False
            span = spans.popleft()
            error, failed = self._attempt(
                shard, span.records, delivery.millis_behind_latest, delivery.should_stop, delivery.lease_held
            )
            if error is None:
                self._note(progress, progress.finish(span.records))
                continue
            keys = [item_key(r) for r in span.records]
            parking: dict[bytes, list[StreamRecord]] = {}
            if failed:
                # Per key: each named record parks its key from there on. What precedes the first
                # is done; the other keys' records after it run again at once (an answer may stop
                # at its first failure, as AWS's example handler does: they may not be handled).
                named = set(failed)
                again: list[StreamRecord] = []
                for index, (record, key) in enumerate(zip(span.records, keys, strict=True)):
                    if key in parking or index in named:
                        parking.setdefault(key, []).append(record)
                    elif index > failed[0]:
                        again.append(record)
                self._note(progress, progress.finish(span.records[: failed[0]]))
                if again:
                    spans.appendleft(_Span(tuple(again)))
                    self._metrics.count(OPERATION, "RecordsRetried", len(again), shard_id=shard.shard_id)
            elif len(set(keys)) > 1 and self._policy.bisect_on_error:
                middle = len(span.records) // 2
                spans.appendleft(_Span(span.records[middle:]))
                spans.appendleft(_Span(span.records[:middle]))
                self._metrics.count(OPERATION, "RecordsRetried", len(span.records), shard_id=shard.shard_id)
                continue
            else:
                for record, key in zip(span.records, keys, strict=True):
                    parking.setdefault(key, []).append(record)
            later = self._later_records(spans, set(parking))
            for key, records in parking.items():
                # A named record is retried alone first (as the serial path splits there); a key's
                # records that failed together are its head span (bisected within the key).
                head = 1 if failed and self._policy.bisect_on_error else len(records)
                parked = self._park(key, records + later.get(key, []), head)
                if len(span.records) == 1 and not self._fail_head(shard, delivery, progress, parked, error):
                    return False  # a span of one record failed: an attempt, as on the serial path
            log.warning(
                "shard %s: %d key(s) parked at sequence number(s) %s (%r): their later records wait, "
                "the shard's other keys go on",
                shard.shard_id,
                len(parking),
                ", ".join(records[0].position for records in list(parking.values())[:5]),
                error,
            )
        return True

    @staticmethod
    def _later_records(spans: deque[_Span], keys: set[bytes]) -> dict[bytes, list[StreamRecord]]:
        """Take the records of ``keys`` out of the spans still to run (they wait behind their key)."""
        taken: dict[bytes, list[StreamRecord]] = {}
        kept: list[_Span] = []
        for span in spans:
            rest = []
            for record in span.records:
                key = item_key(record)
                if key in keys:
                    taken.setdefault(key, []).append(record)
                else:
                    rest.append(record)
            if rest:
                kept.append(_Span(tuple(rest), span.attempts))
        spans.clear()
        spans.extend(kept)
        return taken

    # ------------------------------------------------------------------------------ parked keys

    def _run_due(self, shard: ShardInfo, delivery: Delivery, progress: FlushProgress) -> bool:
        """Retry every parked key whose back-off is over, oldest first, until each waits again."""
        for key in [k for k, parked in self._parked.items() if not parked.records]:
            del self._parked[key]  # its last record was dead-lettered
        for key in sorted(self._parked, key=lambda k: ordinal(self._parked[k].records[0].position)):
            parked = self._parked.get(key)
            if parked is None or parked.due > self._clock.monotonic_millis():
                continue
            if not self._run_key(shard, delivery, progress, key, parked):
                return False
        return True

    def _run_key(
        self, shard: ShardInfo, delivery: Delivery, progress: FlushProgress, key: bytes, parked: _Parked
    ) -> bool:
        """One key's records, span by span, until it is empty (unparked) or waits for its back-off."""
        while parked.records:
            if delivery.should_stop():
                return False
            if parked.due > self._clock.monotonic_millis():
                return True
            if not parked.spans:
                parked.spans.append(min(len(parked.records), self._batch_size))
            span = tuple(parked.records[: parked.spans[0]])
            error, failed = self._attempt(
                shard, span, delivery.millis_behind_latest, delivery.should_stop, delivery.lease_held
            )
            if error is None:
                self._done_head(progress, parked, len(span))
                continue
            if failed and failed[0]:
                self._done_head(progress, parked, failed[0])  # before the first failure: done
                span = span[failed[0] :]
            if len(span) > 1 and self._policy.bisect_on_error:
                # The failing record alone first (named, or by halving); no attempt used up.
                first = 1 if failed else len(span) // 2
                parked.spans[0] = len(span) - first
                parked.spans.appendleft(first)
                self._metrics.count(OPERATION, "RecordsRetried", len(span), shard_id=shard.shard_id)
                continue
            if not self._fail_head(shard, delivery, progress, parked, error):
                return False
        del self._parked[key]
        return True

    def _done_head(self, progress: FlushProgress, parked: _Parked, count: int) -> None:
        """The first ``count`` records of the key are finished (handled, or dead-lettered)."""
        head = parked.records[:count]
        del parked.records[:count]
        if parked.spans:
            left = parked.spans.popleft() - count
            if left > 0:
                parked.spans.appendleft(left)
        parked.attempts = 0
        self._note(progress, progress.finish(head))

    def _fail_head(
        self,
        shard: ShardInfo,
        delivery: Delivery,
        progress: FlushProgress,
        parked: _Parked,
        error: BaseException,
    ) -> bool:
        """The head span cannot be split further and failed: an attempt used up. Given up to the dead
        letter (the key's next records may go), or retried after the back-off."""
        parked.attempts += 1
        span = _Span(tuple(parked.records[: parked.spans[0] if parked.spans else 1]), parked.attempts)
        if self._gives_up(span, error, parked.attempts):
            if not self._send_to_dead_letter(shard, span, error, parked.attempts, delivery.should_stop):
                return False
            self._done_head(progress, parked, len(span.records))
            parked.due = self._clock.monotonic_millis()
            return True
        delay = self._policy.backoff_millis(parked.attempts)
        parked.due = self._clock.monotonic_millis() + delay
        self._metrics.count(OPERATION, "RecordsRetried", len(span.records), shard_id=shard.shard_id)
        log.error(
            "shard %s: key parked at sequence number %s (%d of its records waiting) after %d attempts: "
            "%r (%s); retrying in %d ms while the shard's other keys go on",
            shard.shard_id,
            span.records[0].position,
            len(parked.records),
            parked.attempts,
            error,
            self._why_retried(error),
            delay,
        )
        return True

    def _wait_for_due(self, should_stop: Callable[[], bool]) -> bool:
        """Sleep until the earliest parked key may be retried (shard end, or too much held back)."""
        due = min(parked.due for parked in self._parked.values())
        return self._sleep(max(0, due - self._clock.monotonic_millis()), should_stop)
