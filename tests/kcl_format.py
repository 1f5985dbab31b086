"""The Java KCL's rules for reading a leases-table item, written once for the tests that check the
table stays a KCL table while this product runs (and after a worker is killed): a KCL application
pointed at the table, or a tool built on KCL's serializer, must be able to list it, and must find no
item it would try to process as a shard that is not one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KCL_SENTINELS = frozenset({"TRIM_HORIZON", "LATEST", "SHARD_END", "AT_TIMESTAMP"})


class KclParseError(ValueError):
    """An item the Java KCL could not turn into a lease (or would turn into a broken one)."""


@dataclass(frozen=True)
class KclLease:
    lease_key: str
    lease_owner: str | None
    lease_counter: int
    checkpoint: str
    checkpoint_sub_sequence_number: int
    owner_switches_since_checkpoint: int
    parent_shard_ids: frozenset[str]
    child_shard_ids: frozenset[str]


def _kcl_long(item: dict[str, Any], name: str, *, required: bool) -> int | None:
    """KCL's ``DynamoUtils.safeGetLong``: absent -> null; present -> ``Long.parseLong(av.getN())``,
    which throws for an attribute of another type or a non-integer number."""
    value = item.get(name)
    if value is None:
        if required:
            raise KclParseError(f"{name} is missing (KCL: verifyNotNull)")
        return None
    if set(value) != {"N"}:
        raise KclParseError(f"{name} must be N, got {sorted(value)} (KCL: Long.parseLong(null))")
    text = value["N"]
    if not text.lstrip("-").isdigit():
        raise KclParseError(f"{name} must be an integer, got {text!r} (KCL: NumberFormatException)")
    return int(text)


def _kcl_string(item: dict[str, Any], name: str, *, required: bool) -> str | None:
    """``safeGetString``: ``av.getS()``, silently null for another type — a wrong type is as bad
    as a missing value and, for an owner, silently makes the lease look free."""
    value = item.get(name)
    if value is None:
        if required:
            raise KclParseError(f"{name} is missing")
        return None
    if set(value) != {"S"}:
        raise KclParseError(f"{name} must be S, got {sorted(value)} (KCL would read null)")
    text: str = value["S"]
    return text


def _kcl_string_set(item: dict[str, Any], name: str) -> frozenset[str]:
    """``safeGetSS``: absent -> empty; another type -> null -> ``verifyNotNull`` throws."""
    value = item.get(name)
    if value is None:
        return frozenset()
    if set(value) != {"SS"} or not value["SS"]:
        raise KclParseError(f"{name} must be a non-empty SS, got {value!r}")
    return frozenset(value["SS"])


def _kcl_checkpoint(text: str | None, name: str) -> str:
    if text is None:
        raise KclParseError(f"{name} is missing (KCL: Checkpoint should not be null)")
    if text not in KCL_SENTINELS and not text.isdigit():
        raise KclParseError(f"{name} {text!r} is neither digits nor one of {sorted(KCL_SENTINELS)}")
    return text


def parse_kcl_lease(item: dict[str, Any]) -> KclLease:
    """One leases-table item read as the Java KCL reads it (``KinesisClientLeaseSerializer
    .fromDynamoRecord`` on top of ``LeaseSerializer``; KCL 2's ``DynamoDBLeaseSerializer`` adds
    ``childShardIds``). Required: ``leaseKey`` S, ``leaseCounter`` N, ``checkpoint`` S (digits or a
    sentinel), ``ownerSwitchesSinceCheckpoint`` N (``setOwnerSwitchesSinceCheckpoint`` refuses null
    and a take adds one to it). Optional with a fixed type: ``leaseOwner`` S,
    ``checkpointSubSequenceNumber`` N (null means 0), ``parentShardId`` / ``childShardIds`` SS,
    ``pendingCheckpoint`` S and ``pendingCheckpointSubSequenceNumber`` N. Other attributes are
    ignored, as KCL ignores them."""
    lease_key = _kcl_string(item, "leaseKey", required=True)
    assert lease_key is not None
    counter = _kcl_long(item, "leaseCounter", required=True)
    switches = _kcl_long(item, "ownerSwitchesSinceCheckpoint", required=True)
    assert counter is not None and switches is not None
    checkpoint = _kcl_checkpoint(_kcl_string(item, "checkpoint", required=True), "checkpoint")
    pending = _kcl_string(item, "pendingCheckpoint", required=False)
    if pending:
        _kcl_checkpoint(pending, "pendingCheckpoint")
    _kcl_long(item, "pendingCheckpointSubSequenceNumber", required=False)
    return KclLease(
        lease_key=lease_key,
        lease_owner=_kcl_string(item, "leaseOwner", required=False),
        lease_counter=counter,
        checkpoint=checkpoint,
        checkpoint_sub_sequence_number=_kcl_long(item, "checkpointSubSequenceNumber", required=False) or 0,
        owner_switches_since_checkpoint=switches,
        parent_shard_ids=_kcl_string_set(item, "parentShardId"),
        child_shard_ids=_kcl_string_set(item, "childShardIds"),
    )


def kcl_problems(item: Mapping[str, Any], shard_ids: set[str]) -> list[str]:
    """Why the Java KCL would fail on (or mis-process) this item; empty when it reads as a lease of
    one of ``shard_ids``."""
    try:
        lease = parse_kcl_lease(dict(item))
    except KclParseError as exc:
        return [str(exc)]
    if lease.lease_key not in shard_ids:
        return [f"{lease.lease_key}: not a shard of the stream, yet KCL would process it as one"]
    return []
