"""Stream records in AWS's wire format, built from an item's state before and after a write.

The change is *net*: one request may touch an item several times inside moto (an UpdateItem that
creates an item first puts its keys, then applies the update), and AWS shows one record for it.
``None`` for an image means "no item". A write that leaves the item as it was yields no record.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

Image = dict[str, Any]

# The wire form (botocore model "Identity"); Lambda event payloads spell the same keys in lower case.
TTL_IDENTITY = {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}

# A top-level field of the emulator's own making (``emulator.unknown_record_fields``): nested, with
# a list and a number, so that a consumer passing it on untouched can be told from one that rebuilt it.
UNKNOWN_TOP_LEVEL: dict[str, Any] = {"emulatorExtension": {"version": 2, "tags": ["a", "b"], "note": None}}


@dataclass(frozen=True)
class TableShape:
    """What a stream record needs to know about its table."""

    name: str
    region: str
    hash_key: str
    range_key: str | None
    view_type: str
    # Records carry fields a consumer may not know (``emulator.unknown_record_fields``): on AWS the
    # precision field comes with a table whose timestamp precision is set, so it is the table's.
    unknown_fields: bool = False


def event_name(old: Image | None, new: Image | None) -> str | None:
    """INSERT / MODIFY / REMOVE, or ``None`` when nothing changed."""
    if old == new:
        return None
    if old is None:
        return "INSERT"
    if new is None:
        return "REMOVE"
    return "MODIFY"


def keys_of(shape: TableShape, image: Image) -> Image:
    keys = {shape.hash_key: image[shape.hash_key]}
    if shape.range_key is not None:
        keys[shape.range_key] = image[shape.range_key]
    return keys


def partition_hash(seed: int, hash_key_value: dict[str, Any]) -> int:
    """A stable 32-bit hash of the partition key value, salted by the seed (repeatable runs)."""
    canonical = json.dumps(hash_key_value, sort_keys=True, separators=(",", ":"))
    digest = hashlib.blake2b(f"{seed}|{canonical}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def _value_size(value: dict[str, Any]) -> int:
    """Approximately DynamoDB's item-size rules: strings and binaries by their bytes, numbers by
    about half their digits, containers by their members plus a small overhead."""
    (kind, inner), *_ = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return len(str(inner).lstrip("-").replace(".", "")) // 2 + 1
    if kind == "B":
        return len(base64.b64decode(inner)) if isinstance(inner, str) else len(inner)
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size({kind[0]: member}) for member in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in inner)
    return 1  # NULL, BOOL


def image_size(image: Image | None) -> int:
    if not image:
        return 0
    return sum(len(name.encode()) + _value_size(value) for name, value in image.items())


def build_record(
    shape: TableShape,
    old: Image | None,
    new: Image | None,
    *,
    wall_ms: int,
    rng: random.Random,
    user_identity: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """The stream record for one net change (without its sequence number), or ``None``.

    ``shape.unknown_fields`` (``emulator.unknown_record_fields``) adds what a consumer's parser may not
    know: ``ApproximateCreationDateTimePrecision`` in ``dynamodb`` (sent for a table whose timestamp
    precision is set) and :data:`UNKNOWN_TOP_LEVEL`, a field no service sends, so that tests can
    show both pass through untouched."""
    name = event_name(old, new)
    if name is None:
        return None
    present = new if new is not None else old
    assert present is not None  # event_name returned None when both are None
    body: dict[str, Any] = {
        "ApproximateCreationDateTime": float(wall_ms // 1000),
        "Keys": keys_of(shape, present),
    }
    size = image_size(body["Keys"])
    if new is not None and shape.view_type in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES"):
        body["NewImage"] = new
        size += image_size(new)
    if old is not None and shape.view_type in ("OLD_IMAGE", "NEW_AND_OLD_IMAGES"):
        body["OldImage"] = old
        size += image_size(old)
    body["SizeBytes"] = size
    body["StreamViewType"] = shape.view_type
    if shape.unknown_fields:
        body["ApproximateCreationDateTimePrecision"] = "MILLISECOND"
    record: dict[str, Any] = {
        "eventID": f"{rng.getrandbits(128):032x}",
        "eventName": name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": shape.region,
        "dynamodb": body,
    }
    if user_identity is not None:
        record["userIdentity"] = dict(user_identity)
    if shape.unknown_fields:
        record.update(json.loads(json.dumps(UNKNOWN_TOP_LEVEL)))  # a copy per record
    return record
