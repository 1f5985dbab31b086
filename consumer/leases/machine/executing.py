"""Carrying out a round's plan: takes (each owner judged dead read again first), steal requests,
sheds and hand-over marks; and taking up a position this worker processed but could not record.

A scan may be stale: it can show an owner's heartbeat older than it is. So before taking a lease
from an owner judged dead, the owner's heartbeat row is read again *consistently*; a live owner keeps
its lease. If the owner's next heartbeat lands after that read, it lands after the owner's own fence
deadline (the owner's row was already older than failover + skew), and the fence has dropped the
lease on the owner's side before its heartbeat can extend anything (:mod:`.holdings`).
"""

from __future__ import annotations

from dataclasses import replace

from consumer.leases.decisions import RoundPlan, hand_over_overdue
from consumer.leases.errors import LeaseConflictError, LeaseError, LeaseStoreUnavailableError
from consumer.leases.machine.actions import (
    AskHandOver,
    Checkpoint,
    Conversation,
    GetHeartbeat,
    RequestSteal,
    Take,
    ask,
)
from consumer.leases.machine.state import LeaseState
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Lease, Snapshot


def execute(s: LeaseState, plan: RoundPlan, snapshot: Snapshot) -> Conversation[None]:
    taken = 0
    checked: dict[str, bool] = {}
    spares = [list(pool) for pool in plan.spare]
    queue = list(plan.take)
    while queue:
        lease = queue.pop(0)
        sent_fence_at = s.holdings.fence_at()
        try:
            if not (yield from _owner_still_dead(s, lease, snapshot, checked)):
                s.out.info("worker %s: %s's owner %s is alive after all", s.me, lease.shard_id, lease.owner)
                continue
            if s.fenced_now():
                break
            got = yield from take(s, lease)
            # A position of mine the table refused before I lost the lease (it was released or
            # expired meanwhile) is written now rather than replayed, as a take-back does.
            unwritten = s.holdings.unwritten_for(got)
        except LeaseConflictError:
            # Somebody else was faster: try the next free lease of the same pool instead.
            pool = next((p for p in spares if p), None)
            if pool is not None:
                queue.append(pool.pop(0))
            continue
        except LeaseStoreUnavailableError as exc:
            s.out.warning("take %s failed: %s", lease.shard_id, exc)
            break
        if unwritten is not None:
            got = yield from resume_at(s, got, unwritten)
        if s.hold(got, "took", sent_fence_at):
            taken += 1
            s.out.info("worker %s took lease %s from %s", s.me, got.shard_id, lease.owner or "(nobody)")
    s.out.count("TakeLeases", "TakenLeases", taken)
    for lease in plan.steal:
        yield from _ask(s, lease)
    for lease in plan.shed:
        s.holdings.mark_shed(lease.shard_id)
    for lease, to in plan.hand_over:
        asked = lease.pending_since
        if s.holdings.ask_hand_over(lease.shard_id, to, None if asked is None else s.stop_by(asked)):
            s.hand_over_asked(lease.shard_id, to)


def take(s: LeaseState, seen: Lease) -> Conversation[Lease]:
    """A conditional take. A conflict is never resolved as "my write landed": the same state can
    come from an earlier take of mine that I have since stopped using (fenced, finished), and
    holding it again without moving the counter would let a worker that judged me dead take it
    under me. A take that did land shows up in the next scan as mine and is re-adopted then."""
    return (yield from ask(Take(seen, s.me)))


def resume_at(s: LeaseState, adopted: Lease, position: ExtendedSequenceNumber) -> Conversation[Lease]:
    """I processed the records up to ``position`` and the table refused to record it; the lease is
    mine again (taken back, handed to me, or taken from nobody): record it rather than replay
    them. Forward only (Holdings.unwritten_for): someone who got further wins. If the table still
    refuses, the position is kept on the held lease (the lifecycle starts after it) and written
    with the next checkpoint."""
    try:
        adopted = yield from ask(Checkpoint(adopted, position))
        s.holdings.written(adopted.shard_id, position)
    except LeaseError:
        adopted = replace(adopted, checkpoint=position)
        s.holdings.note_unwritten(adopted, position)
    s.out.info(
        "worker %s: %s resumes after %s, which it processed before it lost the lease",
        s.me,
        adopted.shard_id,
        position,
    )
    return adopted


def _owner_still_dead(
    s: LeaseState, lease: Lease, snapshot: Snapshot, checked: dict[str, bool]
) -> Conversation[bool]:
    """Re-read the owner's heartbeat consistently: the scan that judged it dead may be stale."""
    owner = lease.owner
    if owner is None or owner == s.me or owner not in snapshot.heartbeats:
        return True  # free, mine, or judged by KCL's counter rule (the take's condition covers it)
    if lease.pending_owner == s.me and hand_over_overdue(lease, s.now.wall, s.timing):
        return True  # a forced take of an overdue hand-over: the owner stopped at its deadline
    # Asked of it and not overdue yet, a lease is taken only from an owner that really is dead:
    # the scan's two tables may be stale apart, the pending mark fresh and the row old.
    if owner not in checked:
        # Judge the row by the time the read was *sent*: the read happens at or after it, and an
        # answer that arrives late (a paused worker, a slow call) says nothing about the time
        # between. Measured after the answer, a row read long ago would look dead.
        asked = s.now.wall
        beat = yield from ask(GetHeartbeat(owner))
        horizon = s.timing.horizon_millis
        seen_at = None if beat is None else max(beat.at_wall_millis, s.recovered_at or 0)
        checked[owner] = seen_at is None or asked - seen_at > horizon
    return checked[owner]


def _ask(s: LeaseState, lease: Lease) -> Conversation[None]:
    try:
        # Ask on the owner's heartbeat row first; pendingSince is read after that write landed,
        # so the forced-take timer starts no earlier than the owner's stop timer.
        asked_at = s.now.wall
        yield from ask(AskHandOver(lease.owner or "", HandOverRequest(lease.shard_id, s.me, asked_at)))
        yield from ask(RequestSteal(lease, s.me, s.now.wall))
        s.out.info("worker %s asked %s to hand over %s", s.me, lease.owner, lease.shard_id)
    except LeaseError:
        return
    s.asked[lease.shard_id] = s.now.mono
