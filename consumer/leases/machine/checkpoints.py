"""A checkpoint: the lifecycle's record of progress, written conditional on this worker's ownership.

A bounded loop of tries, at most :data:`CHECKPOINT_ATTEMPTS`: a write refused because my own
take-back of the untouched lease (after a fence) landed while it was on its way is written again
under the new counter -- the same ownership goes on; a lease whose counter keeps moving under this
worker that often is treated as lost.

Records processed and not recorded are never forgotten while they may matter: a checkpoint refused
for now (throttled, timed out), refused because a hand-over is overdue, refused by the fence, or
arriving after the lease was given up, is noted as *unwritten* (:class:`~.holdings.Holdings`), to be
written by the release that follows, a take-back, or the next checkpoint, forward only.
"""

from __future__ import annotations

from typing import Literal, NoReturn

from consumer.leases.errors import LeaseError, LeaseLostError
from consumer.leases.machine.actions import Checkpoint, Conversation, ask
from consumer.leases.machine.state import LeaseState
from consumer.leases.model import ExtendedSequenceNumber, Lease

CHECKPOINT_ATTEMPTS = 3  # tries of one checkpoint
WRITTEN: Literal["written"] = "written"
AGAIN: Literal["again"] = "again"
FENCED = "fenced: no heartbeat succeeded within failover - margin"


def checkpoint(
    s: LeaseState, shard_id: str, target: ExtendedSequenceNumber, counter: int | None
) -> Conversation[None]:
    """Record progress. Raises LeaseLostError when the lease is not (provably) mine any more or,
    with ``counter``, is held under a later ownership than the caller's;
    CheckpointRefusedError when ``target`` is behind the last checkpoint or the shard ended."""
    later: Lease | None = None  # the lease, when held under a later ownership than the caller's
    for _ in range(CHECKPOINT_ATTEMPTS):
        try:
            step = yield from _checkpoint_once(s, shard_id, target, None if later is not None else counter)
        except LeaseError:
            if later is None:
                raise
            step = WRITTEN  # recording an earlier ownership's progress is best effort
        if isinstance(step, Lease):
            # Progress made under an earlier ownership of a shard this worker holds again: the
            # records are processed, so it is recorded under the current ownership if it moves
            # the checkpoint on (the next consumer then starts after them instead of replaying
            # them); the caller still stops, it must not go on from its own, older position.
            later = step
            if step.checkpoint < target:
                continue
            step = WRITTEN
        if step is WRITTEN:
            if later is not None:
                raise LeaseLostError("checkpoint (held under a later ownership now)", shard_id, later)
            return
    raise LeaseLostError("checkpoint (the counter kept moving under this worker)", shard_id, later)


def _checkpoint_once(
    s: LeaseState, shard_id: str, target: ExtendedSequenceNumber, counter: int | None
) -> Conversation[Literal["written", "again"] | Lease]:
    """One try: WRITTEN, AGAIN (my own take-back landed meanwhile), or the lease when it is held
    under a later ownership than ``counter``'s."""
    lease, dropped = s.holdings.get(shard_id, s.now.mono)
    s.out.lost(dropped, FENCED, s.me)
    if lease is None:
        _refused_unheld(s, shard_id, target)
    if counter is not None and not s.holdings.within(shard_id, counter):
        return lease
    if s.hand_over_overdue(shard_id):
        # Processing had to stop, but these records are processed: the release that follows (or
        # a take-back, if the thief never comes) records the position, conditional on my
        # counter, instead of leaving them to be replayed.
        s.holdings.note_unwritten(lease, target)
        raise LeaseLostError("checkpoint (a hand-over to another worker is overdue)", shard_id, None)
    started = s.now.mono
    s.holdings.writing(shard_id, target)
    try:
        updated = yield from _write_checkpoint(lease, target)
    except LeaseLostError as exc:
        s.out.timed("UpdateLease", "UpdateLease", s.now.mono - started, False)
        s.holdings.written(shard_id)
        if _taken_back_meanwhile(s, lease, target, exc.current):
            return AGAIN
        had, _ = s.holdings.remove(shard_id, lease.counter)
        if had is not None:
            s.out.announce("lost", shard_id, exc.current)
        raise
    except LeaseError:
        s.out.timed("UpdateLease", "UpdateLease", s.now.mono - started, False)
        # Throttled or timed out: if this worker is fenced before it can write it, and takes the
        # lease back untouched, the position is written then instead of replaying the records;
        # while it holds the lease, the next shard consumer starts after it (Holdings.leases).
        s.holdings.note_unwritten(lease, target)
        raise
    finally:
        s.holdings.answered(shard_id, target)
    s.holdings.written(shard_id, target)
    s.out.timed("UpdateLease", "UpdateLease", s.now.mono - started, True)
    if updated.finished:
        # A finished lease needs no owner: it stays in the table (children check it) until cleanup.
        s.holdings.remove(shard_id, lease.counter)
        s.out.announce("finished", shard_id, updated)
    else:
        s.holdings.update(updated)
    return WRITTEN


def _refused_unheld(s: LeaseState, shard_id: str, target: ExtendedSequenceNumber) -> NoReturn:
    """A checkpoint of a lease this worker does not hold: refused, always. The records up to
    ``target`` were processed, so if the lease was given up or fenced here, the position is kept,
    to be written if this worker takes the lease again."""
    if s.holdings.refused_after_letting_go(shard_id, target):
        s.out.info(
            "worker %s: checkpoint %s of %s arrived after the lease was given up; kept while "
            "the lease is free, to be written if this worker takes it again",
            s.me,
            target,
            shard_id,
        )
        raise LeaseLostError("checkpoint (the lease was given up)", shard_id, None)
    fenced = s.holdings.refused_by_fence(shard_id, target)
    if fenced:
        s.out.info(
            "worker %s: checkpoint %s of %s refused by the fence; kept, to be written when the "
            "lease is taken up again",
            s.me,
            target,
            shard_id,
        )
    why = "checkpoint (fenced: heartbeats are failing)" if fenced else "checkpoint"
    raise LeaseLostError(why, shard_id, None)


def _taken_back_meanwhile(
    s: LeaseState, lease: Lease, target: ExtendedSequenceNumber, now: Lease | None
) -> bool:
    """A checkpoint of ``lease`` was refused, the table showing ``now``: is it my own take-back of
    the untouched lease (after a fence) that landed while the write was on its way? Then the
    ownership goes on and the write goes again under the counter it has now (True). If it is
    mine again at another counter by a take not answered yet, the take-back resumes after this
    position (the round's adoption) rather than replaying it; so does a take-back already adopted."""
    shard_id = lease.shard_id
    s.out.info(
        "worker %s: checkpoint %s of %s refused: the table shows owner %s, counter %s (held %s)",
        s.me,
        target,
        shard_id,
        now.owner if now else None,
        now.counter if now else None,
        lease.counter,
    )
    if now is None or now.owner != s.me:
        return False
    held_now, _ = s.holdings.get(shard_id, s.now.mono)
    if (
        held_now is not None
        and held_now.counter == now.counter != lease.counter
        and s.holdings.within(shard_id, lease.counter)
    ):
        s.out.info(
            "worker %s: %s of %s written again under counter %d (the same ownership)",
            s.me,
            target,
            shard_id,
            now.counter,
        )
        return True
    if held_now is None:
        s.holdings.note_unwritten(lease, target)
    elif held_now.counter == now.counter and not held_now.finished:
        # Mine again under a new ownership, adopted before this answer came (a take-back after a
        # fence): the records up to the target were processed under the old one, so the next
        # consumer of the shard here starts after them and its checkpoint or release writes them
        # (Holdings.leases), forward only, instead of handling them a second time.
        s.holdings.note_unwritten(held_now, target)
    return False


def _write_checkpoint(lease: Lease, target: ExtendedSequenceNumber) -> Conversation[Lease]:
    """A conditional checkpoint; a refusal that shows my own write (it landed, then the retry
    failed its condition -- a SHARD_END checkpoint always does) is a success."""
    try:
        return (yield from ask(Checkpoint(lease, target)))
    except LeaseLostError as exc:
        now = exc.current
        if (
            now is not None
            and now.owner == lease.owner
            and now.counter == lease.counter
            and now.checkpoint == target
        ):
            return now
        raise
