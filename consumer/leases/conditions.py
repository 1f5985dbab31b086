"""Every condition the lease store writes under, in one place.

The timeline these conditions protect (one shard, two workers A and B; time flows right)::

    A: take(c=4→5) ──process── checkpoint(owner=A, c=5) ─ hb ─ hb ─╳ (dies)
    B:                                              scan: A's heartbeat older than
                                                    failover + skew ──> take(c=5→6)
    A (a zombie that wakes up): checkpoint(owner=A, c=5) ──> ConditionalCheckFailed: lease lost

- ``leaseCounter`` changes on every change of ownership (take, hand-off, release). A write that
  assumes ownership names the counter it saw, so a worker acting on a stale view always loses.
- A checkpoint needs ``leaseOwner = me AND leaseCounter = counter-at-take``: after anybody took the
  lease, the old owner can never record progress again; and ``checkpoint <> SHARD_END`` so a finished
  shard can never be reopened (its children may already be running).
- Heartbeat rows are written only by their worker (absent, or at the counter it last wrote), and
  deleted by others only if still at the counter they judged stale.

Each entry is (ConditionExpression, the names it uses); values are bound by the store.
"""

from __future__ import annotations

CREATE_IF_ABSENT = "attribute_not_exists(leaseKey)"

HEARTBEAT_NEW = "attribute_not_exists(leaseKey)"
HEARTBEAT_MINE = "workerId = :me AND heartbeatCounter = :expected"
HEARTBEAT_STALE = "heartbeatCounter = :seen_counter"

# Taking a lease seen free (no owner) or seen owned by a dead worker.
TAKE_FREE = "leaseCounter = :seen_counter AND attribute_not_exists(leaseOwner)"
TAKE_FROM = "leaseCounter = :seen_counter AND leaseOwner = :seen_owner"

STEAL_REQUEST = (
    "leaseCounter = :seen_counter AND leaseOwner = :seen_owner AND attribute_not_exists(pendingOwner)"
)

HELD = "leaseOwner = :me AND leaseCounter = :held_counter"
CHECKPOINT = f"{HELD} AND checkpoint <> :shard_end"

DELETE_FINISHED = "checkpoint = :shard_end"
