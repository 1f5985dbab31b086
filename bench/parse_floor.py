"""Per-record CPU of reading GetRecords responses: the fast path against orjson.loads and stock boto3.

Run: ``.venv/bin/python -m bench.parse_floor [--records 1000] [--batches 20]``

(It was ``consumer.streams.bench_parse``; it lives in bench/ because only people and benchmarks run
it: the worker never does. It is not one of ``make bench``'s ratios, its figures are for reading.)

All contenders parse the same response bytes (full batches of NEW_AND_OLD_IMAGES records of about
1 KB). The floor is ``orjson.loads`` of the same bytes (the parser the worker uses; stdlib
``json.loads`` is shown beside it), timed here in the same process: bench/record_cpu.py measures the
goal's floors in a fresh one. The fast path cuts a compact body (as the service sends it; this
benchmark's bodies are compact) into its records, parses each record's bytes with orjson and holds
them with the few fields the worker reads, one record at a time (other bodies are parsed whole);
stock boto3 (its response parser plus ``TypeDeserializer`` on every image) is the cost this product
avoids.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from consumer.api.worker import parse_get_records


def sample_body(records: int, attributes: int = 12) -> bytes:
    """One GetRecords response of ``records`` NEW_AND_OLD_IMAGES records with ``attributes`` per image."""
    batch = []
    for seq in range(records):
        image: dict[str, Any] = {
            "pk": {"S": f"customer#{seq % 97}"},
            "sk": {"S": f"order#{seq:010d}"},
            "amount": {"N": f"{seq}.{seq % 100:02d}"},
            "status": {"S": "SHIPPED"},
            "tags": {"SS": ["a", "b", "c"]},
            "lines": {"L": [{"M": {"sku": {"S": f"sku-{i}"}, "qty": {"N": str(i)}}} for i in range(3)]},
            "paid": {"BOOL": True},
            "note": {"NULL": True},
            "blob": {"B": "AAECAwQFBgcICQ=="},
        }
        for extra in range(max(0, attributes - len(image))):
            image[f"attr{extra}"] = {"S": "v" * 40}
        batch.append(
            {
                "eventID": f"{seq:032x}",
                "eventName": "MODIFY",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "eu-west-1",
                "dynamodb": {
                    "ApproximateCreationDateTime": 1763798400.0 + seq / 1000,
                    "Keys": {"pk": image["pk"], "sk": image["sk"]},
                    "NewImage": image,
                    "OldImage": {**image, "status": {"S": "NEW"}},
                    "SequenceNumber": str(442158450000000001745043909 + seq),
                    "SizeBytes": 900,
                    "StreamViewType": "NEW_AND_OLD_IMAGES",
                },
            }
        )
    return orjson.dumps({"Records": batch, "NextShardIterator": "next"})  # compact, as the service sends


def boto3_path() -> Callable[[bytes], Any]:
    """botocore's GetRecords parser + TypeDeserializer on every image, as a stock consumer does
    (``.parse_only`` skips the deserializer). bench/record_cpu.py measures the same path."""
    import boto3
    from boto3.dynamodb.types import TypeDeserializer
    from botocore.parsers import create_parser

    client = boto3.client("dynamodbstreams", region_name="us-east-1")
    shape = client.meta.service_model.operation_model("GetRecords").output_shape
    parser = create_parser("json")
    deserializer = TypeDeserializer()

    def parse_only(body: bytes) -> Any:
        return parser.parse({"body": body, "headers": {}, "status_code": 200}, shape)

    def parse_and_deserialize(body: bytes) -> Any:
        parsed = parse_only(body)
        for record in parsed["Records"]:
            stream = record["dynamodb"]
            for image in ("Keys", "NewImage", "OldImage"):
                if image in stream:
                    stream[image] = {k: deserializer.deserialize(v) for k, v in stream[image].items()}
        return parsed

    parse_and_deserialize.parse_only = parse_only  # type: ignore[attr-defined]
    return parse_and_deserialize


def _ours_routing(body: bytes) -> Any:
    """What the worker itself touches per record: sequence number and event name, no image conversion."""
    result = parse_get_records(body, "shardId-1", 1763798500_000)
    for record in result.records:
        _ = record.sequence_number, record.event_name
    return result


def _ours_with_values(body: bytes) -> Any:
    """A processor that asks for Python values of every image (Decimal, bytes, sets)."""
    result = parse_get_records(body, "shardId-1", 1763798500_000)
    for record in result.records:
        _ = record.keys, record.new_image, record.old_image
    return result


def measure(function: Callable[[bytes], Any], body: bytes, batches: int) -> float:
    """Best-of-3 CPU seconds for ``batches`` parses of ``body``."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(batches):
            function(body)
        best = min(best, time.process_time() - started)
    return best


def run(records: int, batches: int, include_boto3: bool = True) -> list[tuple[str, float, float]]:
    """(name, µs per record, ratio to orjson.loads) for each contender."""
    body = sample_body(records)
    contenders: list[tuple[str, Callable[[bytes], Any]]] = [
        ("orjson.loads (floor)", orjson.loads),
        ("json.loads", json.loads),
        ("fast path: parse_get_records", lambda b: parse_get_records(b, "shardId-1", 0)),
        ("fast path + seq/eventName per record", _ours_routing),
        ("fast path + Python values of all images", _ours_with_values),
    ]
    if include_boto3:
        boto = boto3_path()
        contenders.append(("boto3: botocore parser", boto.parse_only))  # type: ignore[attr-defined]
        contenders.append(("boto3: parser + TypeDeserializer", boto))
    per_record = [(name, measure(f, body, batches) / (records * batches) * 1e6) for name, f in contenders]
    floor = per_record[0][1]
    return [(name, micros, micros / floor) for name, micros in per_record]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=1000, help="records per GetRecords response")
    parser.add_argument("--batches", type=int, default=20, help="responses parsed per measurement")
    parser.add_argument("--no-boto3", action="store_true", help="skip the (slow) stock boto3 contenders")
    args = parser.parse_args(argv)
    body_kb = len(sample_body(args.records)) / 1024
    print(
        f"{args.records} records per response ({body_kb:.0f} KB), {args.batches} responses, best of 3 (CPU time)"
    )
    print(f"{'contender':42} {'µs/record':>10} {'× orjson':>13}")
    for name, micros, ratio in run(args.records, args.batches, include_boto3=not args.no_boto3):
        print(f"{name:42} {micros:10.2f} {ratio:13.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
