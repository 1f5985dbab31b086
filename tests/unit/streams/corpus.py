"""GetRecords responses covering every attribute type, the four view types, TTL deletes and 400 KB items.

Shared by the parser-equivalence tests, the functional adapter tests and the parse benchmark, so the
three always talk about the same bytes.
"""

from __future__ import annotations

import base64
import json
from typing import Any

VIEW_TYPES = ("NEW_AND_OLD_IMAGES", "NEW_IMAGE", "OLD_IMAGE", "KEYS_ONLY")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


NUMBERS = [
    "0",
    "-0",
    "1",
    "-1",
    "1.50",
    "12345678901234567890123456789012345678",  # 38 digits
    "-12345678901234567890123456789012345678",
    "1.2345678901234567890123456789012345678",
    "9.9999999999999999999999999999999999999E+125",  # largest
    "-9.9999999999999999999999999999999999999E+125",
    "1E-130",  # tiniest positive
    "-1E-130",
    "1e5",
    "2.5E-7",
    "0.000000000000000000000000000000000001",
    "100",
]

RICH_IMAGE: dict[str, Any] = {
    "pk": {"S": "order#1"},
    "sk": {"N": "42"},
    "empty_s": {"S": ""},
    "unicode": {"S": 'żółw 🐢 \u0000 "quoted" \\ back'},
    "numbers": {"L": [{"N": n} for n in NUMBERS]},
    "bin": {"B": b64(b"\x00\x01\xffbinary")},
    "empty_bin": {"B": ""},
    "ss": {"SS": ["a", "b", "ü"]},
    "ns": {"NS": ["1", "2.5", "-3E+10", "12345678901234567890123456789012345678"]},
    "bs": {"BS": [b64(b"x"), b64(b"\x00\xff"), b64(bytes(range(256)))]},
    "null": {"NULL": True},
    "yes": {"BOOL": True},
    "no": {"BOOL": False},
    "map": {
        "M": {
            "nested": {
                "M": {"deeper": {"L": [{"M": {"x": {"N": "1"}, "b": {"B": b64(b"deep")}}}, {"NULL": True}]}}
            },
            "empty_m": {"M": {}},
            "empty_l": {"L": []},
            "set_in_map": {"SS": ["z"]},
        }
    },
    "list": {"L": [{"S": "x"}, {"N": "-0.5"}, {"BOOL": False}, {"L": [{"BS": [b64(b"in list")]}]}]},
}


def record(
    seq: int,
    *,
    view: str = "NEW_AND_OLD_IMAGES",
    event: str = "MODIFY",
    keys: dict[str, Any] | None = None,
    new: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    ttl: str | None = None,
    created: float = 1763798400.0,
) -> dict[str, Any]:
    keys = keys or {"pk": {"S": f"item-{seq}"}, "sk": {"N": str(seq)}}
    body: dict[str, Any] = {
        "ApproximateCreationDateTime": created,
        "Keys": keys,
        "SequenceNumber": str(4421584500000000017450439091 + seq),
        "SizeBytes": 59 + seq,
        "StreamViewType": view,
    }
    if view in ("NEW_AND_OLD_IMAGES", "NEW_IMAGE") and new is not None and event != "REMOVE":
        body["NewImage"] = new
    if view in ("NEW_AND_OLD_IMAGES", "OLD_IMAGE") and old is not None and event != "INSERT":
        body["OldImage"] = old
    rec: dict[str, Any] = {
        "eventID": f"evt-{seq:08d}",
        "eventName": event,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "eu-west-1",
        "dynamodb": body,
    }
    if ttl == "api":  # the casing botocore's model gives the Identity members
        rec["userIdentity"] = {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}
    elif ttl == "lambda":  # the casing of Lambda events, the reference notes and the emulator
        rec["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return rec


def corpus_records() -> list[dict[str, Any]]:
    """Every case once: views × events, rich images, a TTL delete, a 400 KB item."""
    records: list[dict[str, Any]] = []
    seq = 0
    for view in VIEW_TYPES:
        for event in ("INSERT", "MODIFY", "REMOVE"):
            seq += 1
            keys = {"pk": RICH_IMAGE["pk"], "sk": {"N": str(seq)}}
            old = {**RICH_IMAGE, "sk": {"N": str(seq)}, "version": {"N": "1"}}
            new = {**RICH_IMAGE, "sk": {"N": str(seq)}, "version": {"N": "2"}}
            records.append(record(seq, view=view, event=event, keys=keys, new=new, old=old))
    seq += 1
    for casing in ("api", "lambda"):
        seq += 1
        expired = {"pk": {"S": f"expired-{casing}"}, "ttl": {"N": "1763798000"}}
        records.append(record(seq, event="REMOVE", keys={"pk": expired["pk"]}, old=expired, ttl=casing))
    seq += 1
    big = {"pk": {"S": "big"}, "blob": {"B": b64(bytes(range(256)) * 800)}, "text": {"S": "x" * 180_000}}
    records.append(record(seq, event="INSERT", keys={"pk": {"S": "big"}}, new=big))
    seq += 1
    records.append(
        record(
            seq,
            event="INSERT",
            keys={"bin_key": {"B": b64(b"\x01\x02")}},
            new={"bin_key": {"B": b64(b"\x01\x02")}},
        )
    )
    return records


def get_records_body(records: list[dict[str, Any]], next_iterator: str | None = "iter-next") -> bytes:
    document: dict[str, Any] = {"Records": records}
    if next_iterator is not None:
        document["NextShardIterator"] = next_iterator
    return json.dumps(document).encode()


def load_body(records: int = 1000, image_attributes: int = 12) -> bytes:
    """A realistic full batch for the benchmark: NEW_AND_OLD_IMAGES records of about 1 KB each."""
    batch = []
    for seq in range(records):
        image = {
            "pk": {"S": f"customer#{seq % 97}"},
            "sk": {"S": f"order#{seq:010d}"},
            "amount": {"N": f"{seq}.{seq % 100:02d}"},
            "status": {"S": "SHIPPED"},
            "tags": {"SS": ["a", "b", "c"]},
            "lines": {"L": [{"M": {"sku": {"S": f"sku-{i}"}, "qty": {"N": str(i)}}} for i in range(3)]},
            "paid": {"BOOL": True},
            "note": {"NULL": True},
        }
        for extra in range(image_attributes - len(image)):
            image[f"attr{extra}"] = {"S": "v" * 40}
        keys = {"pk": image["pk"], "sk": image["sk"]}
        batch.append(record(seq, keys=keys, new=image, old={**image, "status": {"S": "NEW"}}))
    return get_records_body(batch)
