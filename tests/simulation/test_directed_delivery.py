"""Directed histories for delivery: the one unlucky moment each delivery fix of issue 35 exists for.

The seeded sweep (test_fault_model.py) found these moments once, on older code; on today's code
random draws rarely line them up again. Each history here scripts its moment on an otherwise calm
fleet running the processor form the fix is about — a batch that fails just before a graceful stop,
a checkpoint the leases table refuses while the worker is stopped past its fence, a window state the
table refuses in the middle of a flush — with :class:`~simulation.faults.Directed` faults (a
refused or slow call, a stop of the whole process), a flaky record, and a *director* (a simulated
thread of the history that stops or adds a worker at the scripted moment). The whole-worker checker
then judges the same promises as in the sweep, and each history fails with its fix reverted
(``scripts/revert_check.py NAME directed``: the table in each test's docstring).

Every directed fault stays inside what the model allows: a throttled or slow call of the leases
table or the window-state table (within the clients' own bounds), a process stopped past its fence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from simulation.checker import Verdict, check
from simulation.directed import Directed
from simulation.faults import Faults
from simulation.histories import MODULE, sim_settings
from simulation.kernel import Kernel
from simulation.stream import ShardSpec
from simulation.world import Plan, SimWorker, World

FAILOVER = 10_000
START = 1_000_000  # the kernel's first millisecond
SHARD = "shardId-0000"


@pytest.fixture(autouse=True)
def _quiet() -> object:
    logging.disable(logging.WARNING)
    yield None
    logging.disable(logging.NOTSET)


def world(
    seed: int,
    processing: dict[str, Any],
    *,
    records: int,
    closes: int,
    directed: tuple[Directed, ...] = (),
    worker: dict[str, Any] | None = None,
    shards: int = 1,
) -> World:
    """``shards`` shards (the first is :data:`SHARD`) of ``records`` records each, written evenly
    until they close at ``closes`` ms."""
    settings = sim_settings(
        {
            "initial_position": "TRIM_HORIZON",
            "failover_time_millis": FAILOVER,
            "max_clock_skew_millis": 500,
            "shard_sync_interval_millis": 5_000,
            "idle_time_between_reads_millis": 200,
            **(worker or {}),
        },
        processing,
    )
    specs = {
        f"shardId-{i:04d}": ShardSpec(f"shardId-{i:04d}", None, START, START + closes, records)
        for i in range(shards)
    }
    return World(seed, settings, Faults(), plan=Plan(processing), shards=specs, directed=directed)


def number(world: World, index: int) -> int:
    """The sequence number of the shard's ``index``-th record."""
    return world.stream.written[SHARD][index].sequence_number


def holder(world: World) -> SimWorker | None:
    """The worker that holds the shard now (by its own view)."""
    return next((w for w in world.workers.values() if w.coordinator.holdings.holds(SHARD)), None)


def wait_for(kernel: Kernel, condition: Callable[[], bool], step: int = 5) -> None:
    while not condition():
        kernel.sleep(step)


def run(world: World, until: int, director: Callable[[World], None], workers: int = 1) -> Verdict:
    finished = world.run(
        workers=workers, chaos_millis=until, settle_millis=120_000, chaos=False, director=director
    )
    unfired = world.script.unfired()
    assert not unfired, f"the directed faults never hit, so this history shows nothing: {unfired}"
    return check(world, finished)


def test_a_batch_that_failed_just_before_a_graceful_stop_is_not_checkpointed_by_the_stop() -> None:
    """The class form: a batch's call raises (a flaky record), and SIGTERM arrives before it is
    delivered again. The processor's ``shutdown_requested`` checkpoints ``checkpoint()`` — everything
    delivered — which must not cover the batch that failed: the next owner would start after records
    nobody handled. Fix: ShardCheckpointer.taken_back (failed_batch_taken_back; seed 99 of the first
    sweep)."""
    history = world(11, {"processor": f"{MODULE}:ClassRecorder"}, records=20, closes=12_000)
    flaky = number(history, 9)
    history.ledger.flaky[flaky] = 1

    def director(w: World) -> None:
        wait_for(w.kernel, lambda: flaky in w.ledger.failures, step=1)
        stopping = holder(w)
        assert stopping is not None
        w.stop_gracefully(stopping)
        w.join()  # the next owner

    verdict = run(history, 15_000, director)
    assert verdict.ok, str(verdict)


def test_what_the_lanes_finished_before_a_fence_is_not_handled_again_after_the_take_back() -> None:
    """Ten lanes, one worker, a slow downstream (every handler call takes up to 3 s): a flush is half
    done — some lanes have finished records beyond the checkpoint, which waits for the slowest —
    when the process is stopped past its fence. Back, the worker takes its untouched lease back; the
    scheduler had told the interrupted consumer its lease was lost, so a new consumer starts from the
    checkpoint, and must not hand the handler what the lanes finished (the chaos demo's "lanes replay
    after a take-back"). Fixes: the lanes report what they finish beyond the checkpoint (lanes_report)
    and the scheduler hands it to the next consumer of the shard (lanes_carry). The function form's
    own buffer fix (lanes_buffer) guards a consumer that carries on after the take-back, which this
    consumer never does: the scheduler tells it its lease is lost first (the fence's drop is
    announced at once; a take-back needs a heartbeat and a round of the taker). The two cover each
    other: this history fails with both reverted (lanes_buffer+reconcile_tells_lost), not with one.
    The stop comes the moment a lane has finished a record beyond one still in flight, and is played
    three times."""
    processing = {"processor": f"{MODULE}:Recorder", "parallelization_factor": 10}
    history = world(18, processing, records=60, closes=40_000)
    history.ledger.slow_rate, history.ledger.slow_millis = 1.0, 3_000

    def half_done(w: World) -> bool:
        """Some lane has finished a record beyond one still in flight: the checkpoint waits for it."""
        handled = {h.sequence_number for h in w.ledger.handled}
        waiting = [r.sequence_number for r in w.stream.written[SHARD] if r.sequence_number not in handled]
        return bool(handled) and bool(waiting) and max(handled) > min(waiting)

    def director(w: World) -> None:
        group = w.workers["w1"].group
        for _ in range(3):
            wait_for(w.kernel, lambda: half_done(w), step=1)
            group.paused_until = back = w.kernel.now + FAILOVER + 2_000  # SIGSTOP past the fence
            # On resume the heartbeat and the taker's round (both due during the stop) run side by
            # side: the round's scan answers 0.1 s late, after the renewal, so the round takes the
            # lease back at once instead of half an interval later.
            late = Directed(
                "w1", "scan", w.kernel.now - w.script.start, thread="taker", answer_delay_millis=100
            )
            w.script.faults.append(late)
            wait_for(w.kernel, lambda back=back: any(h.at > back for h in w.ledger.handled))
        w.ledger.slow_rate = 0.0

    verdict = run(history, 45_000, director)
    assert verdict.ok, str(verdict)


def test_a_checkpoint_refused_after_the_take_back_it_waited_through_is_where_the_next_consumer_starts() -> (
    None
):
    """The function form, one worker: a checkpoint write goes out and the process stops right after
    (past its fence); back, the worker renews and takes its untouched lease back (the counter moves,
    the ownership goes on); only then does the answer come: throttled. The records are handled, so the
    shard consumer started after the take-back (the scheduler stopped the last one at the fence) must
    start after them, not from the table's older checkpoint. Fixes: the held lease shows the position
    (held_lease_processed), noted under the counter before the take-back, which continues the same
    ownership (processed_same_ownership); seeds 768 and 1144 of the first sweep."""
    refused = Directed(
        "w1",
        "checkpoint",
        20_000,  # a checkpoint 20 s in (the worker holds its lease from one taker interval after the start)
        thread="shard",
        throttle=True,
        pause_after_send_millis=FAILOVER + 2_000,
        answer_delay_millis=5_000,
    )
    history = world(12, {"processor": f"{MODULE}:Recorder"}, records=40, closes=30_000, directed=(refused,))
    verdict = run(history, 35_000, lambda w: None)
    assert verdict.ok, str(verdict)


def test_a_position_refused_while_the_take_back_records_an_older_one_is_where_the_next_consumer_starts() -> (
    None
):
    """The function form, one worker: its first checkpoint is throttled (deferred: position A); the
    next one (B, further on) goes out and the process stops right after, past its fence. Back, the
    worker takes its untouched lease back and records A first — a slow write — and while it is on its
    way B's answer comes: throttled, B noted. A's write landing must not forget B: the next shard
    consumer starts after B, not after A. Fix: recording a position forgets only the unwritten ones it
    covers (written_covers_only; seed 4 503 of the second sweep)."""
    faults = (
        Directed("w1", "checkpoint", 20_000, thread="shard", throttle=True),
        Directed(
            "w1",
            "checkpoint",
            20_000,
            thread="shard",
            throttle=True,
            pause_after_send_millis=FAILOVER + 2_000,
            answer_delay_millis=3_000,  # the taker's round after the resume comes within 3 s
        ),
        Directed("w1", "checkpoint", 30_000, thread="taker", commit_delay_millis=5_000),
    )
    history = world(13, {"processor": f"{MODULE}:Recorder"}, records=40, closes=30_000, directed=faults)
    verdict = run(history, 40_000, lambda w: None)
    assert verdict.ok, str(verdict)


def windows(batch_size: int = 2) -> dict[str, Any]:
    """Tumbling windows of a minute (the whole shard is one window), a state saved per batch."""
    return {
        "processor": f"{MODULE}:WindowRecorder",
        "tumbling_window_seconds": 60,
        "batching": {"batch_size": batch_size},
    }


def test_while_checkpoints_are_deferred_the_window_state_the_table_names_is_kept() -> None:
    """Tumbling windows, one worker, a state saved with every batch's checkpoint: the first is
    written, the next three are throttled (the function form defers them), and the process stops on
    the last refusal (SIGSTOP) and is killed while stopped (the director). The next owner resumes
    from the table's checkpoint and loads the state saved with it: pruning to the last two versions
    while checkpoints were deferred deleted that one, and the window's final state would miss the
    records before it.
    Fix: nothing is pruned until a checkpoint is written again (window_versions_kept; seeds 418 and
    834 of the first sweep)."""
    faults = (
        Directed("w1", "checkpoint", 20_000, thread="shard", skip=1, throttle=True),
        Directed("w1", "checkpoint", 20_000, thread="shard", throttle=True),
        Directed("w1", "checkpoint", 20_000, thread="shard", throttle=True, pause_after_millis=60_000),
    )
    history = world(14, windows(), records=40, closes=30_000, directed=faults)

    def director(w: World) -> None:
        wait_for(w.kernel, lambda: faults[-1].fired_at is not None)
        w.workers["w1"].group.crashed = True
        w.join()

    verdict = run(history, 40_000, director)
    assert verdict.ok, str(verdict)


def test_an_owner_that_initializes_late_keeps_a_newer_owners_window_state() -> None:
    """Tumbling windows: w1 takes the shard and is stopped while its processor initializes (just
    before it lists the state's versions) for 40 s. Meanwhile w2 takes the shard over
    and saves its window state with each checkpoint. w1 comes back (a zombie) and lists the versions:
    it must not delete w2's. The director then kills w2, and the next owner resumes from the table's
    checkpoint with the state saved with it — deleted, it would start the window empty and the final
    state would miss the records before. Fix: starting deletes only older versions
    (window_start_keeps_later; seed 6 174 of the third sweep)."""
    late = Directed("w1", "Query", 0, pause_before_send_millis=40_000)  # its first lease's initialize
    history = world(15, windows(), records=60, closes=90_000, directed=(late,))

    def director(w: World) -> None:
        wait_for(w.kernel, lambda: late.fired_at is not None)
        w.join()
        first = w.workers["w1"].group
        wait_for(w.kernel, lambda: w.kernel.now > first.paused_until)  # w1 has listed (and deleted)
        w.workers["w2"].group.crashed = True

    verdict = run(history, 100_000, director)
    assert verdict.ok, str(verdict)


def deferred_then_failed() -> tuple[Directed, ...]:
    """In one flush: the first batch's checkpoint throttled (deferred), the next batch's state refused
    by the window-state table (the call raises), the deferred checkpoint throttled once more on the
    way out. The first flush: the worker's first lease comes one taker interval after the start,
    with a few batches written meanwhile (later, caught up, a flush holds one record)."""
    return (
        Directed("w1", "checkpoint", 0, thread="shard", throttle=True),
        Directed("w1", "PutItem", 0, skip=1, throttle=True),
        Directed("w1", "checkpoint", 0, thread="shard", throttle=True),
    )


def test_a_flush_that_failed_after_deferring_its_checkpoint_is_delivered_again_after_it() -> None:
    """Tumbling windows, one worker: the flush of :func:`deferred_then_failed` raises, and its state
    goes back to the version saved with the deferred checkpoint. The batch delivered again must start
    after that checkpoint, not after the older one the table holds, or the records between are
    counted twice in the window. Fix: the consumer does not deliver again what a checkpoint declared
    processed (deferred_not_redelivered; seeds 234, 235, 249, 257 and 262 of the first sweep)."""
    history = world(19, windows(), records=40, closes=30_000, directed=deferred_then_failed())
    verdict = run(history, 40_000, lambda w: None)
    assert verdict.ok, str(verdict)


def test_a_graceful_stop_after_a_failed_flush_writes_the_checkpoint_it_deferred() -> None:
    """Tumbling windows, one worker: the flush of :func:`deferred_then_failed` raises, and SIGTERM
    comes before the redelivery: the stop writes the deferred checkpoint —
    its records stay delivered — and hands the shard on at once. Fix: a batch the processor raised on
    keeps delivered what a deferred checkpoint declared processed (taken_back_keeps_declared; seed
    9 005 of the third sweep: the stop's write was refused as beyond the largest delivered, forever).

    Without the fix the checker's promises still hold — the stop retries until the drain deadline,
    then the lease is released anyway and the next owner may replay (another owner) — so the stall
    itself is what this history asserts: the shard changes hands within a second of the SIGTERM."""
    faults = deferred_then_failed()
    history = world(16, windows(), records=40, closes=30_000, directed=faults)

    stopped: list[int] = []

    def director(w: World) -> None:
        wait_for(w.kernel, lambda: faults[-1].fired_at is not None, step=1)
        w.stop_gracefully(w.workers["w1"])
        stopped.append(w.kernel.now)
        w.join()

    verdict = run(history, 40_000, director)
    assert verdict.ok, str(verdict)
    handed = next(at for at, owner in history.table.history.owners[SHARD] if at >= stopped[0])
    assert handed - stopped[0] <= 1_000, f"the graceful stop held the shard for {handed - stopped[0]} ms"
