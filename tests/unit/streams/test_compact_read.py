"""Compact GetRecords bodies are cut first and parsed one record at a time (``read_compact``).

The records must be exactly those of the whole-body parse, anything that is not a compact body of
DynamoDB's shape must fall back to that parse (and so to its errors), and the transient must be one
record, not the whole parsed response (the worker's peak memory per in-flight record).
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest

from consumer.records import WireRecord
from consumer.streams.errors import StreamFormatError
from consumer.streams.wire import parse_get_records, read_compact
from tests.unit.streams.corpus import corpus_records, get_records_body, record

SHARD = "shardId-00000001763798400000-0000abcd"
NOW = 1763798500_000


def compact(records: list[dict[str, Any]], next_iterator: str | None = "iter-next") -> bytes:
    return orjson.dumps({"Records": records, "NextShardIterator": next_iterator})


def test_a_compact_body_is_read_record_by_record_with_the_whole_parse_s_result() -> None:
    records = corpus_records()
    body = compact(records)
    read = read_compact(body, SHARD)
    assert read is not None
    held, next_iterator, last = read
    assert next_iterator == "iter-next" and last == records[-1]
    assert [r.wire for r in held if isinstance(r, WireRecord)] == [orjson.dumps(r) for r in records]
    fast = parse_get_records(body, SHARD, NOW)
    whole = parse_get_records(get_records_body(records), SHARD, NOW)  # spaced: the whole-body parse
    assert [r.raw for r in fast.records] == [r.raw for r in whole.records]
    assert (fast.next_iterator, fast.millis_behind_latest) == (
        whole.next_iterator,
        whole.millis_behind_latest,
    )
    assert fast.millis_behind_latest > 0


def test_an_empty_records_array_and_members_on_either_side() -> None:
    assert read_compact(b'{"Records":[],"NextShardIterator":"x"}', SHARD) == ((), "x", None)
    assert read_compact(b'{"NextShardIterator":null,"Records":[]}', SHARD) == ((), None, None)
    body = orjson.dumps({"NextShardIterator": "it", "Records": [record(1), record(2)]})
    read = read_compact(body, SHARD)
    assert read is not None and [r.sequence_number for r in read[0]] == [
        record(1)["dynamodb"]["SequenceNumber"],
        record(2)["dynamodb"]["SequenceNumber"],
    ]


@pytest.mark.parametrize(
    "body",
    [
        get_records_body([record(1), record(2)]),  # spaced (the emulator, moto)
        b'{"Records":[{"a":1},{"b":2}],"Records":[{"c":3}]}',  # two Records members: orjson keeps the last
        orjson.dumps({"Records": [record(1)], "Z": "}]"}),  # "}]" after the array: the end is not found
        b'{"Records":[{"a":1}]}x',  # not one JSON value
    ],
)
def test_what_is_not_a_compact_body_of_dynamodb_s_shape_is_parsed_whole(body: bytes) -> None:
    assert read_compact(body, SHARD) is None


def test_an_envelope_not_as_orjson_writes_it_is_parsed_whole() -> None:
    """Spaces in the envelope, or a member twice, could put the real ``Records`` after the array
    that was cut: only the envelope exactly as orjson writes it is read record by record."""
    inner = b'{"X":{"Records":[' + orjson.dumps(record(1)) + b']}, "Records" : []}'
    assert read_compact(inner, SHARD) is None
    assert parse_get_records(inner, SHARD, NOW).records == ()
    spaced = b'{"Records":[' + orjson.dumps(record(1)) + b'], "NextShardIterator":"x"}'
    assert read_compact(spaced, SHARD) is None
    twice = b'{"NextShardIterator":"a","Records":[' + orjson.dumps(record(1)) + b'],"NextShardIterator":"b"}'
    assert read_compact(twice, SHARD) is None
    assert parse_get_records(twice, SHARD, NOW).next_iterator == "b"


def test_records_that_begin_with_another_key_are_parsed_whole_with_the_same_result() -> None:
    """The cut looks for the first record's first key; a record that begins with another key is
    not cut off, its slice does not parse, and the whole parse reads the body instead."""
    first, second = record(1), record(2)
    reordered = {"eventName": second["eventName"], **second}
    body = compact([first, reordered, record(3)])
    assert read_compact(body, SHARD) is None
    result = parse_get_records(body, SHARD, NOW)
    assert [r.sequence_number for r in result.records] == [
        r["dynamodb"]["SequenceNumber"] for r in (first, second, record(3))
    ]
    assert [r.raw for r in result.records] == [first, reordered, record(3)]


def test_the_duplicate_records_member_reads_as_the_whole_parse_reads_it() -> None:
    body = b'{"Records":[' + orjson.dumps(record(1)) + b'],"Records":[' + orjson.dumps(record(2)) + b"]}"
    (only,) = parse_get_records(body, SHARD, NOW).records
    assert only.event_id == record(2)["eventID"]


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda body: body.replace(b'"eventName":"', b'"eventName":', 1),  # a record that is not JSON
        lambda body: body.replace(b'"NextShardIterator":"iter-next"', b'"NextShardIterator":iter', 1),
        lambda body: body[:-1],  # the envelope unclosed
    ],
)
def test_a_body_that_is_not_json_is_still_a_clear_error(corrupt: Any) -> None:
    body = corrupt(compact([record(1), record(2), record(3)]))
    assert read_compact(body, SHARD) is None
    with pytest.raises(StreamFormatError, match="not JSON"):
        parse_get_records(body, SHARD, NOW)


def test_records_that_are_not_objects_are_still_refused() -> None:
    for body in (b'{"Records":[1,2]}', b'{"Records":[{"a":1},[2]]}'):
        assert read_compact(body, SHARD) is None
        with pytest.raises(StreamFormatError, match="not a list of objects"):
            parse_get_records(body, SHARD, NOW)


def test_the_transient_is_one_record_not_the_parsed_response() -> None:
    """Parsed whole, a response is ~20 x its bytes in Python objects at once; read record by record,
    the peak is what is held (the records' bytes and fields, ~1.3 x) plus one record."""
    records = [
        record(i, new={"n": {"N": str(i)}, "tags": {"SS": ["a", "b"]}}, old={"n": {"N": "0"}})
        for i in range(300)
    ]
    body = compact(records)
    tracemalloc.start()
    try:
        result = parse_get_records(body, SHARD, NOW)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result.records) == 300
    assert peak < held + len(body) // 2, (held, peak, len(body))
    tracemalloc.start()
    try:
        document = orjson.loads(body)
        whole = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert document and whole > 3 * len(body)  # what the whole parse would have added at its peak
