"""Records held as their bytes (WireRecord) read exactly as records held parsed (StreamRecord).

The fast path keeps each record as its JSON bytes, cut from a compact response body (or written back
with ``orjson.dumps`` when the body is not compact), plus the fields the worker reads on every record;
``raw`` and the images are parsed on access. Every public attribute must read the same as on a
:class:`StreamRecord` built over the eagerly parsed record, whatever the record holds.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.records import RecordFormatError, StreamRecord, WireRecord
from consumer.records import stream_record as stream_record_module
from consumer.streams.wire import cut_records, parse_get_records
from tests.unit.streams.corpus import VIEW_TYPES, corpus_records, get_records_body, record
from tests.unit.streams.test_parser_equivalence import images

SHARD = "shardId-00000001763798400000-0000abcd"

PUBLIC = (
    "shard_id",
    "event_id",
    "event_name",
    "sequence_number",
    "approximate_creation_time",
    "size_bytes",
    "stream_view_type",
    "user_identity",
    "is_ttl_delete",
    "keys",
    "new_image",
    "old_image",
)


def read(rec: StreamRecord, name: str) -> Any:
    try:
        return ("value", getattr(rec, name))
    except (TypeError, ValueError) as exc:  # RecordFormatError, and what int()/float() raise
        return ("error", type(exc), str(exc))


def assert_reads_the_same(body: bytes, convert_images: bool = False) -> list[StreamRecord]:
    """Every record of ``body`` through the fast path reads as StreamRecord over its parsed form."""
    lazy = parse_get_records(body, SHARD, 0, convert_images=convert_images).records
    eager = [StreamRecord(r, SHARD) for r in orjson.loads(body).get("Records") or []]
    assert len(lazy) == len(eager)
    for mine, theirs in zip(lazy, eager, strict=True):
        assert mine.raw == theirs.raw
        for name in PUBLIC:
            assert read(mine, name) == read(theirs, name), name
        assert repr(mine) == repr(theirs)
    return list(lazy)


def compact(records: list[dict[str, Any]], next_iterator: str | None = "iter-next") -> bytes:
    document: dict[str, Any] = {"Records": records}
    if next_iterator is not None:
        document["NextShardIterator"] = next_iterator
    return orjson.dumps(document)


# ------------------------------------------------------------------------------ examples


def test_compact_bodies_are_cut_and_each_record_holds_its_own_slice() -> None:
    records = corpus_records()
    body = compact(records)
    cuts = cut_records(body, orjson.loads(body), len(records))
    assert cuts is not None and len(cuts) == len(records)
    held = assert_reads_the_same(body)
    assert all(isinstance(r, WireRecord) for r in held)
    for rec, (start, end), original in zip(held, cuts, records, strict=True):
        assert isinstance(rec, WireRecord)
        assert rec.wire == body[start:end] == orjson.dumps(original)


def test_spaced_bodies_are_not_cut_but_read_the_same() -> None:
    """The emulator and moto send ``json.dumps`` bodies: the records are written back instead."""
    records = corpus_records()
    body = get_records_body(records)
    assert cut_records(body, orjson.loads(body), len(records)) is None
    held = assert_reads_the_same(body)
    assert all(isinstance(r, WireRecord) for r in held)


def test_text_that_looks_like_a_boundary_inside_strings_and_keys_does_not_cut() -> None:
    tricky = {
        'a},{"eventID":"x': {"S": '},{"eventID":"y"},{"dynamodb":{'},
        "b": {"L": [{"M": {"c},{d": {"S": "]}"}}}, {"M": {"eventID": {"S": "},{"}}}]},
        "list": {"L": [{"S": "x"}, {"NULL": True}, {"L": [{"M": {}}, {"M": {}}]}]},
    }
    records = [record(i, new=tricky, old=tricky) for i in range(4)]
    body = compact(records)
    assert cut_records(body, orjson.loads(body), len(records)) is not None
    assert_reads_the_same(body)


def test_objects_that_are_no_attribute_values_inside_lists_fall_back_to_writing_back() -> None:
    """Not DynamoDB's shape, so the cut refuses it (one boundary too many) and nothing is lost."""
    odd = {"l": {"L": [{"S": "a"}, {"eventID": {"S": "x"}}]}}
    records = [record(i, new=odd) for i in range(3)]
    body = compact(records)
    assert cut_records(body, orjson.loads(body), len(records)) is None
    held = assert_reads_the_same(body)
    assert all(isinstance(r, WireRecord) for r in held)


def test_a_second_records_member_is_not_cut_into_bytes_that_are_not_the_record() -> None:
    """The parse keeps the last ``Records``; the text around the first still matches the head and
    tail a cut expects, so only parsing each slice back shows it is not the record."""
    first, last = orjson.dumps(record(1)), orjson.dumps(record(2))
    body = b'{"Records":[' + first + b'],"Records":[' + last + b"]}"
    document = orjson.loads(body)
    assert document["Records"] == [record(2)]
    assert cut_records(body, document, 1) is None
    (held,) = assert_reads_the_same(body)
    assert isinstance(held, WireRecord) and held.wire == last


def test_members_around_the_records_array_and_any_key_order() -> None:
    records = [dict(reversed(list(record(i).items()))) for i in range(3)]  # dynamodb first
    document = {"Other": [1, {"x": None}], "Records": records, "NextShardIterator": None, "Z": "}]"}
    body = orjson.dumps(document)
    assert cut_records(body, orjson.loads(body), len(records)) is not None
    assert_reads_the_same(body)
    result = parse_get_records(body, SHARD, 0)
    assert result.next_iterator is None


def test_malformed_records_stay_parsed_and_fail_where_read_as_before() -> None:
    good = record(1)
    no_body = {k: v for k, v in record(2).items() if k != "dynamodb"}
    bad_seq = record(3)
    bad_seq["dynamodb"]["SequenceNumber"] = "12ab"
    bad_name = {**record(4), "eventName": "UPSERT"}
    bad_size = record(5)
    bad_size["dynamodb"]["SizeBytes"] = "many"
    bad_time = record(6)
    bad_time["dynamodb"]["ApproximateCreationDateTime"] = "noon"
    odd_id = {**record(7), "eventID": 7}
    listed_name = {**record(8), "eventName": ["INSERT"]}
    body_list = {**record(9), "dynamodb": [1]}
    body = compact([good, no_body, bad_seq, bad_name, bad_size, bad_time, odd_id, listed_name, body_list])
    held = assert_reads_the_same(body)
    # The event ID is not a held field: a record with an odd one is held as its bytes all the same,
    # and reads it as StreamRecord does (assert_reads_the_same above).
    kinds = ["WireRecord"] + ["StreamRecord"] * 5 + ["WireRecord"] + ["StreamRecord"] * 2
    assert [type(r).__name__ for r in held] == kinds
    with pytest.raises(RecordFormatError, match="no 'dynamodb' body"):
        _ = held[1].sequence_number
    with pytest.raises(RecordFormatError, match="not digits"):
        _ = held[2].sequence_number
    with pytest.raises(RecordFormatError, match="UPSERT"):
        _ = held[3].event_name


def test_raw_is_a_fresh_parse_and_images_are_kept_once_converted() -> None:
    (rec,) = parse_get_records(compact([record(1, new={"a": {"N": "1"}})]), SHARD, 0).records
    assert rec.raw == rec.raw and rec.raw is not rec.raw
    assert rec.new_image is rec.new_image
    assert rec.keys == {"pk": "item-1", "sk": 1}


def test_bytes_that_are_not_the_record_are_a_clear_error() -> None:
    wire = orjson.dumps(record(1))
    (rec,) = parse_get_records(compact([record(2)]), SHARD, 0).records
    assert isinstance(rec, WireRecord)
    wrong = WireRecord.from_parsed(record(2), SHARD, wire)
    broken = WireRecord.from_parsed(record(2), SHARD, wire[:-3])
    for bad in (wrong, broken):
        with pytest.raises(RecordFormatError, match="held bytes of the record with SequenceNumber"):
            _ = bad.raw
        with pytest.raises(RecordFormatError, match="held bytes"):
            _ = bad.keys


def test_images_of_records_read_in_turn_from_several_threads_are_each_their_own() -> None:
    """The one-record parse cache is shared: interleaved reads must never see another record's."""
    body = compact([record(i, new={"n": {"N": str(i)}}, old={"n": {"N": str(-i)}}) for i in range(200)])
    errors: list[str] = []

    def reader() -> None:
        for _ in range(5):
            for i, rec in enumerate(parse_get_records(body, SHARD, 0).records):
                if (rec.keys["sk"], rec.new_image, rec.old_image) != (i, {"n": i}, {"n": -i}):
                    errors.append(f"record {i}")

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


# ------------------------------------------------------------------------------ random records

keys = st.text(min_size=1, max_size=6)
identities = st.sampled_from(
    [
        None,
        {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        {"Type": "Service", "PrincipalId": "x"},
    ]
)


unknown_names = st.text(alphabet="abcdefXYZ_", min_size=1, max_size=8).map(lambda name: "x_" + name)
unknown_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text(alphabet='ab{}[],":\\', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def wire_records(draw: st.DrawFn, seq: int) -> dict[str, Any]:
    view = draw(st.sampled_from(VIEW_TYPES))
    event = draw(st.sampled_from(["INSERT", "MODIFY", "REMOVE"]))
    key_image = draw(
        st.dictionaries(keys, st.sampled_from([{"S": "k"}, {"N": "7"}, {"B": "AAE="}]), max_size=2)
    )
    rec = record(
        seq,
        view=view,
        event=event,
        keys=key_image or None,
        new=draw(images),
        old=draw(images),
        created=draw(st.floats(0, 2e9, allow_nan=False) | st.integers(0, 2**31).map(float)),
    )
    identity = draw(identities)
    if identity is not None:
        rec["userIdentity"] = identity
    # Fields this parser does not know, at the top level and in ``dynamodb``: they pass through.
    rec["dynamodb"].update(draw(st.dictionaries(unknown_names, unknown_values, max_size=2)))
    rec.update(draw(st.dictionaries(unknown_names, unknown_values, max_size=2)))
    order = draw(st.permutations(list(rec)))
    return {key: rec[key] for key in order}


def unknown_arrays_of_objects(record: dict[str, Any]) -> bool:
    def holds(value: Any, in_array: bool = False) -> bool:
        if isinstance(value, dict):
            return in_array or any(holds(v) for v in value.values())
        if isinstance(value, list):
            return any(holds(v, True) for v in value)
        return False

    fields = [*record.items(), *record["dynamodb"].items()]
    return any(holds(value) for name, value in fields if name.startswith("x_"))


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    count = draw(st.integers(1, 5))
    records = [draw(wire_records(seq)) for seq in range(count)]
    document: dict[str, Any] = {"Records": records}
    if draw(st.booleans()):
        document["NextShardIterator"] = draw(st.none() | st.text(max_size=12))
    if draw(st.booleans()):
        document = {"Leading": draw(st.text(max_size=5)), **document}
    spaced = draw(st.booleans())
    return json.dumps(document).encode() if spaced else orjson.dumps(document)


@settings(max_examples=150, deadline=None)
@given(body=bodies())
def test_lazily_parsed_records_equal_eagerly_parsed_ones(body: bytes) -> None:
    document = orjson.loads(body)
    # Compact, as the service sends: cut, not written back -- unless a field this parser does not
    # know holds an array of objects (their boundaries look like records'): then the records are
    # written back from the parse, the same records at some more CPU.
    if body == orjson.dumps(document) and not any(map(unknown_arrays_of_objects, document["Records"])):
        assert cut_records(body, document, len(document["Records"])) is not None
    held = assert_reads_the_same(body)
    assert all(isinstance(r, WireRecord) for r in held)


@settings(max_examples=100, deadline=None)
@given(body=bodies())
def test_records_with_images_converted_on_fetch_equal_eagerly_parsed_ones(body: bytes) -> None:
    assert all(isinstance(r, WireRecord) for r in assert_reads_the_same(body, convert_images=True))


def test_wire_records_are_built_by_the_fast_path_only() -> None:
    with pytest.raises(TypeError, match="StreamRecord"):
        WireRecord(record(1), SHARD)
    assert type(WireRecord.from_parsed(record(1), SHARD)) is WireRecord


tricky_text = st.text(alphabet='{}[],":\\SNBLMeventID ', max_size=12)
tricky_values = st.recursive(
    st.one_of(
        tricky_text.map(lambda s: {"S": s}),
        st.lists(tricky_text, min_size=1, max_size=3).map(lambda v: {"SS": v}),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda v: {"L": v}),
        st.dictionaries(tricky_text, inner, max_size=3).map(lambda v: {"M": v}),
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(new=st.lists(st.dictionaries(tricky_text, tricky_values, max_size=4), min_size=1, max_size=4))
def test_text_made_of_json_punctuation_never_moves_a_cut(new: list[dict[str, Any]]) -> None:
    records = [record(i, new=image, old=image) for i, image in enumerate(new)]
    body = compact(records)
    cuts = cut_records(body, orjson.loads(body), len(records))
    assert cuts is not None
    assert [body[start:end] for start, end in cuts] == [orjson.dumps(r) for r in records]
    assert_reads_the_same(body)


# ------------------------------------------------------------------------ convert_images: on_fetch


def test_images_converted_on_fetch_read_the_same_without_a_second_parse() -> None:
    body = compact(corpus_records())
    lazy = parse_get_records(body, SHARD, 0).records
    eager = parse_get_records(body, SHARD, 0, convert_images=True).records
    stream_record_module._last_parsed = None
    for mine, theirs in zip(eager, lazy, strict=True):
        assert isinstance(mine, WireRecord)
        assert (mine.keys, mine.new_image, mine.old_image) == (
            theirs.keys,
            theirs.new_image,
            theirs.old_image,
        )
        assert stream_record_module._last_parsed is None or stream_record_module._last_parsed[0] is not mine
    spaced = parse_get_records(get_records_body(corpus_records()), SHARD, 0, convert_images=True).records
    assert [r.new_image for r in spaced] == [r.new_image for r in lazy]


def test_an_image_that_cannot_be_converted_on_fetch_still_fails_when_read() -> None:
    bad = record(1, new={"qty": {"N": "not a number"}}, old={"qty": {"N": "2"}})
    (rec,) = parse_get_records(compact([bad]), SHARD, 0, convert_images=True).records
    assert isinstance(rec, WireRecord)
    assert rec.old_image == {"qty": 2}
    with pytest.raises(RecordFormatError, match=r"NewImage\.qty"):
        _ = rec.new_image


def test_an_image_nested_too_deep_to_convert_on_fetch_is_left_to_the_read() -> None:
    """orjson parses 1 024 levels; the fast conversion takes a frame per level, the careful one
    (which explains a value the fast one declines) three, more than Python allows here. A well-formed
    deep image converts; one with a bad value at the bottom fails the careful conversion: the read
    raises it in the processor's call (a failure of that record), never the fetch of the response."""

    def nested(leaf: bytes) -> bytes:
        deep = b'{"L":[' * 450 + leaf + b"]}" * 450  # orjson writes no more than 255 levels
        return compact([record(1, new={"deep": {"S": "here"}}), record(2)]).replace(b'{"S":"here"}', deep)

    expected: Any = "leaf"
    for _ in range(450):
        expected = [expected]
    well_formed = nested(b'{"S":"leaf"}')
    for convert in (False, True):
        held = parse_get_records(well_formed, SHARD, 0, convert_images=convert).records
        assert held[0].new_image == {"deep": expected}
    body = nested(b'{"N":"not a number"}')
    lazy = parse_get_records(body, SHARD, 0).records
    eager = parse_get_records(body, SHARD, 0, convert_images=True).records
    for records in (lazy, eager):
        with pytest.raises(RecursionError):
            _ = records[0].new_image
        assert records[1].new_image == lazy[1].new_image
