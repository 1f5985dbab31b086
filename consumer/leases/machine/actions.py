"""The lease machine's vocabulary: the requests it makes of the lease store, the answers it is given,
and the notes (announcements, log lines, metrics, wake-ups) the driver performs after each step.

A *conversation* is one operation of the machine -- a heartbeat, a taker round, a checkpoint, a
release -- written as a generator: it yields a :class:`Request` each time it needs the tables and is
resumed with the :class:`Reply`, which :func:`ask` turns back into the call's value or raises its
error where the call stands. So each operation reads in the order it happens, while the machine
itself does no I/O: the driver performs the request, outside the machine's lock, and other threads
step the machine meanwhile, exactly as they could while a call to the tables was on its way.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, TypeVar, cast

from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot

T = TypeVar("T")


class Now(NamedTuple):
    """The time a step happens at: the monotonic clock (fence, intervals) and the wall clock
    (heartbeat rows and hand-over requests, compared with other workers' clocks)."""

    mono: int
    wall: int


# ------------------------------------------------------------------------------------ requests


class Request(Generic[T]):
    """A call to the lease store (:class:`consumer.leases.store.LeaseStore`) answering a ``T``."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Scan(Request[Snapshot]):
    """Both tables, eventually consistent."""


@dataclass(frozen=True, slots=True)
class ScanWorkers(Request[Snapshot]):
    """The workers table only."""


@dataclass(frozen=True, slots=True)
class Get(Request[Lease | None]):
    shard_id: str


@dataclass(frozen=True, slots=True)
class GetHeartbeat(Request[Heartbeat | None]):
    worker_id: str


@dataclass(frozen=True, slots=True)
class Take(Request[Lease]):
    seen: Lease
    new_owner: str


@dataclass(frozen=True, slots=True)
class PutHeartbeat(Request[tuple[HandOverRequest, ...]]):
    beat: Heartbeat
    expected_counter: int | None
    clear: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AskHandOver(Request[None]):
    owner: str
    request: HandOverRequest


@dataclass(frozen=True, slots=True)
class RequestSteal(Request[Lease]):
    seen: Lease
    thief: str
    at_wall_millis: int


@dataclass(frozen=True, slots=True)
class Release(Request[Lease]):
    held: Lease
    to: str | None


@dataclass(frozen=True, slots=True)
class Checkpoint(Request[Lease]):
    held: Lease
    position: ExtendedSequenceNumber


@dataclass(frozen=True, slots=True)
class DeleteHeartbeat(Request[None]):
    beat: Heartbeat


@dataclass(frozen=True, slots=True)
class DealingView(Request[Snapshot]):
    """The view a stopping worker deals its leases from (:mod:`.dealing`). The driver reads it one
    at a time (shard consumers release at once and must deal from one read) by running
    :meth:`~consumer.leases.machine.machine.LeaseMachine.dealing_read` under a lock of its own."""

    refresh: bool
    fallback: Snapshot  # dealt from while the tables refuse a fresh read


@dataclass(frozen=True, slots=True)
class Reply:
    """A request's answer: the call's value, or what it raised (a lease error, which the conversation
    may handle; anything else ends it, after its ``finally`` clauses)."""

    value: object = None
    error: BaseException | None = None


Conversation = Generator[Request[Any], Reply, T]


def ask(request: Request[T]) -> Generator[Request[Any], Reply, T]:
    """Make ``request`` and give back its value, or raise its error here (``yield from ask(...)``)."""
    reply = yield request
    if reply.error is not None:
        raise reply.error
    return cast(T, reply.value)


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    value: T


def advance(conversation: Conversation[T], reply: Reply | None) -> Request[Any] | Done[T]:
    """Resume ``conversation`` (``reply``: the answer to its last request; None to begin) up to its
    next request, or its end."""
    try:
        return next(conversation) if reply is None else conversation.send(reply)
    except StopIteration as stop:
        return Done(cast(T, stop.value))


# --------------------------------------------------------------------------------------- notes

LeaseEventKind = Literal["taken", "lost", "released", "finished", "asked"]


@dataclass(frozen=True, slots=True)
class Announce:
    """A change in what this worker holds, for the listeners (the lifecycle reconciles on them).

    ``taken``: I own it now (taken, handed over to me, or re-adopted after a fence); ``lost``: it was
    taken from me or I fenced myself, stop without checkpointing; ``released``: I gave it up
    gracefully; ``finished``: a SHARD_END of mine is recorded in the table (the lease stays there
    ownerless; also when it was recorded after I lost hold of the lease), so its children are due;
    ``asked``: another worker asked for it -- its consumer hands it over after the batch in flight
    (woken now, not after an idle back-off that may outlast the hand-over's deadline).
    """

    kind: LeaseEventKind
    shard_id: str
    lease: Lease | None


@dataclass(frozen=True, slots=True)
class Say:
    """A line for the ``consumer.leases`` log."""

    level: int
    message: str
    args: tuple[object, ...] = ()


@dataclass(frozen=True, slots=True)
class LeasesNotTaken:
    """The LEASES_NOT_TAKEN event (:func:`consumer.telemetry.catalogue.log_leases_not_taken`)."""

    shard_ids: tuple[str, ...]
    free_millis: int


@dataclass(frozen=True, slots=True)
class Count:
    operation: str
    name: str
    value: int


@dataclass(frozen=True, slots=True)
class Gauge:
    operation: str
    name: str
    value: float
    unit: str


@dataclass(frozen=True, slots=True)
class Timed:
    operation: str
    name: str
    millis: int
    success: bool


@dataclass(frozen=True, slots=True)
class Wake:
    """Wake a loop of the driver before its interval is up."""

    loop: Literal["heartbeat", "taker"]


@dataclass(frozen=True, slots=True)
class RoundObserved:
    """A taker round begins (``ok`` None) or ended its reads (True) or failed them (False)."""

    ok: bool | None
    error: str | None


Note = Announce | Say | LeasesNotTaken | Count | Gauge | Timed | Wake | RoundObserved


@dataclass
class Outbox:
    """The notes of the step in progress; the driver takes them when the step ends."""

    notes: list[Note] = field(default_factory=list)

    def drain(self) -> Sequence[Note]:
        notes = self.notes
        if not notes:
            return ()
        self.notes = []
        return notes

    def announce(self, kind: LeaseEventKind, shard_id: str, lease: Lease | None) -> None:
        self.notes.append(Announce(kind, shard_id, lease))

    def info(self, message: str, *args: object) -> None:
        self.notes.append(Say(logging.INFO, message, args))

    def warning(self, message: str, *args: object) -> None:
        self.notes.append(Say(logging.WARNING, message, args))

    def say(self, level: int, message: str, *args: object) -> None:
        self.notes.append(Say(level, message, args))

    def count(self, operation: str, name: str, value: int) -> None:
        self.notes.append(Count(operation, name, value))

    def gauge(self, operation: str, name: str, value: float, unit: str = "Count") -> None:
        self.notes.append(Gauge(operation, name, value, unit))

    def timed(self, operation: str, name: str, millis: int, success: bool) -> None:
        self.notes.append(Timed(operation, name, millis, success))

    def observed(self, ok: bool | None, error: str | None) -> None:
        self.notes.append(RoundObserved(ok, error))

    def not_taken(self, shard_ids: Sequence[str], free_millis: int) -> None:
        self.notes.append(LeasesNotTaken(tuple(shard_ids), free_millis))

    def wake(self, loop: Literal["heartbeat", "taker"]) -> None:
        self.notes.append(Wake(loop))

    def lost(self, dropped: Sequence[str], why: str, me: str) -> None:
        """Leases dropped at once (the fence, a removed row): one line, one count, one event each."""
        if not dropped:
            return
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        self.warning("worker %s dropped %d leases: %s (%s)", me, len(dropped), why, shown)
        self.count("RenewAllLeases", "LostLeases", len(dropped))
        for shard_id in dropped:
            self.announce("lost", shard_id, None)
