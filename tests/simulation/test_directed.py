"""Directed histories: the one unlucky moment each layered defence of the lease core exists for.

The seeded sweep (test_fault_model.py) draws its faults at random, and several defences guard
moments that random draws almost never line up — a listing answered just before a minute-long stop,
a scan as stale as the model allows read right after a cleanup. Each history here scripts that
moment (simulation/faults.py, :class:`Directed`) on an otherwise calm fleet and asks the same
checker for the same promises. Each one fails with its defence reverted
(``scripts/revert_check.py NAME directed``), which is what shows the defence is needed and that
the checker can see its absence.

The directed faults stay inside what DynamoDB and a real host do: a scan at most one failover
stale (the model's bound), a DescribeStream answer from a view a minute old (the API is eventually
consistent and documents no bound), a slow answer within the leases client's own timeout, a
process stopped for a minute and a half (SIGSTOP, a suspended VM).
"""

from __future__ import annotations

import logging

import pytest

from ground.settings import Settings
from simulation.checker import Verdict, check
from simulation.directed import Directed
from simulation.faults import Faults
from simulation.histories import sim_settings
from simulation.stream import ShardSpec
from simulation.world import World

FAILOVER = 10_000
START = 1_000_000  # the kernel's first millisecond


@pytest.fixture(autouse=True)
def _quiet() -> object:
    logging.disable(logging.WARNING)
    yield None
    logging.disable(logging.NOTSET)


def settings(*, shard_sync_interval_millis: int = 5_000) -> Settings:
    return sim_settings(
        {
            "initial_position": "TRIM_HORIZON",
            "failover_time_millis": FAILOVER,
            "max_clock_skew_millis": 500,
            "shard_sync_interval_millis": shard_sync_interval_millis,
        }
    )


def chain(*lives: tuple[int, int, int]) -> dict[str, ShardSpec]:
    """A rollover chain P -> C -> G ...: each (born, closes, records), times in ms from the start."""
    shards: dict[str, ShardSpec] = {}
    parent = None
    for index, (born, closes, length) in enumerate(lives):
        shard_id = f"shardId-{index:04d}"
        shards[shard_id] = ShardSpec(shard_id, parent, START + born, START + closes, length)
        parent = shard_id
    return shards


def run(world: World, until: int) -> Verdict:
    finished = world.run(workers=2, chaos_millis=until, settle_millis=120_000, chaos=False)
    unfired = world.script.unfired()
    assert not unfired, f"the directed faults never hit, so this history shows nothing: {unfired}"
    return check(world, finished)


def test_a_listing_answered_before_a_long_stop_does_not_re_lease_finished_shards() -> None:
    """w1 lists the stream while the first shard is open, then stops for 90 s. Meanwhile w2 finishes
    that shard and its child, and cleans both up; only the grandchild's lease remains, naming the
    child (not the first shard) as its parent. Planning from that old listing beside a fresh scan,
    the first shard looks new. Defence: the scan is read before the listing (scan_before_list)."""
    shards = chain((0, 15_000, 10), (15_000, 25_000, 5), (25_000, 150_000, 20))
    world = World(
        1,
        settings(),
        Faults(),
        shards=shards,
        directed=(Directed("w1", "list_shards", 10_000, thread="sync", pause_after_millis=90_000),),
    )
    verdict = run(world, 150_000)
    assert verdict.ok, verdict


def test_a_listing_a_minute_stale_does_not_re_lease_a_cleaned_up_parent() -> None:
    """At 70 s w1's DescribeStream answers from a view a minute old: the parent open, no child. The
    parent finished at 15 s and was cleaned up; the child's lease (checkpointed, naming the parent)
    is in the fresh scan. Defence: descendants are found through the leases' parent links too
    (lineage_through_leases)."""
    shards = chain((0, 15_000, 10), (15_000, 150_000, 30))
    world = World(
        2,
        settings(),
        Faults(),
        shards=shards,
        directed=(Directed("w1", "list_shards", 70_000, thread="sync", view_age_millis=62_000),),
    )
    verdict = run(world, 150_000)
    assert verdict.ok, verdict


def test_a_scan_as_stale_as_the_model_allows_after_a_cleanup_does_not_re_lease_the_shard() -> None:
    """Short shards and a 2 s shard sync: the child is created, finished and (without a delay)
    cleaned up within a few seconds. From 12 s the sync leader's listing rounds read the lineage
    generation (after that cleanup) and then a scan one failover stale, from before the child's lease
    existed: the child looks new. Defence: a finished lease is deleted only after it has been seen
    finished for longer than any scan is stale (cleanup_delay). (Only the leader lists the stream
    every interval, as the worker's own loop does: w1, the smallest id.)"""
    shards = chain((0, 4_000, 3), (4_000, 6_000, 2), (6_000, 120_000, 500))
    stale = tuple(
        Directed("w1", "scan", at, thread="sync", view_age_millis=FAILOVER)
        for at in (12_000, 13_000, 14_000, 15_000)
    )
    world = World(3, settings(shard_sync_interval_millis=2_000), Faults(), shards=shards, directed=stale)
    verdict = run(world, 120_000)
    assert verdict.ok, verdict


def test_an_owner_re_read_answered_late_is_judged_by_when_it_was_read() -> None:
    """w2's taker scans a view one failover stale, in which w1's heartbeat looks expired, and re-reads
    w1's heartbeat consistently; the answer takes 9.9 s to come back (within the client's bound). w1
    is alive and renewing throughout. Judged by the time the answer arrived, the row read 9.9 s
    earlier looks dead, and w2 takes w1's shard while w1 processes it. Defence: the row is judged
    by the time the read was sent (owner_judged_at_read)."""
    shards = {
        f"shardId-{i:04d}": ShardSpec(f"shardId-{i:04d}", None, START, START + 120_000, 500) for i in range(4)
    }
    # w1's heartbeats move 2 s out of step with w2's taker, so the row w2 re-reads is a few seconds old.
    late = (
        Directed("w1", "heartbeat", 25_000, answer_delay_millis=2_000),
        *(
            fault
            for at in range(30_000, 100_000, 5_000)
            for fault in (
                Directed("w2", "scan", at, thread="taker", view_age_millis=FAILOVER),
                Directed("w2", "get_heartbeat", at, thread="taker", answer_delay_millis=9_900),
            )
        ),
    )
    world = World(4, settings(), Faults(), shards=shards, directed=late)
    finished = world.run(workers=2, chaos_millis=120_000, settle_millis=120_000, chaos=False)
    fired = [fault for fault in late if fault.call == "get_heartbeat" and fault.fired_at is not None]
    assert fired, "w2 never re-read an owner's heartbeat, so this history shows nothing"
    verdict = check(world, finished)
    assert verdict.ok, verdict


def test_a_heartbeat_learnt_after_the_deadline_drops_the_leases_before_it_extends_the_fence() -> None:
    """w1's heartbeats are throttled for 4.4 s; its fifth try starts 0.3 s before the fence deadline,
    and w1 stops right after sending it. The table acts on it 7 s later, after w2 has judged w1 dead
    and taken its shards; w1 resumes 0.5 s after that, still within the new heartbeat's own deadline.
    If the heartbeat thread runs first on resume and only moves the deadline, the processor finds
    the leases usable again and delivers a shard that w2 now owns. Defence: a renewal learnt after
    the deadline drops everything held first (fence_at_deadline). w1's taker, whose round fell due
    during the stop, runs on resume too and would tell the consumers their shards are lost: its
    scan's answer comes 2 s late (within the client's bound), so the moment is the heartbeat's and
    the processor's. Whichever of those runs first on resume is a seeded draw, so the sequence is
    played three times."""
    shards = {
        f"shardId-{i:04d}": ShardSpec(f"shardId-{i:04d}", None, START, START + 150_000, 700) for i in range(4)
    }
    # The throttles begin with the first beat at or after ``at`` (within a renewal interval, 3.3 s)
    # and last 4.4 s: w1 is stopped by ``at`` + 8 s and resumes 7.5 s after it stopped, so the
    # taker's first scan from ``at`` + 8 s is the one on resume.
    late = tuple(
        fault
        for at in (30_000, 60_000, 90_000)
        for fault in (
            *(Directed("w1", "heartbeat", at, throttle=True) for _ in range(4)),
            Directed("w1", "heartbeat", at, commit_delay_millis=7_000, pause_after_send_millis=7_500),
            Directed("w1", "scan", at + 8_000, thread="taker", answer_delay_millis=2_000),
        )
    )
    world = World(5, settings(), Faults(), shards=shards, directed=late)
    verdict = run(world, 150_000)
    assert verdict.ok, verdict
