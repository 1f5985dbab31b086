"""Whom a lease goes to when its owner lets it go on purpose: a stopping worker's deal
(:func:`successor`) and a stalled shard's relief (:func:`relief`). Pure: a snapshot and the time in,
a worker id out (None: the lease is released free)."""

from __future__ import annotations

import zlib

from consumer.leases.decisions import Timing, live_workers
from consumer.leases.model import Snapshot


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
    apart while a fleet balances) still spread their leases: by id, each would give its leases to
    the same lowest ids, which would adopt more than their share one by one and shed the surplus at
    once, so those shards would pause twice in a row.

    A lease released to a named worker is adopted at that worker's next taker round, within one
    taking interval; a free lease waits until some worker's plan wants it, which takes longer while
    the stopping worker's heartbeat row still counts it as live. Another host first, because a host
    stops its workers together (a scale-in, a rolling deploy's terminated instance): a worker of
    the same host is often told to stop in the same second, before its row can say so, and a lease
    handed to it waits for its heartbeat to expire."""
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
