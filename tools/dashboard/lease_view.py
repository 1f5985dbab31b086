"""The live page's lease table: who holds which shard, its checkpoint, its state, and each worker's
heartbeat -- what ``consumer leases`` prints, as data (the page adds each shard's lag from the metrics).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from consumer.api.leases import (
    DynamoDBLeaseStore,
    Lease,
    LeaseTableMissingError,
    Snapshot,
    Timing,
    live_workers,
)


def lease_state(lease: Lease, snapshot: Snapshot, live: frozenset[str]) -> str:
    """free, held, expired (its owner's heartbeat is too old), pending-steal, finished (SHARD_END)."""
    if lease.finished:
        return "finished"
    if lease.owner is None:
        return "free"
    if lease.owner in snapshot.heartbeats and lease.owner not in live:
        return "expired"
    if lease.pending_owner:
        return f"pending-steal by {lease.pending_owner}"
    return "held"


@dataclass(frozen=True)
class LeaseFeed:
    """Reads the environment's leases and workers tables (one Scan each per refresh)."""

    store: DynamoDBLeaseStore
    timing: Timing
    table_name: str

    def scan(self) -> Snapshot:
        return self.store.scan()


def snapshot_table(snapshot: Snapshot, now_wall: int, timing: Timing) -> dict[str, Any]:
    """One row per lease (finished ones last) and one per worker, as the page shows them."""
    live = live_workers(snapshot, now_wall, timing)
    ordered = sorted(snapshot.leases.values(), key=lambda lease: (lease.finished, lease.shard_id))
    rows = [
        {
            "shard": lease.shard_id,
            "owner": lease.owner,
            "checkpoint": str(lease.checkpoint),
            "counter": lease.counter,
            "parents": sorted(lease.parent_shard_ids),
            "state": lease_state(lease, snapshot, live),
        }
        for lease in ordered
    ]
    rows += [
        {
            "shard": bad.key,
            "owner": None,
            "checkpoint": "?",
            "counter": None,
            "parents": [],
            "state": f"malformed: {bad.problem}",
        }
        for bad in snapshot.malformed
    ]
    held = Counter(lease.owner for lease in snapshot.leases.values() if lease.owner and not lease.finished)
    workers = []
    for worker in sorted(set(held) | set(snapshot.heartbeats)):
        beat = snapshot.heartbeats.get(worker)
        workers.append(
            {
                "worker": worker,
                "leases": held.get(worker, 0),
                "heartbeat_age_seconds": round((now_wall - beat.at_wall_millis) / 1000, 1) if beat else None,
                "alive": worker in live,
            }
        )
    return {"rows": rows, "workers": workers, "error": None}


def lease_table(feed: LeaseFeed, now_wall: int) -> dict[str, Any]:
    """The feed's table now; a table not there yet (no worker has started) or unreachable is said."""
    try:
        snapshot = feed.scan()
    except LeaseTableMissingError:
        return {
            "rows": [],
            "workers": [],
            "error": f"leases table {feed.table_name} does not exist yet: the first worker creates it",
        }
    except Exception as exc:  # shown on the page; the next refresh tries again
        return {"rows": [], "workers": [], "error": f"cannot read leases table {feed.table_name}: {exc}"}
    return snapshot_table(snapshot, now_wall, feed.timing)
