"""The per-shard lifecycle as a transition table.

::

    WAITING_ON_PARENT_SHARDS --parents_done--> INITIALIZING --initialized--> PROCESSING
            |   ^ parents_pending (re-check every parent_shard_poll_interval)      |   ^ batch (stay)
            |___|                                                                   |___|
    any state except SHUTDOWN_COMPLETE:
        --shard_end------------> SHUTTING_DOWN(SHARD_END)   processor must checkpoint SHARD_END
        --lease_lost-----------> SHUTTING_DOWN(LEASE_LOST)  KCL's ZOMBIE: never checkpoint again
        --shutdown_requested---> SHUTTING_DOWN(REQUESTED)   graceful: checkpoint, then release
    SHUTTING_DOWN --shutdown_done--> SHUTDOWN_COMPLETE

``shard_end`` only happens from PROCESSING (or INITIALIZING, when the lease is already at
SHARD_END). A lease lost while shutting down for another reason turns the shutdown into LEASE_LOST,
because nothing may be checkpointed any more. Every other (state, event) pair is a bug and raises
:class:`IllegalTransitionError` instead of being ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ShardState(Enum):
    WAITING_ON_PARENT_SHARDS = "WAITING_ON_PARENT_SHARDS"
    INITIALIZING = "INITIALIZING"
    PROCESSING = "PROCESSING"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    SHUTDOWN_COMPLETE = "SHUTDOWN_COMPLETE"


class ShardEvent(Enum):
    PARENTS_DONE = "parents_done"
    PARENTS_PENDING = "parents_pending"
    INITIALIZED = "initialized"
    BATCH = "batch"
    SHARD_END = "shard_end"
    LEASE_LOST = "lease_lost"
    SHUTDOWN_REQUESTED = "shutdown_requested"
    SHUTDOWN_DONE = "shutdown_done"


class ShutdownReason(Enum):
    SHARD_END = "SHARD_END"
    LEASE_LOST = "LEASE_LOST"
    REQUESTED = "REQUESTED"


class IllegalTransitionError(RuntimeError):
    """An event that cannot happen in the current state (a bug in the caller)."""


S, E, R = ShardState, ShardEvent, ShutdownReason
_ACTIVE = (S.WAITING_ON_PARENT_SHARDS, S.INITIALIZING, S.PROCESSING)

# (state, event) -> (next state, shutdown reason it sets, or None to keep the current one)
TRANSITIONS: dict[tuple[ShardState, ShardEvent], tuple[ShardState, ShutdownReason | None]] = {
    (S.WAITING_ON_PARENT_SHARDS, E.PARENTS_PENDING): (S.WAITING_ON_PARENT_SHARDS, None),
    (S.WAITING_ON_PARENT_SHARDS, E.PARENTS_DONE): (S.INITIALIZING, None),
    (S.INITIALIZING, E.INITIALIZED): (S.PROCESSING, None),
    (S.INITIALIZING, E.SHARD_END): (S.SHUTTING_DOWN, R.SHARD_END),
    (S.PROCESSING, E.BATCH): (S.PROCESSING, None),
    (S.PROCESSING, E.SHARD_END): (S.SHUTTING_DOWN, R.SHARD_END),
    **{(state, E.LEASE_LOST): (S.SHUTTING_DOWN, R.LEASE_LOST) for state in _ACTIVE},
    **{(state, E.SHUTDOWN_REQUESTED): (S.SHUTTING_DOWN, R.REQUESTED) for state in _ACTIVE},
    (S.SHUTTING_DOWN, E.LEASE_LOST): (S.SHUTTING_DOWN, R.LEASE_LOST),
    (S.SHUTTING_DOWN, E.SHUTDOWN_REQUESTED): (S.SHUTTING_DOWN, None),
    (S.SHUTTING_DOWN, E.SHUTDOWN_DONE): (S.SHUTDOWN_COMPLETE, None),
    (S.SHUTDOWN_COMPLETE, E.LEASE_LOST): (S.SHUTDOWN_COMPLETE, None),
    (S.SHUTDOWN_COMPLETE, E.SHUTDOWN_REQUESTED): (S.SHUTDOWN_COMPLETE, None),
}


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """Where one shard consumer is; immutable, so a step can be tested as ``before -> after``."""

    state: ShardState = S.WAITING_ON_PARENT_SHARDS
    reason: ShutdownReason | None = None

    def on(self, event: ShardEvent) -> Lifecycle:
        try:
            next_state, reason = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise IllegalTransitionError(f"{event.value} cannot happen in {self.state.value}") from None
        return Lifecycle(next_state, reason if reason is not None else self.reason)

    @property
    def finished(self) -> bool:
        return self.state is S.SHUTDOWN_COMPLETE
