"""Liveness: this worker's heartbeat row, and the fence that stops it when heartbeats fail.

Every ``renewal_interval`` the worker puts its heartbeat row in the workers table, conditional on
the counter it last wrote. Another worker may take this worker's leases only once that row's
``heartbeatAt`` is older than ``failover + skew`` on its own clock *as read consistently just before
the take*; this worker stops using them at ``fence_after = failover - margin`` after the *start* of
its last heartbeat that succeeded (:class:`~.holdings.Holdings`). So a worker that cannot renew --
paused, partitioned, throttled, suspended -- has stopped ``margin`` before anybody can start, whatever
the clocks say within the skew bound.

Writes that committed and still failed (an HTTP 500 or a timeout after the commit, which botocore
retries) are resolved by looking at the row the failed condition returns (``ALL_OLD``, no extra read):

- the row holds exactly the beat I sent (counter and time): my write landed -- a success;
- the row holds another counter: it is still my row (nobody else writes its counter), written by an
  earlier attempt I believed failed -- resynchronise to it and put again at once;
- there is no row: another worker found it dead for ten failover periods and removed it -- whatever I
  held may be taken, so drop it all and start a new row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from consumer.leases.errors import HeartbeatConflictError, LeaseError
from consumer.leases.machine.actions import Conversation, DeleteHeartbeat, PutHeartbeat, ask
from consumer.leases.machine.state import LeaseState
from consumer.leases.model import HandOverRequest, Heartbeat


@dataclass(frozen=True)
class BeatResult:
    ok: bool
    requests: tuple[HandOverRequest, ...] = ()
    dropped: tuple[str, ...] = ()  # leases the fence or a removed row took away, to announce as lost
    why: str = ""


def heartbeat(s: LeaseState) -> Conversation[bool]:
    """One heartbeat, and what follows from its answer: leases dropped by the fence announced as
    lost, hand-over requests on the row marked on the leases asked for, and after an outage the
    taker woken at once rather than at the end of its back-off, so work resumes within one taker
    interval."""
    s.expire()
    result = yield from beat(s)
    if result.ok and (s.row.failing or s.failures):
        s.note_recovery()
        s.out.wake("taker")
    s.row.failing = not result.ok
    s.out.lost(result.dropped, "fenced before the heartbeat landed, or heartbeat row removed", s.me)
    for request in result.requests:
        if s.holdings.ask_hand_over(request.shard_id, request.thief, s.stop_by(request.at_wall_millis)):
            s.hand_over_asked(request.shard_id, request.thief)
    return result.ok


def beat(s: LeaseState) -> Conversation[BeatResult]:
    started = s.now.mono
    result = yield from _attempt(s, started, resync_left=1)
    elapsed = s.now.mono - started
    s.out.timed("RenewAllLeases", "RenewLease", elapsed, result.ok)
    if result.ok:
        s.out.gauge("RenewAllLeases", "CurrentLeases", s.holdings.count(), "Count")
    elif result.why:
        s.out.warning("worker %s: heartbeat failed: %s", s.me, result.why)
    return result


def _settled(s: LeaseState, now_wall: int) -> list[str]:
    """Requests on my row I no longer need to see: for leases I do not hold (handed over, lost,
    finished), or older than failover + skew (the thief has taken it by force, or given up)."""
    return [
        r.shard_id
        for r in s.row.on_row
        if not s.holdings.holds(r.shard_id) or now_wall - r.at_wall_millis > s.row.stale_request_millis
    ]


def _attempt(s: LeaseState, started: int, resync_left: int) -> Conversation[BeatResult]:
    expected = s.row.counter
    now_wall = s.now.wall
    beat = Heartbeat(
        s.me,
        (expected or 0) + 1,
        now_wall,
        s.holdings.count(),
        s.row.stopping,
        new_leases_at=s.row.new_leases_at,
        round_ok_at_wall_millis=s.row.round_ok_at,
    )
    try:
        requests = yield from ask(PutHeartbeat(beat, expected, tuple(_settled(s, now_wall))))
    except HeartbeatConflictError as exc:
        row = exc.current
        if row is not None and row.counter == beat.counter and row.at_wall_millis == beat.at_wall_millis:
            # My own write landed and was retried: the row it left says everything the lost
            # answer would have, requests included (they stay on the row until I clear them).
            return _succeeded(s, started, beat, exc.requests)
        dropped: tuple[str, ...] = ()
        if row is None:
            dropped = tuple(s.holdings.drop_all())
            if dropped:
                s.out.say(logging.ERROR, "worker %s: heartbeat row was removed; dropping all leases", s.me)
        s.row.counter = row.counter if row is not None else None
        if resync_left:
            retried = yield from _attempt(s, started, resync_left - 1)
            return BeatResult(retried.ok, retried.requests, dropped + retried.dropped, retried.why)
        return BeatResult(False, (), dropped, f"row out of step ({exc})")
    except LeaseError as exc:
        # Throttled, unreachable or timed out: it may still have landed; the next put resolves it.
        return BeatResult(False, (), (), str(exc))
    return _succeeded(s, started, beat, requests)


def _succeeded(
    s: LeaseState, started: int, beat: Heartbeat, requests: tuple[HandOverRequest, ...]
) -> BeatResult:
    s.row.counter = beat.counter
    s.row.on_row = requests
    dropped = s.holdings.renewed(started, s.now.mono)
    if dropped:
        s.out.warning(
            "worker %s: heartbeat landed after the fence deadline; %d leases were dropped at the "
            "deadline and are re-adopted only by a take that moves their counter",
            s.me,
            len(dropped),
        )
    return BeatResult(True, requests, tuple(dropped))


def retire(s: LeaseState) -> Conversation[None]:
    """Remove my row on a graceful stop (conditional: only if still at my counter)."""
    if s.row.counter is None:
        return
    try:
        yield from ask(DeleteHeartbeat(Heartbeat(s.me, s.row.counter, 0)))
    except LeaseError as exc:
        s.out.info("worker %s: heartbeat row not removed (%s); others retire it later", s.me, exc)
