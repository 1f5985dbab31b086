"""What the scheduler does about stalled shards (the rule: :mod:`consumer.lifecycle.stalls`).

It looks once a second, passing the watch what each consumer is doing; for each stalled shard it
logs the stuck call's stack (the thread running the consumer's step, and the lanes of its shard:
where a processor that hangs is found), publishes ``StalledShards`` and gives the lease up through
the coordinator, which keeps this worker from taking it straight back (another worker with room
takes it; the worker's own taker may after a stall timeout). The thread that is stuck cannot be
stopped from Python: it is left to return on its own, and what it returns is ignored (the scheduler
orphans its consumer). Until it returns, this worker does not take the shard back (the lease side
asks :meth:`StallMover.stuck` at each round: the count is kept here alone), and counts it in
``StalledShards`` again every stall timeout: a shard that hangs in every worker ends up free and
avoided by all, and the alarm must keep saying so.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING

from consumer.leases.errors import LeaseError
from consumer.lifecycle.ports import LeaseOps
from consumer.lifecycle.stalls import Observed, Stall, StallWatch
from consumer.telemetry.catalogue import log_shard_stalled
from consumer.telemetry.metrics import Metrics
from ground.clock import Clock
from ground.settings import WorkerSettings
from ground.threads import Threads

if TYPE_CHECKING:
    from consumer.lifecycle.shard_consumer import ShardConsumer

log = logging.getLogger("consumer.lifecycle")

LOOK_EVERY_MILLIS = 1_000
STACK_LINES = 40  # of each stuck thread, innermost last


class StallMover:
    def __init__(
        self,
        *,
        leases: LeaseOps,
        settings: WorkerSettings,
        clock: Clock,
        metrics: Metrics,
        threads: Threads,
    ) -> None:
        self._leases = leases
        self._clock = clock
        self._metrics = metrics
        timeout = settings.stall_timeout_millis
        self._watch = StallWatch(timeout) if timeout is not None else None
        self._next_look = 0
        self._threads: dict[int, int] = {}  # id(consumer) -> the thread running its step
        self._lock = threads.lock()
        self._found: dict[str, Stall] = {}
        # Shards given up while their call here was stuck, and when StalledShards last counted them:
        # counted again every stall timeout until the call returns, so the alarm stays in ALARM while
        # a shard waits with nobody able to take it (every worker it hung in avoids it). Under the
        # lock: the lease side's taker asks for them (stuck), a step's callback says one returned.
        self._stuck: dict[str, int] = {}
        self._timeout = timeout

    def stepping(self, consumer: ShardConsumer) -> int | None:
        """Run one step of ``consumer``, remembering which thread runs it (for the stack of a stall)."""
        with self._lock:
            self._threads[id(consumer)] = threading.get_ident()
        try:
            return consumer.step()
        finally:
            with self._lock:
                self._threads.pop(id(consumer), None)

    def running(self) -> int:
        """Steps running now, orphaned ones included (after a drain: calls that never returned)."""
        with self._lock:
            return len(self._threads)

    def due(self, consumers: Mapping[str, ShardConsumer], running: Mapping[str, int]) -> list[str]:
        """The stalled shards among ``consumers`` (``running``: when each running step began), at
        most once a second."""
        now = self._clock.monotonic_millis()
        if self._watch is None or now < self._next_look:
            return []
        self._next_look = now + LOOK_EVERY_MILLIS
        self._count_still_stuck(now)
        ended = self._leases.shards_with_children() if consumers else frozenset()
        observed = [
            Observed(
                shard_id,
                running.get(shard_id),
                progress_of(consumer),
                shard_id in ended and not consumer.finished,
            )
            for shard_id, consumer in consumers.items()
        ]
        stalls = self._watch.look(now, observed)
        self._found = {stall.shard_id: stall for stall in stalls}
        return list(self._found)

    def _count_still_stuck(self, now: int) -> None:
        assert self._timeout is not None
        with self._lock:
            again = [shard_id for shard_id, counted in self._stuck.items() if now - counted >= self._timeout]
            self._stuck.update(dict.fromkeys(again, now))
        for shard_id in again:
            log.error("shard %s: the stalled call left behind has still not returned", shard_id)
            self._metrics.count("ProcessTask", "StalledShards", 1, shard_id=shard_id)

    def returned(self, shard_id: str) -> None:
        """The call a stalled shard was given up under returned (no longer counted, nor avoided)."""
        with self._lock:
            self._stuck.pop(shard_id, None)

    def stuck(self) -> frozenset[str]:
        """Shards given up as stalled whose call here has not returned: the lease side asks at each
        round (LeaseOps.ask_stuck_calls), and neither takes nor adopts them back meanwhile."""
        with self._lock:
            return frozenset(self._stuck)

    def move(self, consumer: ShardConsumer, *, stuck: bool) -> None:
        """Say so, with the stack, and give the lease up (the consumer was orphaned by the caller;
        ``stuck``: its step is still running, so the shard is not taken back here until it returns)."""
        shard_id = consumer.shard_id
        stall = self._found.pop(shard_id, None)
        if self._watch is not None:
            self._watch.forget(shard_id)
        with self._lock:
            thread = self._threads.get(id(consumer))
        what = stall.describe() if stall else "stalled"
        if stall is not None and stall.kind == "call" and thread is None:
            what = (
                f"its step has waited {stall.stalled_millis / 1000:.0f} s for one of the worker's "
                "threads (worker.max_worker_threads: every one is busy, stalled calls hold some)"
            )
        log_shard_stalled(log, shard_id, what, stuck_stacks(thread, f"lanes-{shard_id[-12:]}"))
        self._metrics.count("ProcessTask", "StalledShards", 1, shard_id=shard_id)
        if stuck:
            with self._lock:
                self._stuck[shard_id] = self._clock.monotonic_millis()
        consumer.lease_lost()
        try:
            self._leases.give_up_stalled(shard_id, consumer.counter)
        except LeaseError as exc:
            log.warning(
                "shard %s: the stalled shard's lease was not released (%s); it expires instead", shard_id, exc
            )


def stuck_stacks(thread: int | None, lane_prefix: str) -> str:
    """The stacks of the thread running the stalled step and of its shard's lanes (where a handler
    that hangs is), innermost call last; empty when none is running (a reader that never ends)."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    wanted = [
        i for i, name in names.items() if i is not None and (i == thread or name.startswith(lane_prefix))
    ]
    parts = []
    for ident in wanted:
        frame = frames.get(ident)
        if frame is None:
            continue
        lines = "".join(traceback.format_stack(frame)).rstrip().splitlines()[-STACK_LINES:]
        parts.append(f"thread {names.get(ident)}:\n" + "\n".join(lines))
    return "\n".join(parts)


def progress_of(consumer: ShardConsumer) -> str:
    """Where the consumer is, for the watch: its checkpoint, and the pages a reload under way has read
    (``worker.on_trimmed: reload`` moves no checkpoint until the whole table is delivered, which may
    take longer than the stall timeout; a reload whose pages keep failing stalls as a batch does)."""
    run = consumer.machine.reload
    checkpoint = consumer.checkpointer.last_checkpoint
    return checkpoint if run is None else f"{checkpoint} reload page {run.pages}"
