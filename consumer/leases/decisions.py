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
import zlib
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


def sync_leader(me: str, snapshot: Snapshot, now_wall: int, timing: Timing) -> str:
    """The one worker that lists the whole stream for the fleet: the smallest id among the live ones.

    Every worker reads the same heartbeat rows, so they agree without a vote or another write; when
    the lister dies its row expires (failover + skew) and the next smallest takes over at its next
    sync. A stale scan can make two workers list for a moment, which costs calls but no correctness:
    shard sync's creates are conditional. A worker always counts itself live (its own row may not be
    in the scan yet), so a lone worker lists."""
    return min(live_workers(snapshot, now_wall, timing) | {me})


def successor(
    me: str,
    snapshot: Snapshot,
    now_wall: int,
    timing: Timing,
    *,
    shard_id: str,
    max_leases_for_worker: int,
) -> str | None:
    """Whom a stopping worker hands ``shard_id`` to. Every lease of every stopping worker (its row
    says so; this one too) is dealt out in one deal, in shard order, each to the live worker that
    is not stopping and below its cap: one on another host than the lease's owner first, then one
    still below its share of the fleet without the stopping workers, then the fewest leases; ties
    by a hash of the shard and the worker (:func:`tie_rank`). Every stopping worker reads the same
    rows, so they deal alike and no survivor gets two stoppers' shares (it shed them again at once,
    and those shards paused twice). None when nobody is live or everyone is at the cap: the lease
    is then released free.

    Ties by the hash rather than by id, because stopping workers whose views differ (read a moment
    apart while a fleet balances) still spread their leases: by id, each gave its leases to the
    same lowest ids, and a rolling deploy's new worker ``worker-10`` was handed 7 leases where its
    share was 4, adopted them one by one (the last 2.5 s later) and shed the surplus at once, so
    those shards paused twice in a row (3.9 s).

    A lease released to a named worker is adopted at that worker's next taker round, within one
    taking interval; a free lease waits until some worker's plan wants it, which takes longer while
    the stopping worker's heartbeat row still counts it as live. Another host first, because a host
    stops its workers together (a scale-in, a rolling deploy's terminated instance): a worker of
    the same host was often told to stop in the same second, before its row could say so, and a
    lease handed to it waited for its heartbeat to expire (a rolling deploy measured 13 s)."""
    live = live_workers(snapshot, now_wall, timing)
    stopping = {w for w in live if snapshot.heartbeats[w].stopping} | {me}
    loads: dict[str, int] = {w: 0 for w in live if w not in stopping}
    if not loads:
        return None
    active = [lease for lease in snapshot.leases.values() if not lease.finished]
    dealt = {lease.shard_id: lease.owner or me for lease in active if lease.owner in stopping}
    dealt.setdefault(shard_id, me)
    for lease in active:
        if lease.owner in loads:
            loads[lease.owner] += 1
    share = -(-len(active) // len(loads))
    for shard in sorted(dealt):
        host = host_of(dealt[shard])
        open_ = [w for w, n in loads.items() if n < max_leases_for_worker]
        if not open_:
            return None
        chosen = min(
            open_,
            key=lambda w: (
                host is not None and host_of(w) == host,
                loads[w] >= share,
                loads[w],
                tie_rank(shard, w),
                w,
            ),
        )
        if shard == shard_id:
            return chosen
        loads[chosen] += 1
    return None  # pragma: no cover - shard_id is always dealt


def tie_rank(shard_id: str, worker_id: str) -> int:
    """A worker's rank for a shard among equally loaded survivors: a stable hash (crc32, the same in
    every process, unlike ``hash``), so each shard prefers its own worker and the deal spreads."""
    return zlib.crc32(f"{shard_id}\n{worker_id}".encode())


def relief(
    me: str, snapshot: Snapshot, now_wall: int, timing: Timing, *, shard_id: str, cap: int
) -> str | None:
    """Who takes over a shard that stalled here: the live worker, not stopping, below ``cap``, that
    holds the fewest leases (ties by :func:`tie_rank`). Named in the release, it adopts the lease at
    its next round even when it is at its share (a free lease would wait for a worker below it).
    None when there is nobody: the lease is released free."""
    live = live_workers(snapshot, now_wall, timing)
    loads = {w: 0 for w in live if w != me and not snapshot.heartbeats[w].stopping}
    for lease in snapshot.leases.values():
        if not lease.finished and lease.owner in loads:
            loads[lease.owner] += 1
    ranked = sorted((n, -tie_rank(shard_id, w), w) for w, n in loads.items() if n < cap)
    return ranked[0][2] if ranked else None


def host_of(worker_id: str) -> str | None:
    """The host in a worker id of the usual shape ``[name@]host:pid:random`` (new_worker_id), else None."""
    rest = worker_id.split("@", 1)[-1]
    return rest.split(":", 1)[0] if rest.count(":") >= 2 else None


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


def parents_finished(lease: Lease, leases: Mapping[str, Lease]) -> bool:
    """A parent is finished when its lease is at SHARD_END or gone (cleaned up, or never leased)."""
    return all(p not in leases or leases[p].finished for p in lease.parent_shard_ids)


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
    workers = set(live) | {o for o in owner.values() if o is not None}

    ready = [lease for lease in active if parents_finished(lease, snapshot.leases)]
    blocked = [lease for lease in active if not parents_finished(lease, snapshot.leases)]

    # While another worker stops gracefully its leases are on their way to survivors chosen for
    # their share of the fleet without it; shedding meanwhile (by a share that still counts it)
    # moved a shard a second time, and a rolling deploy's shards paused twice. Balance after.
    handing = any(beat.stopping for w, beat in snapshot.heartbeats.items() if w != me and w in live)
    take: list[Lease] = []
    spare: list[tuple[Lease, ...]] = []
    steal: list[Lease] = []
    shed: list[Lease] = []
    target = spillover = mine_total = short = 0
    for pool, cap in ((ready, max_leases_for_worker), (blocked, None)):
        counts = Counter(o for lease in pool if (o := owner[lease.shard_id]) is not None)
        share = quotas(counts, workers, len(pool), cap)
        mine = sorted(
            (lease for lease in pool if owner[lease.shard_id] == me), key=lambda lease: lease.shard_id
        )
        quota = share[me]
        mine_total += len(mine)
        if cap is not None:
            target = quota
            spillover = max(0, math.ceil(len(pool) / len(workers)) - cap)
        if len(mine) > quota:
            # Shed the leases that are not already being handed to a pending thief first.
            surplus = sorted(
                mine,
                key=lambda lease: (
                    lease.pending_owner is not None,
                    lease.shard_id not in keep,
                    lease.shard_id,
                ),
                reverse=True,
            )
            if not handing:
                shed.extend(surplus[: len(mine) - quota])
            continue
        # Free leases are taken up to ⌈n/W⌉ (KCL's target): if every worker stopped at its fair quota,
        # a lease could stay unowned until the next round whenever two workers computed the same one.
        ceiling = math.ceil(len(pool) / len(workers))
        room = (min(ceiling, cap) if cap is not None else ceiling) - len(mine)
        # Hand-overs I asked for and that are still pending. Those older than failover + skew were not
        # honoured (the owner stopped processing them at failover - margin): take them by force.
        asked = [
            lease for lease in pool if lease.pending_owner == me and owner[lease.shard_id] not in (None, me)
        ]
        overdue = [lease for lease in asked if hand_over_overdue(lease, now_wall, timing)]
        free = [lease for lease in pool if owner[lease.shard_id] is None and lease.shard_id not in avoid]
        rng.shuffle(free)
        chosen = (overdue + free)[: max(0, room)]
        take.extend(chosen)
        spare.append(tuple(lease for lease in free if lease not in chosen))
        # The rest are on their way: asking again every round would mark one more lease per round
        # until the victim had none left.
        need = quota - len(mine) - len(chosen) - (len(asked) - sum(1 for lease in overdue if lease in chosen))
        short += max(0, quota - len(mine) - len(chosen))
        if need > 0 and cap is not None:
            over = {w for w in workers if counts.get(w, 0) > share.get(w, 0) and w != me}
            victims = [
                lease
                for lease in pool
                if owner[lease.shard_id] in over
                and lease.pending_owner is None
                and lease.owner in live
                and lease.shard_id not in avoid
            ]
            victims.sort(key=lambda lease: (-counts[lease.owner or ""], lease.shard_id))
            steal.extend(victims[: min(need, max_leases_to_steal)])

    hand_over = tuple(
        (lease, lease.pending_owner if lease.pending_owner in live else None)
        for lease in active
        if owner[lease.shard_id] == me and lease.pending_owner is not None and lease.pending_owner != me
    )
    handed = {lease.shard_id for lease, _ in hand_over}
    return RoundPlan(
        take=tuple(take),
        spare=tuple(spare),
        steal=tuple(steal),
        shed=tuple(lease for lease in shed if lease.shard_id not in handed),
        hand_over=hand_over,
        workers=len(workers),
        target=target,
        spillover=spillover,
        expired=expired,
        mine=mine_total,
        unassigned_ready=max(0, len(ready) - max_leases_for_worker * len(workers)),
        short=short,
    )


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
