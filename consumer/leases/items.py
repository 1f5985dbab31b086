"""The leases and workers tables' items: each lease and heartbeat written and read back, a Scan of
both read into one snapshot (:mod:`consumer.leases.model` holds the values).

Lease items keep the Java KCL's attribute names and types, so a table a KCL application wrote is
adopted with its checkpoints:

    leaseKey (S, hash key = shard id)   leaseOwner (S)          leaseCounter (N)
    checkpoint (S: digits | TRIM_HORIZON | LATEST | SHARD_END | AT_TIMESTAMP)
    checkpointSubSequenceNumber (N)     ownerSwitchesSinceCheckpoint (N)
    parentShardId (SS)                  childShardIds (SS)
    streamName (S), shardId (S): a namespaced key's stream identifier and shard id, as the KCL's
    multi-stream leases carry them (written at creation; read from the key, never from these)

This product adds ``pendingOwner`` (S) and ``pendingSince`` (N) to a lease, a steal request the
owner honours after its in-flight batch. Nothing else lives in the leases table, so every item in it
parses as a lease by KCL's rules and the table's Scan ``ReturnedItemCount`` counts leases only.

Liveness lives in a second, small table (the *workers table*, ``<leases table>-workers``, hash key
``workerId`` S): one heartbeat row per worker process (``workerId``, ``heartbeatCounter`` N,
``heartbeatAt`` N wall-clock ms, ``leaseCount`` N, ``leaseRoundOkAt`` N wall-clock ms of its last
lease-taking round whose reads succeeded, absent until one did or on a row an older version wrote;
``newLeasesAt`` N: when it last left leases free for others, so that they scan for them at once)
and — for an application starting at LATEST — one marker row ``__app__#first-start`` (``claimedBy``
S, ``claimedAt`` N) written by the worker that did the first start, so that exactly one worker ever
plans it (see ``consumer.lifecycle.shard_sync``). A thief that wants one of a worker's leases writes
``handOver#<shard id>`` (S: ``"<wall ms> <thief>"``) onto that worker's heartbeat row; the owner's
next heartbeat (a put returning the old item) reads and clears it. Unknown attributes are kept out
of the model and never written back.

Rows an older version of this product wrote into the leases table (``__worker__#…``,
``__app__#first-start``) are skipped when the table is read (:data:`LEGACY_PREFIXES`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from consumer.lease_keys import kcl_multi_stream_attributes
from consumer.leases.errors import LeaseItemError
from consumer.leases.model import (
    FIRST_START_KEY,
    HAND_OVER_PREFIX,
    LEGACY_PREFIXES,
    LINEAGE_KEY,
    ExtendedSequenceNumber,
    HandOverRequest,
    Heartbeat,
    Lease,
    MalformedItem,
    Snapshot,
)
from ground.positions import TRIM_HORIZON


def _get(item: Mapping[str, Any], name: str, kind: str, key: str, *, required: bool = False) -> Any:
    value = item.get(name)
    if value is None:
        if required:
            raise LeaseItemError(key, name, f"is missing (expected type {kind})")
        return None
    if not isinstance(value, Mapping) or kind not in value:
        found = next(iter(value), "?") if isinstance(value, Mapping) else type(value).__name__
        raise LeaseItemError(key, name, f"has type {found}, expected {kind}")
    return value[kind]


def _int(item: Mapping[str, Any], name: str, key: str, default: int = 0, *, required: bool = False) -> int:
    raw = _get(item, name, "N", key, required=required)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise LeaseItemError(key, name, f"is {raw!r}, expected an integer") from None


def lease_from_item(item: Mapping[str, Any]) -> Lease:
    key = _get(item, "leaseKey", "S", "?", required=True)
    checkpoint_text = _get(item, "checkpoint", "S", key) or TRIM_HORIZON
    try:
        checkpoint = ExtendedSequenceNumber(checkpoint_text, _int(item, "checkpointSubSequenceNumber", key))
    except ValueError as exc:
        raise LeaseItemError(key, "checkpoint", str(exc)) from None
    return Lease(
        shard_id=key,
        owner=_get(item, "leaseOwner", "S", key),
        counter=_int(item, "leaseCounter", key),
        checkpoint=checkpoint,
        owner_switches_since_checkpoint=_int(item, "ownerSwitchesSinceCheckpoint", key),
        parent_shard_ids=frozenset(_get(item, "parentShardId", "SS", key) or ()),
        child_shard_ids=frozenset(_get(item, "childShardIds", "SS", key) or ()),
        pending_owner=_get(item, "pendingOwner", "S", key),
        pending_since=_int(item, "pendingSince", key) if "pendingSince" in item else None,
    )


def lease_to_item(lease: Lease) -> dict[str, Any]:
    item: dict[str, Any] = {
        "leaseKey": {"S": lease.shard_id},
        "leaseCounter": {"N": str(lease.counter)},
        "checkpoint": {"S": lease.checkpoint.sequence},
        "checkpointSubSequenceNumber": {"N": str(lease.checkpoint.sub_sequence)},
        "ownerSwitchesSinceCheckpoint": {"N": str(lease.owner_switches_since_checkpoint)},
        **kcl_multi_stream_attributes(lease.shard_id),
    }
    if lease.owner is not None:
        item["leaseOwner"] = {"S": lease.owner}
    if lease.parent_shard_ids:
        item["parentShardId"] = {"SS": sorted(lease.parent_shard_ids)}
    if lease.child_shard_ids:
        item["childShardIds"] = {"SS": sorted(lease.child_shard_ids)}
    if lease.pending_owner is not None:
        item["pendingOwner"] = {"S": lease.pending_owner}
        item["pendingSince"] = {"N": str(lease.pending_since or 0)}
    return item


# The heartbeat row's attribute for ``Heartbeat.round_ok_at_wall_millis`` (deploy/watchdog.py reads it).
ROUND_OK_ATTRIBUTE = "leaseRoundOkAt"


def heartbeat_from_item(item: Mapping[str, Any]) -> Heartbeat:
    key = _get(item, "workerId", "S", "?", required=True)
    return Heartbeat(
        worker_id=key,
        counter=_int(item, "heartbeatCounter", key, required=True),
        at_wall_millis=_int(item, "heartbeatAt", key, required=True),
        lease_count=_int(item, "leaseCount", key),
        stopping=bool(_get(item, "stopping", "BOOL", key)),
        new_leases_at=_int(item, "newLeasesAt", key),
        round_ok_at_wall_millis=_int(item, ROUND_OK_ATTRIBUTE, key) if ROUND_OK_ATTRIBUTE in item else None,
    )


def heartbeat_to_item(beat: Heartbeat) -> dict[str, Any]:
    item: dict[str, Any] = {
        "workerId": {"S": beat.worker_id},
        "heartbeatCounter": {"N": str(beat.counter)},
        "heartbeatAt": {"N": str(beat.at_wall_millis)},
        "leaseCount": {"N": str(beat.lease_count)},
    }
    if beat.stopping:
        item["stopping"] = {"BOOL": True}
    if beat.new_leases_at:
        item["newLeasesAt"] = {"N": str(beat.new_leases_at)}
    if beat.round_ok_at_wall_millis is not None:
        item[ROUND_OK_ATTRIBUTE] = {"N": str(beat.round_ok_at_wall_millis)}
    return item


def heartbeat_sets(beat: Heartbeat) -> tuple[list[str], dict[str, Any]]:
    """The SET clauses and values of a heartbeat update: the beat, and the optional attributes it
    has (``stopping``, ``newLeasesAt``, ``leaseRoundOkAt`` -- absent ones are left as they are)."""
    sets = ["heartbeatCounter = :counter", "heartbeatAt = :at", "leaseCount = :count"]
    values: dict[str, Any] = {
        ":counter": {"N": str(beat.counter)},
        ":at": {"N": str(beat.at_wall_millis)},
        ":count": {"N": str(beat.lease_count)},
    }
    if beat.stopping:
        sets.append("stopping = :stopping")
        values[":stopping"] = {"BOOL": True}
    if beat.new_leases_at:
        sets.append("newLeasesAt = :new_leases")
        values[":new_leases"] = {"N": str(beat.new_leases_at)}
    if beat.round_ok_at_wall_millis is not None:
        sets.append(f"{ROUND_OK_ATTRIBUTE} = :roundOk")
        values[":roundOk"] = {"N": str(beat.round_ok_at_wall_millis)}
    return sets, values


def first_start_item(worker_id: str, at_wall_millis: int) -> dict[str, Any]:
    return {
        "workerId": {"S": FIRST_START_KEY},
        "claimedBy": {"S": worker_id},
        "claimedAt": {"N": str(at_wall_millis)},
    }


def _key_of(item: Mapping[str, Any], name: str) -> str:
    value = item.get(name, {})
    return str(value.get("S", "?")) if isinstance(value, Mapping) else "?"


def snapshot_from_items(
    lease_items: Sequence[Mapping[str, Any]], worker_items: Sequence[Mapping[str, Any]] = ()
) -> Snapshot:
    """A Scan of each table into one snapshot; a malformed item is reported, never dropped silently."""
    leases: dict[str, Lease] = {}
    beats: dict[str, Heartbeat] = {}
    malformed: list[MalformedItem] = []
    claimed = False
    for item in lease_items:
        key = _key_of(item, "leaseKey")
        if key.startswith(LEGACY_PREFIXES):
            continue  # written by an older version into the leases table; not a lease
        try:
            lease = lease_from_item(item)
            leases[lease.shard_id] = lease
        except LeaseItemError as exc:
            malformed.append(MalformedItem(key, str(exc)))
    for item in worker_items:
        key = _key_of(item, "workerId")
        if key == FIRST_START_KEY:
            claimed = True
            continue
        if key == LINEAGE_KEY:
            continue  # read consistently on its own (store.lineage_generation), never from a scan
        try:
            beat = heartbeat_from_item(item)
            beats[beat.worker_id] = beat
        except LeaseItemError as exc:
            malformed.append(MalformedItem(key, str(exc)))
    return Snapshot(leases, beats, tuple(malformed), claimed)


def hand_over_attribute(shard_id: str) -> str:
    return f"{HAND_OVER_PREFIX}{shard_id}"


def hand_over_value(request: HandOverRequest) -> dict[str, str]:
    return {"S": f"{request.at_wall_millis} {request.thief}"}


def hand_over_requests(item: Mapping[str, Any] | None) -> tuple[HandOverRequest, ...]:
    """The requests written onto a heartbeat row; a value that does not parse is skipped (it can
    only delay a hand-over, never cause one: the thief's forced take still needs the lease's own
    ``pendingOwner``)."""
    if not item:
        return ()
    found: list[HandOverRequest] = []
    for name, value in item.items():
        if not name.startswith(HAND_OVER_PREFIX) or not isinstance(value, Mapping):
            continue
        at, _, thief = str(value.get("S", "")).partition(" ")
        if at.isdigit() and thief:
            found.append(HandOverRequest(name[len(HAND_OVER_PREFIX) :], thief, int(at)))
    return tuple(sorted(found, key=lambda r: (r.at_wall_millis, r.shard_id)))
