"""The Java KCL's rules for reading a leases-table item, written once for the tests that check the
table stays a KCL table while this product runs (and after it is killed).

KCL 1.x/2.x (``DynamoDBLeaseSerializer``/``KinesisClientLeaseSerializer``) read ``leaseKey`` as S,
``leaseCounter`` as N (a long), ``leaseOwner`` S, ``checkpoint`` S with
``checkpointSubSequenceNumber`` N, ``ownerSwitchesSinceCheckpoint`` N, ``parentShardId`` and
``childShardIds`` SS, ``pendingCheckpoint`` S. A missing counter or checkpoint fails the listing,
and every item is taken to be a shard's lease: a key that is no shard id would be processed as one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SENTINELS = {"TRIM_HORIZON", "LATEST", "SHARD_END", "AT_TIMESTAMP"}
SHARD_ID = re.compile(r"^shardId-[0-9A-Za-z_.-]+$")
TYPES = {
    "leaseKey": "S",
    "leaseOwner": "S",
    "leaseCounter": "N",
    "checkpoint": "S",
    "checkpointSubSequenceNumber": "N",
    "ownerSwitchesSinceCheckpoint": "N",
    "parentShardId": "SS",
    "childShardIds": "SS",
    "pendingCheckpoint": "S",
    "pendingCheckpointSubSequenceNumber": "N",
}
REQUIRED = ("leaseKey", "leaseCounter", "checkpoint")


def kcl_problems(item: Mapping[str, Any], shard_ids: set[str] | None = None) -> list[str]:
    """Why the Java KCL would fail on (or mis-process) this item; empty when it reads as a lease."""
    key = item.get("leaseKey", {}).get("S", "?")
    problems = [f"{key}: {name} missing" for name in REQUIRED if name not in item]
    for name, kind in TYPES.items():
        if name in item and kind not in item[name]:
            problems.append(f"{key}: {name} is {next(iter(item[name]))}, KCL reads {kind}")
    counter = item.get("leaseCounter", {}).get("N")
    if counter is not None and not re.fullmatch(r"-?\d+", counter):
        problems.append(f"{key}: leaseCounter {counter!r} is not a long")
    checkpoint = item.get("checkpoint", {}).get("S")
    if checkpoint is not None and checkpoint not in SENTINELS and not checkpoint.isdigit():
        problems.append(f"{key}: checkpoint {checkpoint!r} is neither digits nor a sentinel")
    if not SHARD_ID.match(key) or (shard_ids is not None and key not in shard_ids):
        problems.append(f"{key}: not a shard of the stream, yet KCL would process it as one")
    return problems
