"""Shard sync, decided as a pure function: listed shards + existing leases → leases to create and delete.

The caller (the worker's shard syncer) lists the shards, scans the leases table, calls
:func:`plan_shard_sync`, logs the warnings at WARN, creates the new leases **in the order given**
(parents first) with create-if-absent writes, and deletes the given leases in order. It runs every
``worker.shard_sync_interval_millis`` and at once when a shard ends.

Rules (KCL's semantics, kcl-semantics.md, without its sharp edges):

1. ``initial_position`` applies only at the application's first start, and only to shards open then
   with no leased ancestor. With LATEST, shards already closed at first start are not leased: all
   their records are older than the start.
2. Every other new lease starts at TRIM_HORIZON — a descendant started at LATEST would skip the
   records written between its creation and its lease, which is silent loss.
3. A shard whose descendants already hold a lease that has *started* (any checkpoint but
   TRIM_HORIZON) is not leased again: the lineage has moved past it (its lease was cleaned up, or it
   predates a LATEST start). Re-leasing it would replay it after its children. Descendants are
   found through the listing *and* through the leases' own ``parentShardId``, so a listing that
   lags behind the leases table (DescribeStream is eventually consistent) still sees a child lease.
4. Otherwise a listed shard without a lease gets one — in particular the still-readable parent of a
   child that is waiting at TRIM_HORIZON, and it comes first in the list so no worker can see the
   child without its parent's lease (a missing parent lease counts as finished, unless the child
   has another parent with a lease: consumer.leases.decisions.waiting_parents).
5. With cleanup, a finished (SHARD_END) lease is deleted only when it has children, every child has a
   lease whose checkpoint is a sequence number or SHARD_END, and none of its own parents has a lease.
   Rule 3 then keeps it from ever being re-created, and no child can run before it: it is finished.

DescribeStream's eventual consistency (a closed parent without children, a child while the parent
looks open) produces warnings and never an exception; the next sync sees the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from consumer.streams.graph import LineageWarning, ShardGraph
from consumer.streams.source import Shard
from ground.positions import LATEST, SHARD_END, TRIM_HORIZON, InitialPosition


@dataclass(frozen=True, slots=True)
class LeaseView:
    """What the sync needs of an existing lease: its shard, checkpoint text and parents."""

    shard_id: str
    checkpoint: str  # digits, TRIM_HORIZON, LATEST, SHARD_END (or AT_TIMESTAMP from a KCL table)
    parent_shard_ids: frozenset[str] = frozenset()

    @classmethod
    def of(cls, lease: Any) -> LeaseView:
        """From a :class:`consumer.leases.model.Lease` (its checkpoint is an ExtendedSequenceNumber)."""
        checkpoint = lease.checkpoint
        text = checkpoint if isinstance(checkpoint, str) else str(checkpoint.sequence)
        return cls(str(lease.shard_id), text, frozenset(lease.parent_shard_ids))

    @property
    def started(self) -> bool:
        """Processing began (or was placed) past the start of the shard."""
        return self.checkpoint != TRIM_HORIZON

    @property
    def progressed(self) -> bool:
        """At least one record was checkpointed, or the shard is finished."""
        return self.checkpoint == SHARD_END or self.checkpoint.isdigit()


@dataclass(frozen=True, slots=True)
class NewLease:
    shard_id: str
    checkpoint: InitialPosition
    parent_shard_ids: frozenset[str]


class ShardSyncPlan(NamedTuple):
    leases_to_create: tuple[NewLease, ...]  # parents before children
    leases_to_delete: tuple[str, ...]  # shard ids, parents before children
    warnings: tuple[LineageWarning, ...]


def plan_shard_sync(
    shards: Iterable[Shard],
    existing_leases: Iterable[LeaseView],
    initial_position: InitialPosition,
    first_start: bool,
    cleanup: bool,
) -> ShardSyncPlan:
    if initial_position not in (TRIM_HORIZON, LATEST):
        raise ValueError(f"initial_position must be TRIM_HORIZON or LATEST, got {initial_position!r}")
    graph = ShardGraph(shards)
    leases = {lease.shard_id: lease for lease in existing_leases}
    order = graph.parents_first()
    create = _leases_to_create(graph, order, leases, initial_position, first_start)
    delete = _leases_to_delete(graph, order, leases) if cleanup else ()
    return ShardSyncPlan(create, delete, graph.warnings)


def _leases_to_create(
    graph: ShardGraph,
    order: tuple[str, ...],
    leases: dict[str, LeaseView],
    initial_position: InitialPosition,
    first_start: bool,
) -> tuple[NewLease, ...]:
    planned: dict[str, NewLease] = {}
    lease_children: dict[str, set[str]] = {}
    for lease in leases.values():
        for parent in lease.parent_shard_ids:
            lease_children.setdefault(parent, set()).add(lease.shard_id)
    for shard_id in order:
        if shard_id in leases:
            continue
        descendants = [leases[d] for d in _descendants(graph, lease_children, shard_id) if d in leases]
        if any(d.started for d in descendants):
            continue  # rule 3: the lineage is already past this shard
        has_leased_ancestor = any(a in leases or a in planned for a in graph.ancestors(shard_id))
        start: InitialPosition
        if not first_start or has_leased_ancestor or descendants or initial_position == TRIM_HORIZON:
            start = TRIM_HORIZON
        elif graph.is_open(shard_id):
            start = LATEST
        else:
            continue  # rule 1: closed before the first start with LATEST
        planned[shard_id] = NewLease(shard_id, start, frozenset(graph.parents_of(shard_id)))
    return tuple(planned.values())


def _descendants(graph: ShardGraph, lease_children: dict[str, set[str]], shard_id: str) -> list[str]:
    """Every shard below ``shard_id`` known from the listing or from the leases' parent links."""
    seen = {shard_id}
    found: list[str] = []
    frontier = [shard_id]
    while frontier:
        current = frontier.pop()
        listed = graph.children_of(current) if current in graph else ()
        for child in sorted({*listed, *lease_children.get(current, ())}):
            if child not in seen:
                seen.add(child)
                found.append(child)
                frontier.append(child)
    return found


def _leases_to_delete(
    graph: ShardGraph, order: tuple[str, ...], leases: dict[str, LeaseView]
) -> tuple[str, ...]:
    children: dict[str, set[str]] = {}
    for lease in leases.values():
        for parent in lease.parent_shard_ids:
            children.setdefault(parent, set()).add(lease.shard_id)
    ranked = {shard_id: i for i, shard_id in enumerate(order)}
    delete: list[str] = []
    for lease in sorted(leases.values(), key=lambda v: (ranked.get(v.shard_id, -1), v.shard_id)):
        if lease.checkpoint != SHARD_END:
            continue
        kids = children.get(lease.shard_id, set())
        if lease.shard_id in graph:
            kids = kids | set(graph.children_of(lease.shard_id))
        if not kids or not all(k in leases and leases[k].progressed for k in kids):
            continue
        parents = set(lease.parent_shard_ids)
        if lease.shard_id in graph:
            parents.update(graph.parents_of(lease.shard_id))
        if any(p in leases for p in parents):
            continue
        delete.append(lease.shard_id)
    return tuple(delete)
