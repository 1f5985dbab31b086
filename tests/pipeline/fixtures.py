"""Hand-made change logs in the format of docs/design.md ("Change log")."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ground.settings import Settings

T0 = 1_763_798_400.0  # 2025-11-22T08:00:00Z


def change(
    shard: str,
    seq: int | str,
    event: str,
    pk: str,
    sk: str = "a",
    image: Mapping[str, Any] | None = None,
    *,
    parents: Iterable[str] = (),
    created: float = T0,
    landed: float | None = None,
) -> dict[str, Any]:
    """One change line; ``image`` is the new image's non-key attributes in wire form."""
    keys = {"pk": {"S": pk}, "sk": {"S": sk}}
    new_image = None if event == "REMOVE" else {**keys, **(image or {})}
    return {
        "v": 1,
        "table": "orders",
        "shardId": shard,
        "parentShardIds": list(parents),
        "eventId": f"{shard}-{seq}",
        "eventName": event,
        "sequenceNumber": str(seq),
        "approximateCreationDateTime": created,
        "sizeBytes": 59,
        "keys": keys,
        "newImage": new_image,
        "oldImage": None,
        "userIdentity": None,
        "landedAt": created + 1.5 if landed is None else landed,
    }


def object_path(root: Path, shard: str, first: int | str, last: int | str) -> Path:
    return root / shard / f"{int(first):040d}-{int(last):040d}.jsonl.gz"


def write_object(root: Path, changes: list[dict[str, Any]], *, extra_lines: Iterable[str] = ()) -> Path:
    """One object per batch, named by its shard and first/last sequence numbers (like the sink)."""
    shard = changes[0]["shardId"]
    seqs = [int(c["sequenceNumber"]) for c in changes]
    path = object_path(root, shard, min(seqs), max(seqs))
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(c, separators=(",", ":")) for c in changes] + list(extra_lines)
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    return path


def settings_for(tmp: Path, *, table: Mapping[str, Any] | None = None, **pipeline: Any) -> Settings:
    """Settings over ``tmp``: table ``orders`` keyed by ``pk`` and ``sk`` unless ``table`` says otherwise."""
    return Settings.model_validate(
        {
            "application_name": "orders-stream-consumer",
            "region": "us-east-1",
            "table": table or {"name": "orders", "partition_key": {"name": "pk"}, "sort_key": {"name": "sk"}},
            "pipeline": {
                "changelog_uri": str(tmp / "changelog"),
                "snapshot_uri": str(tmp / "snapshot"),
                "stats_uri": str(tmp / "stats"),
                **pipeline,
            },
        }
    )


_NO_VALUE: dict[str, Any] = dict.fromkeys(("s", "n", "b", "bool", "null", "ss", "ns", "bs", "m", "l"))


def s_attr(value: str) -> dict[str, Any]:
    """The struct of a string attribute, as a snapshot holds it (DynamoDB JSON's fields)."""
    return {**_NO_VALUE, "s": value}


def n_attr(value: str) -> dict[str, Any]:
    return {**_NO_VALUE, "n": value}
