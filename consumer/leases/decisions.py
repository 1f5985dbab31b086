"""Pure lease decisions: a snapshot of the table and the time in, a plan of actions out.

Liveness. A worker is alive while its heartbeat row is younger than ``failover + skew`` by the
observer's wall clock. A lease is *expired* when its owner is not alive; an owner with no heartbeat row
at all (a Java KCL worker, or a table adopted from one) is judged by KCL's rule instead: its lease
counter has not changed for ``failover`` as this observer saw it (:class:`KclExpiryTracker`).

Balancing. Leases whose parents are unfinished (*blocked*) and leases ready to process are balanced
as two separate pools, as the DynamoDB Streams adapter does; ``max_leases_for_worker`` caps only the
ready pool. A blocked child therefore never uses up the cap that its parent needs, which is what
makes the KCL's lineage deadlock (every worker at N/M holding children waiting on parents nobody may
take) impossible for any cap ≥ 1. Within a pool, each worker's quota is ⌊n/W⌋ or ⌈n/W⌉ (the ⌈⌉ going
to the workers already holding most, so as little as possible moves); a worker above its quota sheds
the surplus itself (it checkpoints, then releases: no duplicates), and a worker below it takes free or
expired leases, and asks over-quota workers to hand leases over (``pendingOwner``) when none are free,
at most ``max_leases_to_steal_at_one_time`` per round.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from consumer.leases.model import Lease, Snapshot
from ground.settings import WorkerSettings


@dataclass(frozen=True)
class Timing:
    """The two durations every liveness judgement uses: the failover time and the clock skew allowed."""

    failover_millis: int
    skew_millis: int

    @property
    def horizon_millis(self) -> int:
        """Not renewed for this long: expired, whatever the clocks (failover + skew)."""
        return self.failover_millis + self.skew_millis

    @classmethod
    def of(cls, settings: WorkerSettings) -> Timing:
        return cls(settings.failover_time_millis, settings.max_clock_skew_millis)


@dataclass(frozen=True)
class RoundPlan:
    """What one worker should do after one scan."""

    take: tuple[Lease, ...] = ()
    # More free leases of the same pools, in order, to try when a take loses its race (so a round
    # still takes its full share when several workers go for the same expired leases).
    spare: tuple[tuple[Lease, ...], ...] = ()
    steal: tuple[Lease, ...] = ()
    shed: tuple[Lease, ...] = ()
    hand_over: tuple[tuple[Lease, str | None], ...] = ()
    workers: int = 1
    target: int = 0
    spillover: int = 0
    expired: int = 0
    mine: int = 0
    # Ready leases no worker may take because every worker is at max_leases_for_worker: the fleet
    # is short of capacity (warned about, and the ReadyLeasesUnassigned metric that an alarm watches).
    unassigned_ready: int = 0
    # Leases this worker's shares still lack after the planned takes (steals pending, nothing free).
    short: int = 0


def live_workers(snapshot: Snapshot, now_wall: int, timing: Timing) -> frozenset[str]:
    horizon = timing.horizon_millis
    return frozenset(
        w for w, beat in snapshot.heartbeats.items() if now_wall - beat.at_wall_millis <= horizon
    )


def view_time(snapshot: Snapshot) -> int:
    """The newest heartbeat in the view (wall ms, its writer's clock): the instant a view's own
    liveness is judged at, for the choices every worker must make alike (the sync leader, the
    DescribeStream timetable's ranks). Judged at the reader's now instead, a view gone stale (no
    read succeeding) or a fleet whose heartbeat writes all fail (a throttled or timing-out workers
    table, its reads still answered) shows every other worker dead, and every worker would list the
    whole stream as its leader, adding its load to the table's trouble (the brownout bench of
    2026-12-01). Judged here, a worker is dead when its row fell a horizon behind the others'; while
    every row stands still, the fleet keeps the leader it had."""
    return max((beat.at_wall_millis for beat in snapshot.heartbeats.values()), default=0)


def sync_leader(me: str, snapshot: Snapshot, now_wall: int, timing: Timing) -> str:
    """The one worker that lists the whole stream for the fleet: the smallest id among the live ones.

    Every worker reads the same heartbeat rows, so they agree without a vote or another write; when
    the lister dies its row expires (failover + skew) and the next smallest takes over at its next
    sync. A stale scan can make two workers list for a moment, which costs calls but no correctness:
    shard sync's creates are conditional. A worker always counts itself live (its own row may not be
    in the scan yet), so a lone worker lists."""
    return min(live_workers(snapshot, now_wall, timing) | {me})


def owner_alive(lease: Lease, snapshot: Snapshot, live: frozenset[str], kcl_expired: frozenset[str]) -> bool:
    if lease.owner is None:
        return False
    if lease.owner in snapshot.heartbeats:
        return lease.owner in live
    return lease.shard_id not in kcl_expired


def hand_over_overdue(lease: Lease, now_wall: int, timing: Timing) -> bool:
    """A hand-over request older than failover + skew: its owner has stopped processing the lease
    (at failover - margin by its own clock), so the thief may take it without waiting any longer."""
    since = lease.pending_since
    return since is not None and now_wall - since > timing.horizon_millis


def waiting_parents(
    parent_shard_ids: Iterable[str], leased: Mapping[str, bool], *, progressed: bool = False
) -> tuple[str, ...]:
    """The parents a child still waits for. ``leased``: the parents that have a lease, each with
    whether it is at SHARD_END; ``progressed``: the child's own checkpoint is a sequence number.

    A parent with a lease waits until that lease is finished. A parent without one is finished
    (cleaned up, trimmed, or closed before a LATEST start) -- unless it has a sibling parent with a
    lease: then it is a merge's parent whose lease shard sync has not created yet. A merge's child is
    leased when the first of its parents ends (shard-end discovery), and its other parent may be a
    shard no listing has shown yet (the child of a split that happened just before the merge); cleanup
    never deletes a parent before its children progressed (consumer.streams.sync, rule 5), so until
    then a missing parent next to a leased one is one still to come, and shard sync leases it (rule 4).
    A child that progressed started with its parents finished; its parents' leases are then
    cleaned up one at a time, and the one left does not make it wait again."""
    parents = tuple(parent_shard_ids)
    waiting = tuple(p for p in parents if p in leased and not leased[p])
    missing = tuple(p for p in parents if p not in leased)
    if missing and len(missing) < len(parents) and not progressed:
        return waiting + missing
    return waiting


def parents_finished(lease: Lease, leases: Mapping[str, Lease]) -> bool:
    """Whether nothing keeps the lease's shard from starting (:func:`waiting_parents`)."""
    leased = {p: leases[p].finished for p in lease.parent_shard_ids if p in leases}
    progressed = lease.checkpoint.sequence.isdigit()
    return not waiting_parents(lease.parent_shard_ids, leased, progressed=progressed)


def quotas(counts: Mapping[str, int], workers: Iterable[str], total: int, cap: int | None) -> dict[str, int]:
    """Each worker's fair share of ``total``: the ⌈n/W⌉ shares go to those already holding most."""
    ordered = sorted(workers, key=lambda w: (-counts.get(w, 0), w))
    base, extra = divmod(total, max(1, len(ordered)))
    share = {w: base + (1 if i < extra else 0) for i, w in enumerate(ordered)}
    if cap is not None:
        share = {w: min(q, cap) for w, q in share.items()}
    return share


def plan_round(
    me: str,
    snapshot: Snapshot,
    now_wall: int,
    timing: Timing,
    *,
    max_leases_for_worker: int,
    max_leases_to_steal: int,
    kcl_expired: frozenset[str] = frozenset(),
    rng: random.Random | None = None,
    keep: frozenset[str] = frozenset(),
    avoid: frozenset[str] = frozenset(),
) -> RoundPlan:
    """This worker's round: what to take, steal, shed and hand over. ``keep``: leases that just moved
    here, shed only after the others (a shard moved twice in a row pauses twice); ``avoid``: leases
    this worker gave up because they stalled here, neither taken nor stolen for a while."""
    rng = rng or random.Random(0)
    live = live_workers(snapshot, now_wall, timing) | {me}
    active = [lease for lease in snapshot.leases.values() if not lease.finished]
    owner = {
        lease.shard_id: (lease.owner if owner_alive(lease, snapshot, live, kcl_expired) else None)
        for lease in active
    }
    expired = sum(1 for lease in active if lease.owner is not None and owner[lease.shard_id] is None)
    workers = frozenset(live | {o for o in owner.values() if o is not None})
    view = _View(me, owner, workers, live, now_wall, timing)

    ready = [lease for lease in active if parents_finished(lease, snapshot.leases)]
    blocked = [lease for lease in active if not parents_finished(lease, snapshot.leases)]

    # While another worker stops gracefully its leases are on their way to survivors chosen for
    # their share of the fleet without it; shedding meanwhile (by a share that still counts it)
    # would move a shard a second time, and pause it twice. Balance after.
    handing = any(beat.stopping for w, beat in snapshot.heartbeats.items() if w != me and w in live)
    parts = _Parts()
    for pool, cap in ((ready, max_leases_for_worker), (blocked, None)):
        _balance(
            parts,
            view,
            pool,
            cap=cap,
            handing=handing,
            keep=keep,
            rng=rng,
            avoid=avoid,
            steal_at_most=max_leases_to_steal,
        )

    hand_over = tuple(
        (lease, lease.pending_owner if lease.pending_owner in live else None)
        for lease in active
        if owner[lease.shard_id] == me and lease.pending_owner is not None and lease.pending_owner != me
    )
    handed = {lease.shard_id for lease, _ in hand_over}
    return RoundPlan(
        take=tuple(parts.take),
        spare=tuple(parts.spare),
        steal=tuple(parts.steal),
        shed=tuple(lease for lease in parts.shed if lease.shard_id not in handed),
        hand_over=hand_over,
        workers=len(workers),
        target=parts.target,
        spillover=parts.spillover,
        expired=expired,
        mine=parts.mine,
        unassigned_ready=max(0, len(ready) - max_leases_for_worker * len(workers)),
        short=parts.short,
    )


@dataclass(frozen=True)
class _View:
    """What each pool of a round is judged against."""

    me: str
    owner: Mapping[str, str | None]  # each unfinished lease's live owner (None: free or expired)
    workers: frozenset[str]  # the live workers and the owners judged alive by KCL's rule
    live: frozenset[str]
    now_wall: int
    timing: Timing


@dataclass
class _Parts:
    """A round's plan as its pools add to it."""

    take: list[Lease] = field(default_factory=list)
    spare: list[tuple[Lease, ...]] = field(default_factory=list)
    steal: list[Lease] = field(default_factory=list)
    shed: list[Lease] = field(default_factory=list)
    target: int = 0
    spillover: int = 0
    mine: int = 0
    short: int = 0


def _surplus(mine: list[Lease], quota: int, keep: frozenset[str]) -> list[Lease]:
    """The leases to shed down to ``quota``: those not already being handed to a pending thief
    first, and of those the ones that did not just move here."""
    surplus = sorted(
        mine,
        key=lambda lease: (
            lease.pending_owner is not None,
            lease.shard_id not in keep,
            lease.shard_id,
        ),
        reverse=True,
    )
    return surplus[: len(mine) - quota]


def _balance(
    parts: _Parts,
    view: _View,
    pool: list[Lease],
    *,
    cap: int | None,
    handing: bool,
    keep: frozenset[str],
    rng: random.Random,
    avoid: frozenset[str],
    steal_at_most: int,
) -> None:
    """One pool of a round, capped at ``cap`` leases per worker or not: this worker's share of it,
    and the surplus it sheds (not while another worker is ``handing`` its leases over) or what it
    takes and asks for to reach its share."""
    me, owner = view.me, view.owner
    counts = Counter(o for lease in pool if (o := owner[lease.shard_id]) is not None)
    share = quotas(counts, view.workers, len(pool), cap)
    mine = sorted((lease for lease in pool if owner[lease.shard_id] == me), key=lambda lease: lease.shard_id)
    quota = share[me]
    parts.mine += len(mine)
    if cap is not None:
        parts.target = quota
        parts.spillover = max(0, math.ceil(len(pool) / len(view.workers)) - cap)
    if len(mine) > quota:
        if not handing:
            parts.shed.extend(_surplus(mine, quota, keep))
        return
    _fill(
        parts,
        view,
        pool,
        cap=cap,
        counts=counts,
        share=share,
        mine=len(mine),
        rng=rng,
        avoid=avoid,
        steal_at_most=steal_at_most,
    )


def _fill(
    parts: _Parts,
    view: _View,
    pool: list[Lease],
    *,
    cap: int | None,
    counts: Counter[str],
    share: Mapping[str, int],
    mine: int,
    rng: random.Random,
    avoid: frozenset[str],
    steal_at_most: int,
) -> None:
    """A pool where this worker holds ``mine`` leases, no more than its share: take free, expired
    and overdue leases up to ⌈n/W⌉, and ask over-quota workers for the rest of its share."""
    me, owner = view.me, view.owner
    quota = share[me]
    # Free leases are taken up to ⌈n/W⌉ (KCL's target): if every worker stopped at its fair quota,
    # a lease could stay unowned until the next round whenever two workers computed the same one.
    ceiling = math.ceil(len(pool) / len(view.workers))
    room = (min(ceiling, cap) if cap is not None else ceiling) - mine
    # Hand-overs I asked for and that are still pending. Those older than failover + skew were not
    # honoured (the owner stopped processing them at failover - margin): take them by force.
    asked = [lease for lease in pool if lease.pending_owner == me and owner[lease.shard_id] not in (None, me)]
    overdue = [lease for lease in asked if hand_over_overdue(lease, view.now_wall, view.timing)]
    free = [lease for lease in pool if owner[lease.shard_id] is None and lease.shard_id not in avoid]
    rng.shuffle(free)
    chosen = (overdue + free)[: max(0, room)]
    parts.take.extend(chosen)
    parts.spare.append(tuple(lease for lease in free if lease not in chosen))
    # The rest are on their way: asking again every round would mark one more lease per round
    # until the victim had none left.
    need = quota - mine - len(chosen) - (len(asked) - sum(1 for lease in overdue if lease in chosen))
    parts.short += max(0, quota - mine - len(chosen))
    if need > 0 and cap is not None:
        over = {w for w in view.workers if counts.get(w, 0) > share.get(w, 0) and w != me}
        victims = [
            lease
            for lease in pool
            if owner[lease.shard_id] in over
            and lease.pending_owner is None
            and lease.owner in view.live
            and lease.shard_id not in avoid
        ]
        victims.sort(key=lambda lease: (-counts[lease.owner or ""], lease.shard_id))
        parts.steal.extend(victims[: min(need, steal_at_most)])


@dataclass
class KclExpiryTracker:
    """KCL's expiry rule for owners without a heartbeat row: the counter must stay frozen for a
    whole failover period *as this observer saw it* (monotonic clock, no clock-sync assumption)."""

    failover_millis: int
    _seen: dict[str, tuple[int, int]] = field(default_factory=dict)  # shard -> (counter, first seen)

    def observe(self, snapshot: Snapshot, now_mono: int) -> frozenset[str]:
        expired: set[str] = set()
        seen: dict[str, tuple[int, int]] = {}
        for lease in snapshot.leases.values():
            if lease.owner is None or lease.owner in snapshot.heartbeats:
                continue
            counter, since = self._seen.get(lease.shard_id, (lease.counter, now_mono))
            if counter != lease.counter:
                counter, since = lease.counter, now_mono
            seen[lease.shard_id] = (counter, since)
            if now_mono - since > self.failover_millis:
                expired.add(lease.shard_id)
        self._seen = seen
        return frozenset(expired)


def dead_heartbeats(snapshot: Snapshot, now_wall: int, timing: Timing, factor: int = 10) -> tuple[str, ...]:
    """Heartbeat rows of workers silent for ``factor`` failover periods, owning nothing: safe to delete."""
    owners = {lease.owner for lease in snapshot.leases.values() if lease.owner}
    horizon = factor * timing.failover_millis + timing.skew_millis
    return tuple(
        w
        for w, beat in snapshot.heartbeats.items()
        if now_wall - beat.at_wall_millis > horizon and w not in owners
    )
