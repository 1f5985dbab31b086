"""Records decoded for their held fields only (msgspec) are held exactly as orjson's parse holds them.

``held_fields.hold`` skips every member but the four the worker holds, so it must reach the same
verdict as :meth:`WireRecord.from_parsed` over ``orjson.loads`` for every record: the same held
fields, a :class:`StreamRecord` for the same malformed ones, the same error for bytes that are not
one JSON object; and what its skipping does not check (UTF-8, a number's range) must still fail.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.records import RecordFormatError, StreamRecord, WireRecord
from consumer.streams import held_fields
from tests.unit.streams.corpus import corpus_records, record

SHARD = "shardId-00000001763798400000-0000abcd"
_MISSING = object()


def verdict(hold: Any, wire: bytes) -> tuple[Any, ...]:
    """What holding ``wire`` gives: the form, its held fields and bytes, or the error's type."""
    try:
        held = hold(wire)
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        return ("error", type(exc).__name__)
    if isinstance(held, WireRecord):
        fields = (held.event_name, held.sequence_number, held.approximate_creation_time, held.size_bytes)
        return ("held", *fields, held.wire, held.shard_id)
    return ("parsed", type(held).__name__, held.raw)


def by_orjson(wire: bytes) -> StreamRecord:
    return WireRecord.from_parsed(orjson.loads(wire), SHARD, wire)


def by_msgspec(wire: bytes) -> StreamRecord:
    return held_fields.hold(wire, SHARD)


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["INSERT", "MODIFY", "REMOVE", "insert", "0", "123", "12a", "", "٣", "१२"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_member = st.one_of(st.just(_MISSING), _values)


@st.composite
def wire_records(draw: st.DrawFn) -> bytes:
    """A record with each held field well formed, of another type or value, or missing; a
    ``dynamodb`` that may be no object; images with non-ASCII text; members in any order."""
    rec = record(
        draw(st.integers(min_value=1, max_value=10**30)),
        event=draw(st.sampled_from(["INSERT", "MODIFY", "REMOVE"])),
    )
    body = rec["dynamodb"]
    for name, target in (
        ("eventName", rec),
        ("SequenceNumber", body),
        ("ApproximateCreationDateTime", body),
        ("SizeBytes", body),
    ):
        if draw(st.booleans()):
            value = draw(_member)
            if value is _MISSING:
                target.pop(name, None)
            else:
                target[name] = value
    if draw(st.booleans()):
        body.setdefault("NewImage", {})["note"] = {"S": draw(st.text(max_size=8))}
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        rec["dynamodb"] = draw(_values)
    items = list(rec.items())
    # json, not orjson: it writes integers beyond 64 bits, as a damaged record could hold them.
    shuffled = dict(draw(st.permutations(items)))
    return json.dumps(shuffled, separators=(",", ":"), ensure_ascii=False).encode()


@settings(max_examples=400, deadline=None)
@given(wire_records())
def test_holding_from_the_held_fields_decides_as_the_parse_does(wire: bytes) -> None:
    assert verdict(by_msgspec, wire) == verdict(by_orjson, wire)


@pytest.mark.parametrize(
    "wire",
    [
        b"[1,2]",
        b'"text"',
        b"{}",
        b'{"eventName":"INSERT","dynamodb":{"SequenceNumber":"1"}',  # cut short
        b'{"eventName":"INSERT","dynamodb":{"SequenceNumber":"1"}}{}',  # two values
        b'{"eventName":"INSERT","dynamodb":{"SequenceNumber":"1","NewImage":{"a":{"S":"x\\q"}}}}',
        b'{"eventName":"INSERT","dynamodb":{"SequenceNumber":"1","SizeBytes":1e999}}',
        b'{"eventName":"INSERT","dynamodb":{"SequenceNumber":"1","SizeBytes":18446744073709551615}}',
        b'{"eventName":"INSERT","dynamodb":{"SequenceNumber":"1","SizeBytes":18446744073709551616}}',
    ],
)
def test_bytes_that_are_not_a_well_formed_record_get_the_parse_s_verdict(wire: bytes) -> None:
    assert verdict(by_msgspec, wire) == verdict(by_orjson, wire)


def test_every_corpus_record_is_held_as_the_parse_holds_it() -> None:
    for rec in corpus_records():
        wire = orjson.dumps(rec)
        assert verdict(by_msgspec, wire) == verdict(by_orjson, wire)


def test_an_ascii_record_is_held_without_parsing_its_images(monkeypatch: pytest.MonkeyPatch) -> None:
    wire = orjson.dumps(record(7))
    assert wire.isascii()

    def refused(_: bytes) -> Any:
        raise AssertionError("orjson parsed a record msgspec should have held")

    monkeypatch.setattr(held_fields.orjson, "loads", refused)
    held = held_fields.hold(wire, SHARD)
    assert isinstance(held, WireRecord) and held.wire == wire


def test_invalid_utf8_inside_an_image_is_refused_as_before() -> None:
    wire = orjson.dumps(record(3)).replace(b'"item-3"', b'"item-\xff"')
    with pytest.raises(orjson.JSONDecodeError):
        held_fields.hold(wire, SHARD)


def test_a_skipped_number_beyond_a_double_fails_when_the_record_is_read() -> None:
    # DynamoDB writes no bare number in an image (they are strings), so this can only be a damaged
    # record: it is held, and reading it names it.
    rec = record(5)
    wire = orjson.dumps(rec).replace(b'"dynamodb":{', b'"dynamodb":{"Extra":1e999,', 1)
    held = held_fields.hold(wire, SHARD)
    assert isinstance(held, WireRecord)
    with pytest.raises(RecordFormatError, match=rec["dynamodb"]["SequenceNumber"]):
        _ = held.new_image
