"""Directed histories of a hand-over that runs overdue: the thief asked, the owner's batch in flight
outlasts failover - margin, and the lease is released (to the thief, or free when it is gone).
World, run and helpers: test_directed_delivery.py."""

from __future__ import annotations

import itertools

import pytest

from simulation.directed import Directed
from simulation.histories import MODULE
from simulation.world import World
from tests.simulation.test_directed_delivery import START, _quiet, run, wait_for, world

__all__ = ["_quiet"]  # the module-wide fixture that quiets the simulated workers' logs


def _lanes_on_two_shards() -> World:
    """Ten lanes over two shards of 300 records each, written until 80 s."""
    processing = {"processor": f"{MODULE}:Recorder", "parallelization_factor": 10}
    return world(
        17, processing, records=300, closes=80_000, shards=2, worker={"idle_time_between_reads_millis": 500}
    )


def _w2_joins_and_asks(w: World) -> str:
    """Once w1 holds both shards, w2 joins; the shard it asks w1 for (its lease's pending owner)."""
    first = w.workers["w1"]
    wait_for(w.kernel, lambda: first.coordinator.holdings.count() == 2, step=100)
    w.join()
    while True:
        w.kernel.sleep(1)
        asked = next((s for s in w.shards if (lease := w.table.get(s)) and lease.pending_owner), None)
        if asked is not None:
            return asked


@pytest.mark.parametrize("answered_after_millis", [8_800, 9_900])
def test_a_checkpoint_refused_because_the_hand_over_is_overdue_is_recorded_by_the_release(
    answered_after_millis: int,
) -> None:
    """Ten lanes, two shards held by w1; w2 joins, asks for one of them, and stops (SIGTERM: its
    heartbeat row goes). On w1 a flush of that shard has begun before w1 learns of the request (the
    heartbeat that brings it is answered late): one lane's checkpoint is answered late too, holding
    the flush's checkpoint lock past the hand-over's deadline while another lane finishes its records
    and waits for the lock. That lane's checkpoint is refused (the hand-over is overdue) although its
    records are handled. The thief is gone, so w1 frees the lease and takes it again: its next
    consumer must start after those records. Fix: the refused position is noted, and the release
    records it (overdue_position_noted; seed 6 025 of the third sweep). Answered 9.9 s late, the
    refusal came after the release and showed the lease free; the release now waits for the
    delivery, so the refusal comes first here as well (the position kept while the lease is free:
    free_lease_keeps_position, tests/unit/leases/test_overdue_hand_over.py)."""
    history = _lanes_on_two_shards()
    late: list[Directed] = []

    def director(w: World) -> None:
        asked = _w2_joins_and_asks(w)
        w.stop_gracefully(w.workers["w2"])
        at = w.kernel.now - START
        late.extend(
            (
                Directed("w1", "heartbeat", at, answer_delay_millis=1_500),
                # Answered after the deadline (asked + failover - margin: 8 s), and before the overdue
                # lease is released (a margin later) or after it.
                Directed(
                    "w1",
                    "checkpoint",
                    at,
                    thread="lanes",
                    shard=asked,
                    answer_delay_millis=answered_after_millis,
                ),
            )
        )
        w.script.faults.extend(late)

    verdict = run(history, 80_000, director)
    assert late, "w2 never asked for a lease"
    assert verdict.ok, str(verdict)


def _handled_beyond_checkpoint_at_releases(w: World, worker: str, shard: str) -> list[str]:
    """Each time ``worker`` gave ``shard``'s lease away (the table's owner moved from it), the records
    it had handled by then that the checkpoint did not cover: the next owner delivers them again."""
    owners = w.table.history.owners.get(shard, [])
    marks = w.table.history.checkpoints.get(shard, [])
    found = []
    for (_, before), (at, after) in itertools.pairwise(owners):
        if before != worker or after == worker:
            continue
        checkpoint = max((cp for t, cp in marks if t <= at), default=None)
        beyond = sorted(
            h.sequence_number
            for h in w.ledger.handled
            if h.worker == worker
            and h.shard_id == shard
            and h.at <= at
            and (
                checkpoint is None
                or not checkpoint.sequence.isdigit()
                or h.sequence_number > int(checkpoint.sequence)
            )
        )
        if beyond:
            found.append(f"released to {after} at {at} past {len(beyond)} handled records ({beyond[:3]}...)")
    return found


def test_an_overdue_hand_over_never_releases_a_lease_past_records_its_lanes_handled() -> None:
    """Ten lanes, two shards held by w1; w2 joins, asks for one of them and stays (the chaos demo's
    case: "hand-over of ... overdue; releasing it" while the shard's consumer was still PROCESSING
    with lane deliveries past its checkpoint; the thief then delivered them again). One lane's
    checkpoint is answered late, holding the flush open past the hand-over's deadline while other
    lanes handle their records. Whenever w1 gives the lease away, the checkpoint covers every record
    it handled by then, so w2 starts after them. (This moment passes with or without the fix
    overdue_waits_for_delivery -- here the lanes that handle records finish before the overdue
    round; tests/unit/leases/test_overdue_hand_over.py holds a delivery open across that round.)"""
    history = _lanes_on_two_shards()
    late: list[Directed] = []
    asked_for: list[str] = []

    def director(w: World) -> None:
        asked = _w2_joins_and_asks(w)
        asked_for.append(asked)
        at = w.kernel.now - START
        late.append(Directed("w1", "checkpoint", at, thread="lanes", shard=asked, answer_delay_millis=9_900))
        w.script.faults.extend(late)

    verdict = run(history, 80_000, director)
    assert late, "w2 never asked for a lease"
    assert verdict.ok, str(verdict)
    assert _handled_beyond_checkpoint_at_releases(history, "w1", asked_for[0]) == []
