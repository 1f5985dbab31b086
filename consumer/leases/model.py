"""Leases, heartbeats and table snapshots, and their item format in the leases table.

Lease items keep the Java KCL's attribute names and types, so a table a KCL application wrote is
adopted with its checkpoints:

    leaseKey (S, hash key = shard id)   leaseOwner (S)          leaseCounter (N)
    checkpoint (S: digits | TRIM_HORIZON | LATEST | SHARD_END | AT_TIMESTAMP)
    checkpointSubSequenceNumber (N)     ownerSwitchesSinceCheckpoint (N)
    parentShardId (SS)                  childShardIds (SS)

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
from dataclasses import dataclass, field
from typing import Any

from consumer.leases.errors import LeaseItemError
from ground.positions import AT_TIMESTAMP, LATEST, SENTINELS, SHARD_END, TRIM_HORIZON

FIRST_START_KEY = "__app__#first-start"
# The workers-table row whose ``generation`` moves before every cleanup delete (conditions.py).
LINEAGE_KEY = "__app__#lineage"
LEGACY_PREFIXES = ("__worker__#", "__app__#")
HAND_OVER_PREFIX = "handOver#"


@dataclass(frozen=True, slots=True, order=False)
class ExtendedSequenceNumber:
    """A checkpoint: a sequence number (digits) or a sentinel, plus KCL's sub-sequence number."""

    sequence: str
    sub_sequence: int = 0

    def __post_init__(self) -> None:
        if self.sequence not in SENTINELS and not self.sequence.isdigit():
            raise ValueError(
                f"checkpoint {self.sequence!r} is neither digits nor one of {', '.join(SENTINELS)}"
            )

    @property
    def rank(self) -> tuple[int, int, int]:
        """KCL's order: AT_TIMESTAMP < TRIM_HORIZON < LATEST < numbers < SHARD_END."""
        if self.sequence == AT_TIMESTAMP:
            return (0, 0, 0)
        if self.sequence == TRIM_HORIZON:
            return (1, 0, 0)
        if self.sequence == LATEST:
            return (2, 0, 0)
        if self.sequence == SHARD_END:
            return (4, 0, 0)
        return (3, int(self.sequence), self.sub_sequence)

    def __lt__(self, other: ExtendedSequenceNumber) -> bool:
        return self.rank < other.rank

    def __le__(self, other: ExtendedSequenceNumber) -> bool:
        return self.rank <= other.rank

    @property
    def is_shard_end(self) -> bool:
        return self.sequence == SHARD_END

    def __str__(self) -> str:
        return self.sequence if not self.sub_sequence else f"{self.sequence}.{self.sub_sequence}"


@dataclass(frozen=True, slots=True)
class Lease:
    shard_id: str
    owner: str | None
    counter: int
    checkpoint: ExtendedSequenceNumber
    owner_switches_since_checkpoint: int = 0
    parent_shard_ids: frozenset[str] = frozenset()
    child_shard_ids: frozenset[str] = frozenset()
    pending_owner: str | None = None
    pending_since: int | None = None

    @property
    def finished(self) -> bool:
        return self.checkpoint.is_shard_end


@dataclass(frozen=True, slots=True)
class Heartbeat:
    worker_id: str
    counter: int
    at_wall_millis: int
    lease_count: int = 0
    # The worker is stopping gracefully and will hand its leases on: the others scan the leases
    # table every round until it is gone, so they adopt what it hands them at once.
    stopping: bool = False
    # Wall ms when this worker last left leases free for others (created a shard's children it did
    # not take, or let a lease go to nobody): a worker whose last full scan predates it scans again
    # at its next round instead of at the full-scan interval. 0: never.
    new_leases_at: int = 0
    # Wall time of the worker's last lease-taking round whose reads succeeded (None: none yet, or a
    # worker too old to say). A row keeps being written while every leases-table read fails, so
    # an instance's watchdog counts another worker as fine by this, not by ``at_wall_millis``.
    round_ok_at_wall_millis: int | None = None


@dataclass(frozen=True, slots=True)
class HandOverRequest:
    """A thief asked the owner for ``shard_id`` at ``at_wall_millis`` (the thief's clock)."""

    shard_id: str
    thief: str
    at_wall_millis: int


@dataclass(frozen=True, slots=True)
class MalformedItem:
    key: str
    problem: str


@dataclass(frozen=True)
class Snapshot:
    """The leases table as one Scan saw it."""

    leases: Mapping[str, Lease]
    heartbeats: Mapping[str, Heartbeat]
    malformed: tuple[MalformedItem, ...] = field(default_factory=tuple)
    first_start_claimed: bool = False  # the FIRST_START_KEY marker row exists (workers table)


# ----------------------------------------------------------------------------------- item codec


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
