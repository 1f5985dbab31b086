"""worker.on_trimmed=reload in the pure shard machine: the gap found, the table re-delivered page by
page at the pace the driver reports, and only then the shard's first readable batch; a crash mid-run
finds the gap again from the lease's checkpoint."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.lifecycle.reload_run import (
    DeliverReload,
    EndReload,
    Paced,
    Reloaded,
    ReloadStarted,
    Scanned,
    ScanPage,
    StartReload,
)
from consumer.lifecycle.shard_actions import (
    Action,
    Deliver,
    Done,
    EndShard,
    Failed,
    Fetch,
    Fetched,
    Finished,
    GetIterator,
    Initialize,
    IteratorAt,
    Outcome,
    Request,
    Retrying,
    TrimmedLoss,
    Wait,
)
from consumer.lifecycle.shard_machine import ShardMachine
from consumer.lifecycle.states import ShardState
from consumer.processing.gap import GapEvent
from consumer.records import ShardInfo
from consumer.streams.errors import ShardNotFoundError, TrimmedDataError
from ground.settings import WorkerSettings
from tests.unit.lifecycle.fakes import record

SETTINGS = WorkerSettings(
    idle_time_between_reads_millis=200,
    task_backoff_time_millis=100,
    on_trimmed="reload",
    reload_scan_segments=2,
    reload_page_items=2,
)
CHECKPOINT = "000000000000000000005"
SHARD = ShardInfo("s1")
READ_LIMIT = 3  # records a Fetch asks for
READABLE = tuple(record("s1", n) for n in (50, 60))


def machine(checkpoint: str = CHECKPOINT, **changes: object) -> ShardMachine:
    return ShardMachine(SHARD, checkpoint, SETTINGS.model_copy(update=changes), READ_LIMIT, random.Random(7))


def gap(event: StartReload) -> GapEvent:
    return GapEvent(SHARD, "gap", event.last_position, event.first_readable, None, None, "r-1", 100.0)


class Driver:
    """Answers the machine's requests as a world where the checkpoint is at ``CHECKPOINT``, the data
    after it trimmed, and the table read in ``pages`` (per segment) of two records each."""

    def __init__(self, m: ShardMachine, pages: int = 2, paced_every: int = 0) -> None:
        self.m = m
        self.now = 1_000
        self.pages = {s: pages for s in range(SETTINGS.reload_scan_segments)}
        self.paced_every = paced_every
        self.scans = 0
        self.log: list[Action] = []
        self.trimmed_once = False

    def outcome(self, request: Request) -> Outcome:
        if isinstance(request, GetIterator):
            if request.position == CHECKPOINT:
                return Failed(TrimmedDataError("trimmed"))
            return IteratorAt("it")
        if isinstance(request, Fetch):
            return Fetched(READABLE, 0, "it-2")
        if isinstance(request, StartReload):
            return ReloadStarted(gap(request))
        if isinstance(request, ScanPage):
            self.scans += 1
            if self.paced_every and self.scans % self.paced_every == 0:
                return Paced(self.now + 500)
            self.pages[request.segment] -= 1
            left = self.pages[request.segment]
            items = tuple(
                record("reload", request.first_number + i, key=f"k{request.segment}") for i in range(2)
            )
            return Scanned(items, None if left == 0 else {"pk": {"S": f"after-{left}"}}, 1.5)
        return Done()

    def run_until(self, stop: type, steps: int = 200) -> None:
        """Step until the machine asks for a ``stop`` (left unanswered)."""
        for _ in range(steps):
            self.m.observe(lease_gone=False, stop=False, checkpoint=self.m.checkpoint)
            while True:
                action = self.m.next_action(self.now)
                self.log.append(action)
                if isinstance(action, Wait):
                    self.now = max(self.now, action.until)
                    break
                if isinstance(action, Finished):
                    return
                if isinstance(action, stop):
                    return  # left unanswered: the test answers it
                if isinstance(action, Request):
                    self.m.answer(self.outcome(action), self.now, checkpoint=self.m.checkpoint)

    def of(self, kind: type) -> list[Action]:
        return [a for a in self.log if isinstance(a, kind)]


def test_a_gap_reloads_the_table_before_the_first_readable_record_and_says_what_it_reloaded() -> None:
    d = Driver(machine())
    d.run_until(Deliver)
    kinds = [type(a) for a in d.log if isinstance(a, Request)]
    assert kinds[:3] == [
        Initialize,
        GetIterator,
        GetIterator,
    ]  # at the checkpoint (trimmed), then TRIM_HORIZON
    start = d.of(StartReload)[0]
    assert start == StartReload(CHECKPOINT, READABLE[0].sequence_number, None, 1_700_000_000.0)
    assert d.of(TrimmedLoss)[0].on_trimmed == "reload"  # type: ignore[attr-defined]
    # Every page of every segment, one page a step, round robin; then the end; then the shard.
    scans = d.of(ScanPage)
    assert [s.segment for s in scans] == [0, 1, 0, 1]  # type: ignore[attr-defined]
    assert [s.first_number for s in scans] == [1, 3, 5, 7]  # type: ignore[attr-defined]
    assert scans[2].start_key == {"pk": {"S": "after-1"}}  # type: ignore[attr-defined]
    assert len(d.of(DeliverReload)) == 4
    first_stream_delivery = d.log.index(d.of(Deliver)[0])
    assert d.log.index(d.of(EndReload)[0]) < first_stream_delivery
    assert all(d.log.index(a) < first_stream_delivery for a in d.of(DeliverReload))
    assert d.of(Deliver)[0].records == READABLE  # type: ignore[attr-defined]
    (done,) = d.of(Reloaded)
    assert done.gap.phase == "reloaded" and done.gap.records_reloaded == 8  # type: ignore[attr-defined]
    assert done.units == 6.0 and done.pages == 4  # type: ignore[attr-defined]
    assert d.of(EndReload)[0].gap.records_reloaded == 8  # type: ignore[attr-defined]


def test_a_paced_page_is_asked_for_again_after_the_wait_it_was_given() -> None:
    d = Driver(machine(), paced_every=2)
    d.run_until(Deliver)
    waits = [a for a in d.log if isinstance(a, Wait)]
    assert any(w.until == 1_500 for w in waits)  # the Paced answer's time ends the step
    assert len(d.of(DeliverReload)) == 4  # nothing skipped for the pacing


def test_a_failed_reload_delivery_is_retried_with_the_same_records_and_nothing_passes_it() -> None:
    m = machine()
    d = Driver(m)
    d.run_until(DeliverReload)
    first = d.of(DeliverReload)[0]
    # The processor raised on the page (answered Failed instead of Done): back-off, the same page.
    d.log.clear()
    m.answer(Failed(RuntimeError("sink down")), d.now, checkpoint=m.checkpoint)
    action = m.next_action(d.now)
    assert isinstance(action, Retrying)
    assert isinstance(m.next_action(d.now), Wait)
    m.observe(lease_gone=False, stop=False, checkpoint=m.checkpoint)
    again = m.next_action(d.now + 1_000)
    assert again == first


def test_a_crash_mid_reload_leaves_the_checkpoint_before_the_gap_so_the_next_consumer_reloads_again() -> None:
    crashed = Driver(machine())
    crashed.run_until(DeliverReload)
    assert crashed.m.checkpoint == CHECKPOINT  # the machine moved nothing; the lease says the same
    # A new consumer of the shard (this worker after a restart, or another) starts from the lease.
    fresh = Driver(machine(CHECKPOINT))
    fresh.run_until(Deliver)
    assert len(fresh.of(StartReload)) == 1 and fresh.of(ScanPage)[0].start_key is None  # type: ignore[attr-defined]
    assert len(fresh.of(DeliverReload)) == 4  # from the start, not where the crashed one was


def test_a_shard_trimmed_away_entirely_is_reloaded_then_ended() -> None:
    m = machine(shard_sync_interval_millis=1_000)
    d = Driver(m)

    def gone(request: Request) -> Outcome:
        if isinstance(request, GetIterator):
            return Failed(ShardNotFoundError("ResourceNotFoundException"))
        return Driver.outcome(d, request)

    d.outcome = gone  # type: ignore[method-assign]
    d.run_until(EndShard, steps=400)
    assert d.of(StartReload)[0].first_readable is None  # type: ignore[attr-defined]
    assert d.log.index(d.of(EndReload)[0]) < d.log.index(d.of(EndShard)[0])
    assert m.life.state is ShardState.SHUTTING_DOWN


@settings(max_examples=60, deadline=None)
@given(
    pages=st.integers(min_value=1, max_value=4),
    faults=st.lists(st.sampled_from(["paced", "failed", "ok"]), min_size=0, max_size=40),
)
def test_whatever_the_pace_and_failures_the_stream_waits_for_the_whole_reload(
    pages: int, faults: list[str]
) -> None:
    """No stream record is delivered before every segment was read to its end, every page delivered
    and the end told; the checkpoint never moves meanwhile."""
    m = machine()
    d = Driver(m, pages=pages)
    draws = iter(faults)
    base = d.outcome

    def flaky(request: Request) -> Outcome:
        fault = next(draws, "ok")
        if isinstance(request, ScanPage | DeliverReload | StartReload | EndReload):
            if fault == "failed":
                return Failed(RuntimeError("throttled"))
            if fault == "paced" and isinstance(request, ScanPage):
                return Paced(d.now + 300)
        return base(request)

    d.outcome = flaky  # type: ignore[method-assign]
    d.run_until(Deliver, steps=2_000)
    assert d.of(Deliver), "the shard went on"
    first_stream = d.log.index(d.of(Deliver)[0])
    ends = d.of(EndReload)
    assert ends and d.log.index(ends[-1]) < first_stream
    assert all(left == 0 for left in d.pages.values())
    delivered = {a.records[0].sequence_number for a in d.of(DeliverReload)}  # type: ignore[attr-defined]
    assert len(delivered) == 2 * pages  # every page, each once or again (never a page skipped)
    assert m.checkpoint == CHECKPOINT
