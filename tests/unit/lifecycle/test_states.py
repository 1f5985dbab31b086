"""The lifecycle transition table, tested directly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.lifecycle.states import (
    TRANSITIONS,
    IllegalTransitionError,
    Lifecycle,
    ShardEvent,
    ShardState,
    ShutdownReason,
)

S, E = ShardState, ShardEvent


def run(*events: ShardEvent) -> Lifecycle:
    life = Lifecycle()
    for event in events:
        life = life.on(event)
    return life


def test_happy_path_to_shard_end() -> None:
    life = run(E.PARENTS_PENDING, E.PARENTS_DONE, E.INITIALIZED, E.BATCH, E.BATCH, E.SHARD_END)
    assert (life.state, life.reason) == (S.SHUTTING_DOWN, ShutdownReason.SHARD_END)
    assert run(E.PARENTS_DONE, E.INITIALIZED, E.SHARD_END, E.SHUTDOWN_DONE).finished


def test_lease_lost_overrides_a_graceful_shutdown() -> None:
    life = run(E.PARENTS_DONE, E.INITIALIZED, E.SHUTDOWN_REQUESTED, E.LEASE_LOST)
    assert life.reason is ShutdownReason.LEASE_LOST


def test_a_blocked_child_can_be_shut_down() -> None:
    assert run(E.SHUTDOWN_REQUESTED).reason is ShutdownReason.REQUESTED
    assert run(E.LEASE_LOST).reason is ShutdownReason.LEASE_LOST


@pytest.mark.parametrize(
    "events",
    [
        (E.INITIALIZED,),  # initialised before the parents finished
        (E.BATCH,),  # records before initialisation
        (E.PARENTS_DONE, E.INITIALIZED, E.PARENTS_DONE),
        (E.PARENTS_DONE, E.INITIALIZED, E.SHARD_END, E.BATCH),  # records after the shard ended
        (E.SHUTDOWN_DONE,),
    ],
)
def test_impossible_events_are_errors(events: tuple[ShardEvent, ...]) -> None:
    with pytest.raises(IllegalTransitionError):
        run(*events)


@given(st.lists(st.sampled_from(list(ShardEvent)), max_size=30))
def test_no_sequence_processes_after_shutdown_or_reopens(events: list[ShardEvent]) -> None:
    life = Lifecycle()
    seen_shutdown = False
    for event in events:
        if (life.state, event) not in TRANSITIONS:
            continue
        life = life.on(event)
        if life.state in (S.SHUTTING_DOWN, S.SHUTDOWN_COMPLETE):
            seen_shutdown = True
        if seen_shutdown:
            # Once shutting down, the consumer never goes back to fetching or processing.
            assert life.state in (S.SHUTTING_DOWN, S.SHUTDOWN_COMPLETE)
            assert life.reason is not None
