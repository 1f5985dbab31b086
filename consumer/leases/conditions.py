"""Every condition the lease store writes under, in one place.

The timeline these conditions protect (one shard, two workers A and B; time flows right)::

    A: take(c=4→5) ──process── checkpoint(owner=A, c=5) ─ hb(t) ─╳ (paused, partitioned or dead)
    A's fence:                               t + failover − margin ──┤ A drops every lease here
    B:                              scan: A's heartbeat looks older than failover + skew
                                    ─> consistent GetItem of A's row: still t, still too old
                                    ─> take(c=5→6)
    A (a zombie that wakes up): checkpoint(owner=A, c=5) ──> ConditionalCheckFailed: lease lost
    A's heartbeat sent before the fence that lands after B's read: lands after A's fence; A holds
    nothing by then and takes leases back only by a take naming the counter (which B moved).

- ``leaseCounter`` changes on every change of ownership (take, hand-off, release). A write that
  assumes ownership names the counter it saw, so a worker acting on a stale view always loses.
- A checkpoint needs ``leaseOwner = me AND leaseCounter = counter-at-take``: after anybody took the
  lease, the old owner can never record progress again; and ``checkpoint <> SHARD_END`` so a finished
  shard can never be reopened (its children may already be running).
- Heartbeat rows (the workers table) are written only by their worker (absent, or at the counter it
  last wrote), and deleted by others only if still at the counter they judged stale. A thief adds a
  ``handOver#`` attribute to the owner's row; the owner's heartbeat update leaves it there until the
  owner removes it, so an answer lost to a retried write loses no request.

Hand-over requests (balancing) and the forced take. Thief T wants a lease of live owner O::

    T: t0=wall ─ write handOver#s="t0 T" on O's heartbeat row ─ t1=wall ─ lease: pendingOwner=T,
       pendingSince=t1 ──────────────── (wall − t1 > failover + skew) ──> take(owner=O, counter=c)
    O: heartbeat put returns the old row ─> hand s over after the batch; stop processing and
       checkpointing s once O's wall − t0 > failover − margin

O's put is a strongly consistent write, so O learns of the request with its first heartbeat applied
after the request. If no heartbeat of O succeeds after that, O is fenced entirely at failover − margin
after the start of its last good heartbeat, which began before the request. Either way O stops at
most failover − margin + skew (true time) after t0 ≤ t1, and T takes no earlier than failover + skew
after t1: O has stopped ``margin`` before T starts. A hand-over O does make in time moves the counter,
so T's forced take, which names the counter it saw, then fails.

Creates and cleanup: the lineage generation. Shard sync plans a create from a view of the table
(no lease for shard X, no descendant of X that has started); cleanup deletes X's finished lease once
its children have progressed. A create planned from a view taken *before* that delete and sent after
it — the creator stopped in between for any length of time: GC, SIGSTOP, a suspended VM, slow
retries — would re-create X at TRIM_HORIZON and replay it after its children. No check made before
sending can close that gap, so the table does: every cleanup first moves ``generation`` on the
``__app__#lineage`` row (workers table), then deletes; every create is a transaction whose
condition check requires the generation the creator read *before* its scan. A create planned before
any cleanup it could not see therefore fails. (A scan staler than the cleanup delay could still hide
a lease created and cleaned up entirely before the read; the delay, three failover periods of being
seen finished, keeps that out of reach.)

Each entry is (ConditionExpression, the names it uses); values are bound by the store.
"""

from __future__ import annotations

CREATE_IF_ABSENT = "attribute_not_exists(leaseKey)"

# Heartbeat rows live in the workers table (hash key workerId); only their worker writes the counter.
HEARTBEAT_NEW = "attribute_not_exists(workerId)"
HEARTBEAT_MINE = "heartbeatCounter = :expected"
HEARTBEAT_STALE = "heartbeatCounter = :seen_counter"
FIRST_START_ABSENT = "attribute_not_exists(workerId)"

# Taking a lease seen free (no owner) or seen owned by a dead worker.
TAKE_FREE = "leaseCounter = :seen_counter AND attribute_not_exists(leaseOwner)"
TAKE_FROM = "leaseCounter = :seen_counter AND leaseOwner = :seen_owner"

# A hand-over request written onto the owner's heartbeat row: only while the row exists (a worker
# without one is judged by expiry, never asked).
HAND_OVER_ASK = "attribute_exists(workerId)"

STEAL_REQUEST = (
    "leaseCounter = :seen_counter AND leaseOwner = :seen_owner AND attribute_not_exists(pendingOwner)"
)

HELD = "leaseOwner = :me AND leaseCounter = :held_counter"
CHECKPOINT = f"{HELD} AND checkpoint <> :shard_end"

DELETE_FINISHED = "checkpoint = :shard_end"

# The lineage row (workers table): absent until the first cleanup, then its generation only grows.
LINEAGE_UNCHANGED = "generation = :generation"
LINEAGE_NEVER_MOVED = "attribute_not_exists(workerId)"
