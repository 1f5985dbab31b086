"""Worker log lines → screen events and attributed redeliveries; the log tail; the chaos plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.demo.chaos import KINDS, chaos_plan
from tools.demo.events import FleetEvents, LogTail

SHARD = "shardId-00000001795439612711-820af6c8"


def line(worker: str, message: str) -> str:
    return json.dumps({"level": "INFO", "message": message, "worker_id": f"{worker}@vm:1:ab"})


def test_take_over_from_a_killed_worker_explains_its_redelivery() -> None:
    events = FleetEvents(fate={"worker-1": "SIGKILL"})
    events.feed(line("worker-2", f"worker worker-2@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd"))
    events.feed(
        line("worker-2", f"changelog: 3 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    assert (events.taken, events.taken_over, events.duplicate_deliveries) == (1, 1, 3)
    [redelivery] = events.redeliveries
    assert redelivery.explained and "worker-1 was stopped by SIGKILL" in redelivery.cause
    assert "took 711-820af6c8 over from worker-1 (SIGKILL)" in events.events[0]


def stamped(worker: str, message: str, at: float) -> str:
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return json.dumps(
        {"level": "INFO", "message": message, "worker_id": f"{worker}@vm:1:ab", "timestamp": stamp}
    )


T0 = 1_800_000_000.0


def test_a_pause_explains_only_the_take_over_that_ends_the_ownership_it_happened_in() -> None:
    """The chaos judge marked a paused worker and never cleared the mark at SIGCONT, so every later
    redelivery of that worker's shards counted as explained and could hide a replay (issue 46). A
    pause explains a take-over only when it fell within the ownership the take-over ended (a batch
    processed before it may not have been checkpointed); one before that ownership began explains
    nothing of it."""
    events = FleetEvents()
    events.paused("worker-1", T0 + 10)
    events.resumed("worker-1", T0 + 20)
    within = "shardId-00000001795439612711-aaaaaaaa"
    after = "shardId-00000001795439612711-bbbbbbbb"
    for shard, since in ((within, T0), (after, T0 + 21)):
        events.feed(stamped("worker-1", f"worker worker-1@vm:9:cd took lease {shard} from (nobody)", since))
        events.feed(
            stamped("worker-2", f"worker worker-2@vm:1:ab took lease {shard} from worker-1@vm:9:cd", T0 + 25)
        )
        events.feed(
            line("worker-2", f"changelog: 2 record(s) of shard {shard} already landed by an earlier delivery")
        )
    explained = {r.shard_id: r.explained for r in events.redeliveries}
    assert explained == {within: True, after: False}
    assert "worker-1 was stopped by SIGSTOP" in events.redeliveries[0].cause


def test_a_hand_over_after_a_pause_within_the_ownership_explains_the_redelivery() -> None:
    """Frozen mid-flush, the owner's lanes had handled records beyond one they had not: the
    checkpoint cannot pass it, and the hand-over that follows the resume gives the next owner those
    records again (chaos seed 103 of issue 46's ten, judged unexplained by a mark cleared at SIGCONT)."""
    events = FleetEvents()
    events.feed(stamped("worker-3", f"worker worker-3@vm:1:ab took lease {SHARD} from (nobody)", T0))
    events.feed(stamped("worker-3", f"shard {SHARD}: WAITING_ON_PARENT_SHARDS -> INITIALIZING", T0))
    events.paused("worker-3", T0 + 5)
    events.resumed("worker-3", T0 + 10)
    events.feed(stamped("worker-3", f"shard {SHARD}: WAITING_ON_PARENT_SHARDS -> INITIALIZING", T0 + 11))
    events.feed(
        stamped("worker-3", f"worker worker-3@vm:1:ab released lease {SHARD} to worker-2@vm:2:cd", T0 + 12)
    )
    events.feed(stamped("worker-2", f"shard {SHARD}: WAITING_ON_PARENT_SHARDS -> INITIALIZING", T0 + 13))
    events.feed(
        line("worker-2", f"changelog: 29 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    assert events.redeliveries[0].explained, events.redeliveries[0].cause


def test_a_take_after_a_release_to_nobody_is_judged_by_the_releasers_ownership() -> None:
    """An overdue hand-over frees the lease ("released lease S", no successor named): the next taker
    reads "from (nobody)", and what it gets again is judged by the releaser's ownership. Frozen within
    it, its lanes may have handled records the checkpoint could not cover; running throughout, its
    release records what it processed, and a record given again is a defect."""
    released = [
        stamped("worker-3", f"worker worker-3@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd", T0),
        stamped("worker-3", f"worker worker-3@vm:1:ab released lease {SHARD}", T0 + 30),
        stamped("worker-2", f"worker worker-2@vm:1:ab took lease {SHARD} from (nobody)", T0 + 31),
        stamped(
            "worker-2",
            f"changelog: 1 record(s) of shard {SHARD} already landed by an earlier delivery",
            T0 + 32,
        ),
    ]
    frozen, running = FleetEvents(), FleetEvents()
    frozen.paused("worker-3", T0 + 5)
    frozen.resumed("worker-3", T0 + 29)
    for events in (frozen, running):
        for entry in released:
            events.feed(entry)
    assert frozen.redeliveries[0].explained
    assert "worker-3 was stopped by SIGSTOP" in frozen.redeliveries[0].cause
    assert not running.redeliveries[0].explained
    assert "previous owner worker-3@vm:1:ab" in running.redeliveries[0].cause
    assert "took 711-820af6c8 over from worker-3" in running.events[-1]


def test_a_retry_after_an_error_explains_a_redelivery_by_the_same_worker() -> None:
    events = FleetEvents()
    events.feed(line("worker-2", f"worker worker-2@vm:1:ab took lease {SHARD} from (nobody)"))
    events.feed(
        line(
            "worker-2",
            f"shard {SHARD}: processor failed on 5 records (attempt 1): "
            "LeaseStoreUnavailableError('throttled'); delivering them again in 100 ms",
        )
    )
    events.feed(
        line("worker-2", f"changelog: 5 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    assert (
        events.redeliveries[0].explained and "retried a batch after an error" in events.redeliveries[0].cause
    )


def test_take_over_from_a_worker_that_fenced_itself_explains_its_redelivery() -> None:
    """A slow, throttled leases table: the owner's heartbeats fail, it fences itself with a processed
    batch unrecorded, and another worker takes the shard over from the last checkpoint."""
    events = FleetEvents()
    # Handed over to worker-1 (no "took" line): its shard consumer starting says it holds the lease.
    events.feed(line("worker-1", f"shard {SHARD}: WAITING_ON_PARENT_SHARDS -> INITIALIZING"))
    events.feed(
        line(
            "worker-1",
            "worker worker-1@vm:9:cd dropped 1 leases: fenced: no heartbeat succeeded within failover - margin",
        )
    )
    events.feed(line("worker-2", f"worker worker-2@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd"))
    events.feed(
        line("worker-2", f"changelog: 2 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    [redelivery] = events.redeliveries
    assert redelivery.explained and "worker-1 fenced itself" in redelivery.cause


def test_a_fence_before_the_owner_took_the_shard_explains_nothing() -> None:
    events = FleetEvents()
    events.feed(
        line(
            "worker-1",
            "worker worker-1@vm:9:cd dropped 1 leases: fenced: no heartbeat succeeded within failover - margin",
        )
    )
    events.feed(line("worker-1", f"worker worker-1@vm:9:cd took lease {SHARD} from (nobody)"))
    events.feed(line("worker-2", f"worker worker-2@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd"))
    events.feed(
        line("worker-2", f"changelog: 2 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    assert not events.redeliveries[0].explained


def test_a_redelivery_after_a_graceful_hand_over_is_unexplained() -> None:
    events = FleetEvents(fate={"worker-1": "SIGTERM"})
    events.feed(line("worker-2", f"worker worker-2@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd"))
    events.feed(
        line("worker-2", f"changelog: 1 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    assert not events.redeliveries[0].explained


def test_a_hand_over_by_release_names_the_previous_owner_and_stays_unexplained() -> None:
    """A lease released to a named worker is taken up by re-adoption (no 'took lease' line): the
    releaser is the previous owner, and a replay after a graceful hand-over explains nothing."""
    events = FleetEvents()
    events.feed(line("worker-1", f"worker worker-1@vm:9:cd released lease {SHARD} to worker-2@vm:1:ab"))
    events.feed(
        line("worker-2", f"changelog: 2 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    (redelivery,) = events.redeliveries
    assert not redelivery.explained and "worker-1" in redelivery.cause


def test_lost_dropped_ended_and_noise() -> None:
    events = FleetEvents()
    events.feed(line("worker-3", f"worker worker-3@vm:1:ab: lease {SHARD} was taken by another worker"))
    events.feed(line("worker-3", "worker worker-3@vm:1:ab dropped 2 leases: fenced"))
    events.feed(line("worker-3", f"shard {SHARD} ended; syncing shards for its children"))
    events.feed("not json")
    events.feed(line("worker-3", "something else"))
    assert (events.lost, events.shards_ended, len(events.events)) == (3, 1, 3)
    events.feed(line("worker-3", f"shard {SHARD} ended; looking up its children"))  # today's wording
    assert events.shards_ended == 2


def test_log_tail_returns_only_new_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    tail = LogTail()
    assert tail.read([path]) == []
    path.write_text("one\ntw")
    assert tail.read([path]) == ["one"]
    with path.open("a") as handle:
        handle.write("o\nthree\n")
    assert tail.read([path]) == ["two", "three"]
    assert tail.read([path]) == []


@given(st.integers(0, 10_000), st.floats(0, 600))
@settings(max_examples=100)
def test_chaos_plan_has_every_kind_inside_the_load_window(seed: int, duration: float) -> None:
    plan = chaos_plan(seed, duration)
    assert {a.kind for a in plan} == set(KINDS)
    assert all(duration * 0.1 - 1e-3 <= a.at_seconds <= duration * 0.85 + 1e-3 for a in plan)
    assert [a.at_seconds for a in plan] == sorted(a.at_seconds for a in plan)
    assert plan == chaos_plan(seed, duration)


def test_lines_read_from_several_logs_at_once_are_judged_in_time_order() -> None:
    """A release in one worker's file and the take that followed it in another's, read in one poll:
    file order put the take first, and the judge saw a take from nobody with no releaser."""
    from tools.demo.events import in_time_order

    take = stamped("worker-1", f"worker worker-1@vm:1:ab took lease {SHARD} from (nobody)", T0 + 1)
    release = stamped("worker-3", f"worker worker-3@vm:1:ab released lease {SHARD}", T0)
    events = FleetEvents()
    for entry in in_time_order([take, release]):
        events.feed(entry)
    events.feed(
        line("worker-1", f"changelog: 1 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    assert "previous owner worker-3@vm:1:ab" in events.redeliveries[0].cause


def test_a_batch_in_flight_past_the_hand_overs_deadline_explains_the_forced_take_over() -> None:
    """The chaos demo's slow processor sleeps longer than the failover time on every 25th batch: a
    thief that asked for the shard takes it by force, and the lanes' landed records beyond the
    checkpoint come again (chaos seed 106 of issue 46's ten, after the pause mark was cleared at
    SIGCONT). A slow batch that ended long before the take-over explains nothing."""
    events = FleetEvents()
    events.feed(stamped("worker-1", f"worker worker-1@vm:9:cd took lease {SHARD} from (nobody)", T0))
    events.feed(stamped("worker-1", f"slow changelog: shard {SHARD}: a batch sleeps 3300 ms", T0 + 2))
    events.feed(
        stamped("worker-3", f"worker worker-3@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd", T0 + 5)
    )
    events.feed(
        line("worker-3", f"changelog: 1 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    late = FleetEvents()
    late.feed(stamped("worker-1", f"worker worker-1@vm:9:cd took lease {SHARD} from (nobody)", T0))
    late.feed(stamped("worker-1", f"slow changelog: shard {SHARD}: a batch sleeps 3300 ms", T0 + 2))
    late.feed(
        stamped("worker-3", f"worker worker-3@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd", T0 + 30)
    )
    late.feed(
        line("worker-3", f"changelog: 1 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    assert events.redeliveries[0].explained and "slow processor" in events.redeliveries[0].cause
    assert not late.redeliveries[0].explained


def test_a_batch_in_flight_past_a_graceful_stops_drain_explains_the_take_over() -> None:
    """The Kinesis chaos demo's seed 1 in make test at eb9b848: the owner was SIGTERMed (a chaos
    restart) while its slow batch slept, its graceful stop gave up waiting for it ("1 shard consumers
    did not finish in time") and released the lease without that batch's checkpoint; the next owner
    delivered its 2 records again, judged unexplained ("fate SIGTERM")."""
    events = FleetEvents(fate={"worker-1": "SIGTERM"})
    events.feed(stamped("worker-1", f"worker worker-1@vm:9:cd took lease {SHARD} from (nobody)", T0))
    events.feed(stamped("worker-1", f"slow changelog: shard {SHARD}: a batch sleeps 4500 ms", T0 + 2))
    events.feed(
        stamped("worker-3", f"worker worker-3@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd", T0 + 6)
    )
    events.feed(line("worker-3", f"delivery log: 2 record(s) of shard {SHARD} delivered before"))
    assert events.redeliveries[0].explained, events.redeliveries[0].cause
    assert "slow processor" in events.redeliveries[0].cause


def test_a_fence_the_owner_says_after_the_take_over_explains_it() -> None:
    """A starved owner's heartbeats stop landing; another worker takes its shard by expiry, and the
    owner says it fenced itself only when it runs again, after the take-over (chaos seed 109 of issue
    46's ten). The fence explains the redelivery; one said long after does not."""
    events = FleetEvents()
    events.feed(stamped("worker-1", f"worker worker-1@vm:9:cd took lease {SHARD} from (nobody)", T0))
    events.feed(
        stamped("worker-3", f"worker worker-3@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd", T0 + 3)
    )
    events.feed(
        line("worker-3", f"changelog: 3 record(s) of shard {SHARD} already landed by an earlier delivery")
    )
    assert not events.redeliveries[0].explained
    events.feed(
        stamped(
            "worker-1",
            f"worker worker-1@vm:9:cd dropped 1 leases: fenced: no heartbeat succeeded within failover - margin "
            f"({SHARD})",
            T0 + 5,
        )
    )
    assert events.redeliveries[0].explained and "fenced itself" in events.redeliveries[0].cause
