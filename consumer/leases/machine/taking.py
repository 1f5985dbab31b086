"""A taker round: read the tables, reconcile what I hold, ask the pure plan what to do, do it.

One round: read who is alive, and scan the leases table if something may need doing
(:mod:`.reading`); record positions processed under leases this worker lost hold of; drop leases the
scan shows changed hands; re-adopt leases that are still mine after a fence (only while unfenced,
and only by a take that moves the counter); release overdue hand-overs; then ask
:func:`~consumer.leases.decisions.plan_round` for takes, steal requests and sheds, and carry them
out (:mod:`.executing`); retire the rows of workers long dead; report.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from consumer.leases.decisions import RoundPlan, dead_heartbeats, live_workers, plan_round
from consumer.leases.errors import CheckpointRefusedError, LeaseConflictError, LeaseError
from consumer.leases.machine.actions import Checkpoint, Conversation, DeleteHeartbeat, Get, ask
from consumer.leases.machine.executing import execute, resume_at, take
from consumer.leases.machine.letting_go import hand_on_stalled, release_overdue_now
from consumer.leases.machine.state import LeaseState
from consumer.leases.model import Lease, Snapshot


def take_round(s: LeaseState) -> Conversation[RoundPlan | None]:
    """One round. None when no plan was made (a failed read, a light round, fenced, or stopping)."""
    s.expire()
    started = s.now.mono
    s.out.observed(None, None)
    try:
        snapshot, full = yield from s.reader.read(
            s.latest, s.held_active(), s.last_plan, s.awaiting_hand_over()
        )
    except LeaseError as exc:
        s.failures += 1
        s.out.warning(
            "worker %s: leases-table scan failed (%s); next try in %d ms", s.me, exc, s.wait_millis()
        )
        s.out.timed("TakeLeases", "ListLeases", s.now.mono - started, False)
        s.out.observed(False, f"{type(exc).__name__}: {exc}")
        return None
    if s.failures:
        s.note_recovery()
    s.failures = 0
    s.row.round_ok_at = s.now.wall  # said on my next beat: the watchdogs judge me by it
    s.out.observed(True, None)
    s.latest = snapshot
    yield from _record_unwritten(s)
    if full:
        for bad in snapshot.malformed:
            s.out.say(logging.ERROR, "leases table: %s (left untouched; fix or delete the item)", bad.problem)
        _reconcile(s, snapshot)
    if s.holdings.fenced(s.now.mono) or not s.taking:
        return None
    if not full:
        yield from release_overdue_now(s)
        yield from _retire_dead_workers(s, s.forgiving(snapshot))
        s.out.timed("TakeLeases", "TakeLeases", s.now.mono - started, True)
        return None
    yield from _adopt(s, snapshot)
    yield from release_overdue_now(s)
    plan = plan_round(
        s.me,
        s.forgiving(snapshot),
        s.now.wall,
        s.timing,
        max_leases_for_worker=s.settings.max_leases_for_worker,
        max_leases_to_steal=s.settings.max_leases_to_steal_at_one_time,
        kcl_expired=s.kcl.observe(snapshot, s.now.mono),
        rng=s.rng,
        keep=s.recently_taken(),
        avoid=s.avoiding(),
    )
    yield from execute(s, plan, snapshot)
    _left_created_free(s, snapshot)
    yield from _retire_dead_workers(s, s.forgiving(snapshot))
    s.last_plan = plan
    s.reader.held_after_plan = s.held_active()
    _report(s, plan, snapshot, s.now.mono - started)
    return plan


def created(s: LeaseState, leases: Sequence[Lease]) -> None:
    """Shard sync created these leases: the next round, which starts now, scans the whole table for
    them. When this worker's share has no room for all of them, the others are told at once
    (LeaseState.left_free), not after that round: their next rounds, within a taking interval of
    the creation, scan for them too. (When it has room, it takes them itself and nobody else pays a
    full scan.)"""
    s.created.update(lease.shard_id for lease in leases)
    s.ended_parents.update(parent for lease in leases for parent in lease.parent_shard_ids)
    s.reader.created += 1
    s.out.wake("taker")
    if len(s.created) > _room_for(s, s.created, frozenset(s.ended_parents)):
        s.left_free()


def _room_for(s: LeaseState, created: set[str], ended: frozenset[str]) -> int:
    """How many more leases this worker's fair share takes once ``created`` exist (``ended``: their
    parents), by the latest view: KCL's ceiling of the unfinished leases over the live workers, less
    what it holds."""
    active = {shard for shard, lease in s.latest.leases.items() if not lease.finished and shard not in ended}
    active |= created
    workers = live_workers(s.latest, s.now.wall, s.timing) | {s.me}
    ceiling = -(-len(active) // len(workers))
    mine = sum(1 for lease in s.holdings.leases() if lease.shard_id not in ended and not lease.finished)
    return min(ceiling, s.settings.max_leases_for_worker) - mine


def _left_created_free(s: LeaseState, snapshot: Snapshot) -> None:
    """Leases I created that this full scan shows free after my takes: I had no room for them, so
    the others are told (LeaseState.left_free) rather than left to find them at their full-scan
    interval."""
    shown = {c for c in s.created if c in snapshot.leases}
    free = [
        c
        for c in shown
        if snapshot.leases[c].owner is None and not snapshot.leases[c].finished and not s.holdings.holds(c)
    ]
    s.created -= shown
    s.ended_parents = {p for p in s.ended_parents if p in snapshot.leases and not snapshot.leases[p].finished}
    if free:
        s.left_free()


def _report(s: LeaseState, plan: RoundPlan, snapshot: Snapshot, elapsed: int) -> None:
    s.out.timed("TakeLeases", "TakeLeases", elapsed, True)
    s.out.count("TakeLeases", "ExpiredLeases", plan.expired)
    s.out.gauge("TakeLeases", "NumWorkers", plan.workers, "Count")
    s.out.gauge("TakeLeases", "LeaseSpillover", plan.spillover, "Count")
    s.out.gauge("TakeLeases", "TotalLeases", len(snapshot.leases), "Count")
    s.out.gauge("TakeLeases", "NeededLeases", max(0, plan.target - plan.mine), "Count")
    shortfall = s.shortfall.observe(plan, snapshot, s.now)
    s.out.gauge("TakeLeases", "ReadyLeasesUnassigned", shortfall, "Count")
    # Items that are not in KCL's format are never taken, changed or deleted: an operator must fix them.
    s.out.gauge("TakeLeases", "MalformedLeases", len(snapshot.malformed), "Count")
    if shortfall:
        s.shortfall.warn(plan, s.now.mono)
    cap = s.settings.max_leases_for_worker
    room = plan.mine < cap and not s.holdings.fenced(s.now.mono)
    left = s.not_taken.observe(snapshot, room, frozenset(s.avoid) | s.stuck, s.now.mono)
    s.out.gauge("TakeLeases", "LeasesNotTaken", len(left), "Count")


def _reconcile(s: LeaseState, snapshot: Snapshot) -> None:
    """Drop leases that changed hands; never on a scan older than my own write."""
    seen = {lease.shard_id: snapshot.leases.get(lease.shard_id) for lease in s.holdings.leases()}
    lost = s.holdings.reconcile(seen, s.me)
    for shard_id in lost:
        s.out.warning("worker %s: lease %s was taken by another worker", s.me, shard_id)
        s.out.announce("lost", shard_id, snapshot.leases.get(shard_id))
    if lost:
        s.out.count("RenewAllLeases", "LostLeases", len(lost))


def _adopt(s: LeaseState, snapshot: Snapshot) -> Conversation[None]:
    """Leases the table says are mine but I do not hold: handed over to me, or mine from before a
    fence. Adopt each by taking it from myself, which moves the counter: a worker that judged me
    dead and sends its take late names the old counter and loses. Adopting on a read alone would
    let that late take succeed while I process the shard again."""
    avoided = s.avoiding()
    for seen in snapshot.leases.values():
        if seen.owner != s.me or seen.finished or s.holdings.holds(seen.shard_id):
            continue
        if seen.shard_id in avoided:
            yield from hand_on_stalled(s, seen.shard_id)
            continue
        sent_fence_at = s.holdings.fence_at()
        try:
            # A consistent read first, never the scan's copy: a checkpoint does not move the
            # counter, so a take conditional on the scan's owner and counter can succeed on a
            # lease whose checkpoint moved on since, and resume before it.
            current = yield from ask(Get(seen.shard_id))
            if current is None or current.owner != s.me or current.finished:
                continue
            if s.fenced_now():
                return
            since = s.holdings.continuing(current)
            adopted = yield from take(s, current)
            # Read after the take: a checkpoint of mine refused because this take landed first
            # notes its position meanwhile (checkpoints.py).
            unwritten = s.holdings.unwritten_for(adopted)
        except LeaseError:
            continue
        if unwritten is not None:
            adopted = yield from resume_at(s, adopted, unwritten)
        if s.hold(adopted, "re-adopted", sent_fence_at, since):
            s.out.info(
                "worker %s re-adopted %s at counter %d (%s)",
                s.me,
                adopted.shard_id,
                adopted.counter,
                "a new ownership" if since is None else f"continuing the ownership from counter {since}",
            )


def _record_unwritten(s: LeaseState) -> Conversation[None]:
    """Record positions processed under leases I lost hold of (the fence dropped them while the
    table refused their checkpoints). The write names the counter I held: it lands only if nobody
    took the lease since, so the next owner starts after those records instead of replaying them;
    it is about records already processed, so the fence (which stops processing) allows it."""
    for lease, position in s.holdings.unwritten_unheld():
        try:
            recorded = yield from ask(Checkpoint(lease, position))
        except LeaseConflictError as exc:
            now = exc.current
            if now is not None and now.owner in (s.me, None) and not now.finished:
                # Mine again at another counter (my own take-back that landed and was answered
                # with an error, or a hand-over to me), or free (released by me when its hand-over
                # was overdue, or by whoever took it meanwhile): keep the position. Whoever takes
                # it next is me or another worker; if me, the take writes it if it is still ahead
                # (unwritten_for) instead of replaying records I processed.
                continue
            s.holdings.forget_unwritten(lease.shard_id)  # somebody else holds it now, or it ended
            if now is not None and now.finished and position.is_shard_end:
                # My SHARD_END landed though its answer never came, and the fence dropped the lease
                # before it could: the shard consumer stopped as if the lease were lost, so nobody
                # has asked for the children yet. Said now (the listeners look them up).
                s.out.info("worker %s: SHARD_END of %s was recorded already", s.me, lease.shard_id)
                s.out.announce("finished", lease.shard_id, now)
                continue
            s.out.info("worker %s: %s of %s not recorded: %s", s.me, position, lease.shard_id, exc)
            continue
        except CheckpointRefusedError as exc:
            s.holdings.forget_unwritten(lease.shard_id)  # it moved on, or the shard ended
            s.out.info("worker %s: %s of %s not recorded: %s", s.me, position, lease.shard_id, exc)
            continue
        except LeaseError:
            continue  # still refused: next round
        s.holdings.written(lease.shard_id, position)  # not one noted further on meanwhile
        s.out.info("worker %s: recorded %s of %s after losing hold of it", s.me, position, lease.shard_id)
        if recorded.finished:
            s.out.announce("finished", lease.shard_id, recorded)  # its children are looked up now


def _retire_dead_workers(s: LeaseState, snapshot: Snapshot) -> Conversation[None]:
    for worker in dead_heartbeats(snapshot, s.now.wall, s.timing):
        try:
            yield from ask(DeleteHeartbeat(snapshot.heartbeats[worker]))
        except LeaseError:
            continue
