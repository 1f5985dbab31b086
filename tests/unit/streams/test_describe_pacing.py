"""DescribeStream is an account-wide budget: calls are paced, and a refused page is asked again
rather than restarting a listing of hundreds of pages."""

from __future__ import annotations

import random

import boto3
import pytest
from botocore.stub import Stubber

from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.errors import ThrottledError
from consumer.streams.pacing import PAGE_ATTEMPTS, CallPacer, FleetPacer, FleetPosition, SlotSchedule
from ground.clock import FakeClock

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-24T00:00:00.000"


def sid(name: str) -> str:
    """A shard id of the service's shape (botocore validates stubbed answers)."""
    return f"shardId-00000001795501876904-{name:0>8}"


def page(ids: list[str], last: str | None) -> dict[str, object]:
    description: dict[str, object] = {
        "StreamArn": ARN,
        "StreamStatus": "ENABLED",
        "Shards": [
            {"ShardId": sid(i), "SequenceNumberRange": {"StartingSequenceNumber": "1" * 21}} for i in ids
        ],
    }
    if last:
        description["LastEvaluatedShardId"] = sid(last)
    return {"StreamDescription": description}


def source(clock: FakeClock, pacer: CallPacer | None = None) -> tuple[DynamoDBStreamSource, Stubber]:
    client = boto3.client(
        "dynamodbstreams", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    return DynamoDBStreamSource(client, clock, describe_pacer=pacer, rng=random.Random(1)), Stubber(client)


def test_a_throttled_page_is_asked_again_without_restarting_the_listing() -> None:
    clock = FakeClock()
    streams, stub = source(clock)
    stub.add_response("describe_stream", page(["s1", "s2"], "s2"), {"StreamArn": ARN, "Limit": 100})
    for _ in range(2):
        stub.add_client_error("describe_stream", service_error_code="LimitExceededException")
    stub.add_response(
        "describe_stream",
        page(["s3"], None),
        {"StreamArn": ARN, "Limit": 100, "ExclusiveStartShardId": sid("s2")},
    )
    with stub:
        shards = streams.list_shards(ARN)
    stub.assert_no_pending_responses()
    assert [s.shard_id for s in shards] == [sid("s1"), sid("s2"), sid("s3")]
    assert clock.monotonic_millis() > 0  # it waited (on the clock) before asking again


def test_a_page_refused_every_time_fails_the_listing_after_a_bounded_number_of_attempts() -> None:
    clock = FakeClock()
    streams, stub = source(clock)
    for _ in range(PAGE_ATTEMPTS):
        stub.add_client_error("describe_stream", service_error_code="LimitExceededException")
    with stub, pytest.raises(ThrottledError):
        streams.list_shards(ARN)
    stub.assert_no_pending_responses()


def test_the_pacer_spaces_calls_at_its_rate_after_the_burst() -> None:
    clock = FakeClock()
    pacer = CallPacer(2.0, clock, burst=3)
    start = clock.monotonic_millis()
    for _ in range(11):
        pacer.acquire()
    # 3 at once, then one every 500 ms: 8 more take 4 s.
    assert clock.monotonic_millis() - start == pytest.approx(4_000, abs=2)


def test_a_paced_listing_of_many_pages_keeps_to_the_rate() -> None:
    clock = FakeClock()
    streams, stub = source(clock, CallPacer(2.0, clock, burst=1))
    pages = 10
    for n in range(pages):
        expected = {"StreamArn": ARN, "Limit": 100}
        if n:
            expected["ExclusiveStartShardId"] = sid(f"s{n - 1}")
        stub.add_response("describe_stream", page([f"s{n}"], f"s{n}" if n < pages - 1 else None), expected)
    with stub:
        assert len(streams.list_shards(ARN)) == pages
    assert clock.monotonic_millis() - FakeClock().monotonic_millis() == pytest.approx(4_500, abs=2)


# ------------------------------------------------------------------- the fleet's timetable


def test_the_timetable_gives_each_slot_to_one_worker_and_the_leader_three_in_ten() -> None:
    schedule = SlotSchedule(5.0)
    assert schedule.slot_millis == 200
    for size in (1, 3, 7, 100):
        positions = [FleetPosition(rank, size, rank == 0) for rank in range(size)]
        # Each worker's own slots, and the leader's listing slots.
        used = [
            [
                p.rank
                for p in positions
                for listing in (False, True)
                if (listing, p.leader) != (True, False) and schedule.mine(slot, p, listing)
            ]
            for slot in range(10 * 7 * size)
        ]
        # One owner per slot (the leader's slots are its own): never two calls in one slot.
        assert all(len(owners) == 1 for owners in used)
        leader_only = sum(1 for slot in range(10 * 7 * size) if schedule.owner(slot, size) is None)
        assert leader_only == 3 * 7 * size
        shares = {rank: sum(1 for owners in used if owners == [rank]) for rank in range(size)}
        # Every worker gets the same share of the seven shared slots in ten.
        assert {shares[rank] for rank in range(1, size)} <= {7 * 7}


def test_a_worker_calls_only_in_its_own_slots_once_each_and_waits_while_it_does_not_know_its_place() -> None:
    clock = FakeClock()
    start = clock.wall_millis()

    def position() -> FleetPosition | None:
        # Known only from one second on (its first scan, a settled view of the fleet).
        return FleetPosition(2, 4, False) if clock.wall_millis() - start >= 1000 else None

    pacer = FleetPacer(5.0, clock, position)
    schedule = pacer.schedule
    calls = []
    for _ in range(6):
        pacer.acquire()
        calls.append(clock.wall_millis())
    slots = [schedule.slot_at(t) for t in calls]
    assert calls[0] - start >= 1000
    assert len(set(slots)) == len(slots)  # one call per slot
    assert all(schedule.owner(slot, 4) == 2 for slot in slots)
    assert all(t == schedule.start_millis(slot) for t, slot in zip(calls, slots, strict=True))


def test_a_fleet_of_a_hundred_never_exceeds_the_budget_in_any_second() -> None:
    """Every worker asking all the time: the calls of the fleet in any one-second window."""
    schedule = SlotSchedule(5.0)
    size = 100
    calls: list[int] = []
    for rank in range(size):
        position = FleetPosition(rank, size, rank == 0)
        slot = -1
        while True:
            slot = schedule.next_slot(slot, position)
            if schedule.start_millis(slot) >= 120_000:
                break
            calls.append(int(schedule.start_millis(slot)))
    calls.sort()
    peak = max(sum(1 for t in calls if start <= t < start + 1000) for start in range(0, 119_000, 100))
    assert peak <= 5


def test_the_coordinator_places_workers_by_id_once_the_fleet_is_settled() -> None:
    from consumer.leases.coordinator import LeaseCoordinator
    from consumer.leases.memory import InMemoryLeaseStore
    from ground.settings import WorkerSettings

    store, clock, settings = InMemoryLeaseStore(), FakeClock(), WorkerSettings()
    a = LeaseCoordinator(store, "a", settings, clock, expected_workers=3)
    b = LeaseCoordinator(store, "b", settings, clock, expected_workers=3)
    assert a.fleet_position() is None  # not seen itself in a scan yet
    for worker in (a, b):
        worker.heartbeat_once()
    for worker in (a, b):
        worker.take_round()
    assert a.fleet_position() is None  # a view of the fleet is first held for one taker interval
    clock.advance(settings.taker_interval_millis)
    assert a.fleet_position() == FleetPosition(0, 3, True)  # at least the group's minimum
    assert b.fleet_position() is None
    clock.advance(settings.taker_interval_millis)
    assert b.fleet_position() == FleetPosition(1, 3, False)
