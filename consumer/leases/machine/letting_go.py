"""Letting a lease go: a release (to a thief, a survivor, a named worker, or free), an overdue
hand-over, a stalled shard, and a stopper's last re-deal.

Each writes, before the lease goes, the position this worker processed to and the table refused to
record for now (:func:`_record_before_release`): whoever takes the lease next starts after those
records instead of replaying them.
"""

from __future__ import annotations

from collections.abc import Sequence

from consumer.leases.decisions import live_workers
from consumer.leases.errors import LeaseConflictError, LeaseError
from consumer.leases.machine.actions import Checkpoint, Conversation, DealingView, Get, Release, ask
from consumer.leases.machine.state import LeaseState
from consumer.leases.model import Lease
from consumer.leases.successors import relief, successor


def release(
    s: LeaseState, shard_id: str, counter: int | None = None, *, to: str | None = None
) -> Conversation[None]:
    """Give a lease up: to the thief that asked for it; while stopping, to a named survivor who
    takes it up at its next round; to ``to`` when named; else (a shed) free. With ``counter``, only
    if it is still held under the ownership that counter belongs to."""
    lease, asked_to = s.holdings.remove(shard_id, counter)
    if lease is None:
        return
    to = asked_to or to
    if to is None and not lease.finished and not s.taking:
        # A thief that asked for it and is alive comes first: a lease handed to anybody else
        # would be handed on to it at once, and its shard would pause twice.
        asked = lease.pending_owner
        live = live_workers(s.latest, s.now.wall, s.timing)
        to = asked if asked not in (None, s.me) and asked in live else (yield from _successor(s, shard_id))
    lease = yield from _record_before_release(s, lease)
    try:
        released = yield from ask(Release(lease, to))
    except LeaseConflictError as exc:
        now = exc.current
        if now is not None and now.owner == to and now.counter == lease.counter + 1:
            released = now  # my release landed, then its retry failed the condition
        else:
            s.out.announce("lost", shard_id, now)  # already somebody else's: nothing to release
            return
    except LeaseError as exc:
        s.out.warning("release %s failed (it will expire instead): %s", shard_id, exc)
        s.out.announce("released", shard_id, None)
        return
    s.out.info("worker %s released lease %s%s", s.me, shard_id, f" to {to}" if to else "")
    if to is not None and not s.taking:
        s.dealing.handed[released.shard_id] = released
    if to is None and not released.finished:
        s.left_free()
    s.out.announce("released", shard_id, released)


def _record_before_release(s: LeaseState, lease: Lease) -> Conversation[Lease]:
    """A position I processed to but could not record (a checkpoint refused for now), or one whose
    write is still on its way, is written before the lease goes: whoever takes it next starts
    after those records instead of replaying them, and a late write never lands behind it
    (Holdings.position_before_release). Forward only and conditional on my counter; if it fails,
    the release says why."""
    pending = s.holdings.position_before_release(lease)
    if pending is None:
        return lease
    try:
        recorded = yield from ask(Checkpoint(lease, pending))
    except LeaseError as exc:
        s.out.info("worker %s: %s of %s not recorded before release: %s", s.me, pending, lease.shard_id, exc)
        return lease
    s.holdings.written(lease.shard_id, pending)
    s.out.info("worker %s: recorded %s of %s before releasing it", s.me, pending, lease.shard_id)
    if recorded.finished:
        # A SHARD_END its shard consumer could not record (the hand-over ran overdue meanwhile):
        # that consumer stopped as if the lease were lost, so the children are asked for here.
        s.out.announce("finished", lease.shard_id, recorded)
    return recorded


def _successor(s: LeaseState, shard_id: str) -> Conversation[str | None]:
    """While stopping: the survivor that takes this lease up at its next round (successors.successor),
    dealt from a view read for the stop (:mod:`.dealing`), not the last round's."""
    view = yield from ask(DealingView(refresh=False, fallback=s.latest))
    return successor(
        s.me,
        view,
        s.now.wall,
        s.timing,
        shard_id=shard_id,
        max_leases_for_worker=s.settings.max_leases_for_worker,
    )


def release_overdue_now(s: LeaseState) -> Conversation[None]:
    """Leases asked for long ago and still held: nothing processes them any more, so give them up
    rather than leave them stranded (e.g. the thief died after asking). Done a margin after the
    deadline, when a live thief may force anyway."""
    yield from release_overdue(s, s.holdings.overdue(s.now.wall, s.settings.fence_margin_millis))


def release_overdue(s: LeaseState, shard_ids: Sequence[str]) -> Conversation[None]:
    """Release these overdue hand-overs -- except a lease whose records are being delivered: its
    delivery may have processed records beyond the checkpoint (lanes run ahead of it), and a
    release now would let the next owner deliver them again. The delivery stops at its next
    record (may_process is false once overdue) and the release follows it
    (:func:`delivery_ended`), recording the position it reached first."""
    live = live_workers(s.latest, s.now.wall, s.timing)
    for shard_id in shard_ids:
        if s.holdings.being_delivered(shard_id) or not s.holdings.holds(shard_id):
            continue
        if s.holdings.thief(shard_id) not in live:
            s.holdings.forget_thief(shard_id)  # the thief is gone: free it for anyone
        s.out.warning("worker %s: hand-over of %s overdue; releasing it", s.me, shard_id)
        yield from release(s, shard_id)


def delivery_ended(s: LeaseState, shard_id: str) -> Conversation[None]:
    """A delivery of the shard's records returned: a hand-over that ran overdue meanwhile releases
    the lease now, recording the position the delivery reached first."""
    s.holdings.delivering(shard_id, -1)
    # A fenced worker writes nothing: its leases are dropped (and taken by expiry), not
    # released -- the delivery may return long after the deadline (a paused process).
    s.expire()
    if s.hand_over_overdue(shard_id) and not s.holdings.being_delivered(shard_id):
        yield from release_overdue(s, [shard_id])


def give_up_stalled(s: LeaseState, shard_id: str, counter: int | None) -> Conversation[None]:
    """A stalled shard (consumer.lifecycle.stalls): released to the least loaded other live worker
    (relief), which adopts it at its next round, or free if there is none; this worker's rounds
    leave it alone for a stall timeout, and while its call here is stuck (LeaseState.stuck), so it
    does not come straight back here."""
    s.avoid[shard_id] = s.now.mono + (s.settings.stall_timeout_millis or 0)
    s.expire()  # fenced: dropped, never released
    yield from release(s, shard_id, counter, to=_relief(s, shard_id))


def hand_on_stalled(s: LeaseState, shard_id: str) -> Conversation[None]:
    """A lease given up as stalled here whose release did not land, or that another worker gave up
    to me (the table names me), while I avoid it: release it again, never adopt it back. While its
    call here is stuck it goes free, not to a named worker: that one may have a call stuck on it too
    and would hand it straight back."""
    try:
        current = yield from ask(Get(shard_id))
        if current is None or current.owner != s.me or current.finished:
            return
        to = None if shard_id in s.stuck else _relief(s, shard_id)
        yield from ask(Release(current, to))
    except LeaseError as exc:
        s.out.info("worker %s: stalled %s not released yet (%s); next round", s.me, shard_id, exc)
        return
    s.out.info("worker %s released lease %s%s", s.me, shard_id, f" to {to}" if to else "")
    if to is None:
        s.left_free()


def _relief(s: LeaseState, shard_id: str) -> str | None:
    return relief(
        s.me,
        s.latest,
        s.now.wall,
        s.timing,
        shard_id=shard_id,
        cap=s.settings.max_leases_for_worker,
    )


def redeal(s: LeaseState) -> Conversation[None]:
    """A graceful stop's last step, before my row goes: a lease I handed to a worker that turned
    out to be stopping too (its row did not say so yet when I dealt) is never adopted by it, and
    would wait a failover time once its row is gone. Hand it on again, conditional on the owner
    and counter my hand-over left: it lands only if that worker did not adopt it meanwhile
    (adopting moves the counter), so no shard is ever processed under two owners."""
    view = yield from ask(DealingView(refresh=True, fallback=s.latest))
    now = s.now.wall
    live = live_workers(view, now, s.timing)
    for released in list(s.dealing.handed.values()):
        to = released.owner
        if to is None or (to in live and not view.heartbeats[to].stopping):
            continue
        again = successor(
            s.me,
            view,
            now,
            s.timing,
            shard_id=released.shard_id,
            max_leases_for_worker=s.settings.max_leases_for_worker,
        )
        if again is None or again == to:
            continue
        try:
            yield from ask(Release(released, again))
        except LeaseError as exc:
            s.out.info("worker %s: %s stays with %s (%s)", s.me, released.shard_id, to, exc)
            continue
        s.out.info("worker %s handed %s on from %s, stopping too, to %s", s.me, released.shard_id, to, again)
