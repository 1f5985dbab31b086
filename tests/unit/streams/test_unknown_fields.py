"""Fields the parser does not know pass through untouched; known fields with malformed values do not.

DynamoDB Streams adds fields now and then (``ApproximateCreationDateTimePrecision`` in ``dynamodb``
for a table whose timestamp precision is set broke a strict Java parser). Here a record with fields
nobody documented is held on the fast path like any other, its ``raw`` has them as sent, and a
Lambda handler's event has them too; a field the parser reads (sequence number, event name,
creation time, size) with a value of the wrong type is refused with an error naming it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from consumer.lifecycle.failures import size_bytes
from consumer.processing.lambda_event import streams_event
from consumer.records import RecordFormatError, StreamRecord, WireRecord
from consumer.streams.wire import cut_records, parse_get_records, read_compact
from tests.unit.streams.corpus import record

SHARD = "shardId-00000001763798400000-0000abcd"
ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-11-28T00:00:00.000"
UNKNOWN_TOP = {"futureField": {"nested": [1, 2.5, None, {"x": '}],{"'}], "on": True}, "zz": None}
UNKNOWN_BODY = {"ApproximateCreationDateTimePrecision": "MICROSECOND", "Novel": {"L": [{"S": "a"}]}}


def with_unknown(seq: int, *, first: bool = False) -> dict[str, Any]:
    """A record carrying unknown fields at the top level and in ``dynamodb`` (``first``: an unknown
    key is the record's first member, which is what the compact cut looks for between records)."""
    rec = record(seq, new={"n": {"N": str(seq)}})
    rec["dynamodb"].update(UNKNOWN_BODY)
    rec.update(UNKNOWN_TOP)
    return {"aFirstUnknown": seq, **rec} if first else rec


def bodies(records: list[dict[str, Any]]) -> dict[str, bytes]:
    document = {"Records": records, "NextShardIterator": "iter-next"}
    return {
        "compact": orjson.dumps(document),  # as the service sends it: cut record by record
        "spaced": json.dumps(document, indent=1).encode(),  # as the emulator and moto: parsed whole
        "members around": orjson.dumps({"Other": [{"a": 1}], **document}),  # cut_records' path
    }


@pytest.mark.parametrize("first", [False, True])
def test_unknown_fields_reach_raw_untouched_on_every_path(first: bool) -> None:
    records = [with_unknown(i, first=first and i % 2 == 0) for i in range(5)]
    for shape, body in bodies(records).items():
        held = parse_get_records(body, SHARD, 0).records
        assert all(type(r) is WireRecord for r in held), shape  # still the fast path's held form
        assert [dict(r.raw) for r in held] == records, shape
        for rec, original in zip(held, records, strict=True):
            assert isinstance(rec, WireRecord)
            assert orjson.loads(rec.wire) == original
            assert rec.sequence_number == original["dynamodb"]["SequenceNumber"]
            assert rec.new_image == {"n": int(original["dynamodb"]["Keys"]["sk"]["N"])}


def test_the_compact_reads_cut_bodies_with_unknown_fields() -> None:
    """Unknown fields cost no fallback: the body is still cut rather than parsed whole."""
    records = [with_unknown(i) for i in range(4)]
    body = orjson.dumps({"Records": records, "NextShardIterator": "n"})
    read = read_compact(body, SHARD)
    assert (
        read is not None and [orjson.loads(r.wire) for r in read[0] if isinstance(r, WireRecord)] == records
    )
    document = {"Other": 1, "Records": records}
    assert cut_records(orjson.dumps(document), document, len(records)) is not None


def test_unknown_fields_reach_the_lambda_event_untouched() -> None:
    records = [with_unknown(1), with_unknown(2, first=True)]
    held = parse_get_records(bodies(records)["compact"], SHARD, 0).records
    event = streams_event(held, ARN)
    for ours, original in zip(event["Records"], records, strict=True):
        for name, value in UNKNOWN_TOP.items():
            assert ours[name] == value
        for name, value in UNKNOWN_BODY.items():
            assert ours["dynamodb"][name] == value
        if "aFirstUnknown" in original:
            assert ours["aFirstUnknown"] == original["aFirstUnknown"]
        # The documented fields are still Lambda's (the creation time a float of whole seconds).
        assert ours["eventSourceARN"] == ARN
        assert ours["dynamodb"]["SequenceNumber"] == original["dynamodb"]["SequenceNumber"]
        assert ours["dynamodb"]["ApproximateCreationDateTime"] == 1763798400.0
        # Nothing else added or dropped: the event's record is the wire record plus eventSourceARN.
        assert {k: v for k, v in ours.items() if k != "eventSourceARN"} == original


def test_a_record_parsed_elsewhere_keeps_its_unknown_fields_too() -> None:
    original = with_unknown(3)
    rec = StreamRecord(original, SHARD)
    (ours,) = streams_event([rec], ARN)["Records"]
    assert ours["futureField"] == UNKNOWN_TOP["futureField"]
    assert ours["dynamodb"]["ApproximateCreationDateTimePrecision"] == "MICROSECOND"
    ours["futureField"]["nested"].append("changed")  # the event is the handler's own copy
    assert original["futureField"] == UNKNOWN_TOP["futureField"]


@pytest.mark.parametrize(
    ("field", "value", "read", "message"),
    [
        ("ApproximateCreationDateTime", "noon", "approximate_creation_time", "not a number of epoch seconds"),
        ("ApproximateCreationDateTime", True, "approximate_creation_time", "not a number of epoch seconds"),
        ("ApproximateCreationDateTime", {"t": 1}, "approximate_creation_time", "not a number"),
        ("SizeBytes", "many", "size_bytes", "not a whole number"),
        ("SizeBytes", 12.5, "size_bytes", "not a whole number"),
        ("SequenceNumber", 17, "sequence_number", "not digits"),
    ],
)
def test_malformed_values_of_known_fields_are_refused_naming_field_record_and_shard(
    field: str, value: Any, read: str, message: str
) -> None:
    bad = with_unknown(7)
    bad["dynamodb"][field] = value
    body = orjson.dumps({"Records": [with_unknown(6), bad], "NextShardIterator": "n"})
    good, held = parse_get_records(body, SHARD, 0).records
    assert type(good) is WireRecord and type(held) is StreamRecord  # not held on the fast path
    with pytest.raises(RecordFormatError, match=message) as caught:
        getattr(held, read)
    assert SHARD in str(caught.value) and "evt-00000007" in str(caught.value)
    if field != "SequenceNumber":
        assert f"dynamodb.{field}" in str(caught.value)
        assert held.sequence_number == bad["dynamodb"]["SequenceNumber"]  # the rest still reads
    # The unknown fields are still there for whoever reads the record as it came.
    assert held.raw["futureField"] == UNKNOWN_TOP["futureField"]


def test_a_malformed_size_counts_zero_in_the_metric_rather_than_failing_a_finished_batch() -> None:
    bad = with_unknown(8)
    bad["dynamodb"]["SizeBytes"] = "many"
    held = parse_get_records(orjson.dumps({"Records": [with_unknown(9), bad]}), SHARD, 0).records
    assert size_bytes(held) == held[0].size_bytes
