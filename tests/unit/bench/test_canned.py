"""The benchmarks' canned GetRecords responses: boto3 reads them exactly as the fast parser does, and
the canned transport serves them to the worker's real record path (a small stream, no timing)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import orjson

from bench import canned, canned_worker, fresh_orjson
from consumer.streams.wire import parse_get_records
from tests.unit.streams.boto_reference import BotoReference, canonical

NOW = 1_763_798_400_000
reference = BotoReference()


def test_canned_responses_parse_identically_with_the_fast_parser_and_boto3() -> None:
    stream = canned.generate(2, records_per_response=60, responses_per_shard=2)
    for shard, bodies in enumerate(stream.bodies):
        for index, body in enumerate(bodies):
            ours = parse_get_records(body, canned.shard_id(shard), NOW)
            theirs = reference.parse(body)
            assert ours.next_iterator == theirs["NextShardIterator"] == canned.iterator(shard, index + 1)
            assert len(ours.records) == len(theirs["Records"]) == 60
            for mine, boto in zip(ours.records, theirs["Records"], strict=True):
                body_of = boto["dynamodb"]
                assert mine.event_id == boto["eventID"]
                assert mine.event_name == boto["eventName"]
                assert mine.sequence_number == body_of["SequenceNumber"]
                assert mine.size_bytes == body_of["SizeBytes"]
                assert mine.stream_view_type == body_of["StreamViewType"] == "NEW_AND_OLD_IMAGES"
                created = body_of["ApproximateCreationDateTime"]
                assert isinstance(created, dt.datetime)
                assert mine.approximate_creation_time == created.timestamp()
                assert canonical(mine.keys) == canonical(reference.image(body_of["Keys"]))
                assert canonical(mine.new_image) == canonical(reference.image(body_of.get("NewImage")))
                assert canonical(mine.old_image) == canonical(reference.image(body_of.get("OldImage")))


def test_canned_records_are_a_realistic_mix_with_rising_sequence_numbers() -> None:
    stream = canned.generate(3, records_per_response=200, responses_per_shard=2, seed=5)
    assert stream == canned.generate(3, records_per_response=200, responses_per_shard=2, seed=5)  # seeded
    records = [r for body in stream.all_bodies() for r in orjson.loads(body)["Records"]]
    events = Counter(r["eventName"] for r in records)
    assert (
        set(events) == {"INSERT", "MODIFY", "REMOVE"}
        and events["MODIFY"] > events["INSERT"] > events["REMOVE"]
    )
    assert any("userIdentity" in r for r in records)  # TTL deletes
    for record in records:
        images = {k for k in ("NewImage", "OldImage") if k in record["dynamodb"]}
        expected = {"MODIFY": {"NewImage", "OldImage"}, "INSERT": {"NewImage"}, "REMOVE": {"OldImage"}}
        assert images == expected[record["eventName"]]
    kinds = {next(iter(v)) for r in records for v in r["dynamodb"].get("NewImage", {}).values()}
    assert {"S", "N", "M", "L", "SS", "BOOL", "NULL", "B", "NS"} <= kinds
    numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in records]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # across shards too (chaining)
    assert [str(n) for n in numbers[399::400]] == list(stream.last_sequence)
    assert 700 < stream.size / stream.records < 1700  # about 1 KB per record on the wire


def test_the_canned_transport_feeds_the_worker_path_to_checkpoints() -> None:
    stream = canned.generate(2, records_per_response=40, responses_per_shard=2)
    worker = canned_worker.canned_worker(stream, [0, 1, 2], start=False)  # lease 2 reads canned shard 0 again
    consumers = worker.ready_consumers()
    for _ in range(3):  # two full responses, then an empty poll of an idle shard
        for consumer in consumers:
            consumer.step()
    assert [c.records_delivered for c in consumers] == [80, 80, 80]
    assert [worker.checkpoint_of(c.shard_id) for c in consumers] == [
        stream.last_sequence[0],
        stream.last_sequence[1],
        stream.last_sequence[0],
    ]
    assert worker.transport.empty_responses == 3


def test_a_chained_lease_goes_on_into_the_next_canned_shard() -> None:
    stream = canned.generate(2, records_per_response=40)
    worker = canned_worker.canned_worker(stream, [0, 1], start=False, chain=True)
    consumers = worker.ready_consumers()
    for _ in range(3):
        for consumer in consumers:
            consumer.step()
    assert [c.records_delivered for c in consumers] == [80, 40]
    assert [worker.checkpoint_of(c.shard_id) for c in consumers] == [stream.last_sequence[1]] * 2


def test_the_per_record_floor_cuts_every_body_into_exactly_its_records() -> None:
    """bench/fresh_orjson.py's floor parses what it claims: each record's own bytes, none lost."""
    stream = canned.generate(2, records_per_response=40, responses_per_shard=2)
    bodies = stream.all_bodies()
    parsed: list[object] = []
    fresh_orjson.parse_records(bodies, lambda piece: parsed.append(orjson.loads(piece)))
    assert parsed == [record for body in bodies for record in orjson.loads(body)["Records"]]
    empty = orjson.dumps({"Records": [], "NextShardIterator": "it"})
    assert fresh_orjson.parse_records([empty], parsed.append) >= 0
    assert len(parsed) == 2 * 2 * 40


def test_the_canned_transport_hands_botocore_fresh_chunks_of_each_body() -> None:
    body = bytes(range(256)) * 1000  # 256 000 bytes: four 64 KiB chunks and a short one
    chunks = list(canned._Raw(body).stream())
    assert [len(c) for c in chunks] == [65536, 65536, 65536, 59392]
    assert b"".join(chunks) == body
    assert all(type(c) is bytes and c is not body for c in chunks)
