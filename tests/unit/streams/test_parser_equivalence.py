"""The fast path's records deserialize to exactly what botocore + TypeDeserializer produce from the same bytes."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.records import StreamRecord
from consumer.streams.errors import StreamFormatError
from consumer.streams.wire import parse_get_records
from tests.unit.streams.boto_reference import BotoReference, canonical
from tests.unit.streams.corpus import VIEW_TYPES, corpus_records, get_records_body, record

NOW = 1763798460_000  # one minute after the corpus' creation time

reference = BotoReference()


def assert_same(body: bytes) -> list[StreamRecord]:
    ours = parse_get_records(body, "shardId-1", NOW)
    theirs = reference.parse(body)
    assert ours.next_iterator == theirs.get("NextShardIterator")
    assert len(ours.records) == len(theirs["Records"])
    for mine, boto in zip(ours.records, theirs["Records"], strict=True):
        stream = boto["dynamodb"]
        assert mine.shard_id == "shardId-1"
        assert mine.event_id == boto["eventID"]
        assert mine.event_name == boto["eventName"]
        assert mine.sequence_number == stream["SequenceNumber"]
        assert mine.size_bytes == stream["SizeBytes"]
        assert mine.stream_view_type == stream["StreamViewType"]
        created = stream["ApproximateCreationDateTime"]
        assert isinstance(created, dt.datetime)
        assert mine.approximate_creation_time == created.timestamp()
        if boto.get("userIdentity"):  # botocore drops members its model does not name (Lambda's casing)
            assert mine.user_identity == boto["userIdentity"]
        assert canonical(mine.keys) == canonical(reference.image(stream["Keys"]))
        assert canonical(mine.new_image) == canonical(reference.image(stream.get("NewImage")))
        assert canonical(mine.old_image) == canonical(reference.image(stream.get("OldImage")))
    return list(ours.records)


def test_corpus_of_every_type_view_ttl_delete_and_400kb_item_matches_boto3() -> None:
    records = corpus_records()
    body = get_records_body(records)
    assert len(body) > 400_000  # the big item really is near DynamoDB's 400 KB limit
    ours = assert_same(body)
    views = {r.stream_view_type for r in ours}
    assert views == set(VIEW_TYPES)
    assert sum(1 for r in ours if r.user_identity) == 2  # both casings of a TTL delete survive
    assert any(r.is_ttl_delete for r in ours)
    assert sum(1 for r in ours if r.new_image is None) >= 4  # REMOVE, KEYS_ONLY, OLD_IMAGE: no new image


def test_raw_keeps_the_wire_form() -> None:
    """Sinks land ``raw`` as is: binaries stay base64 text, numbers stay strings, creation time a number."""
    body = get_records_body(corpus_records()[:1])
    (rec,) = parse_get_records(body, "s", NOW).records
    image = rec.raw["dynamodb"]["NewImage"]
    assert image["bin"] == {"B": base64.b64encode(b"\x00\x01\xffbinary").decode()}
    assert image["sk"] == {"N": "1"}
    assert rec.raw["dynamodb"]["ApproximateCreationDateTime"] == 1763798400.0
    assert rec.raw == json.loads(body)["Records"][0]


def test_numbers_keep_every_digit() -> None:
    body = get_records_body(corpus_records()[:1])
    (rec,) = parse_get_records(body, "s", NOW).records
    assert rec.new_image is not None
    numbers = [str(n) for n in rec.new_image["numbers"]]
    assert "12345678901234567890123456789012345678" in numbers
    assert "1E-130" in numbers
    assert "9.9999999999999999999999999999999999999E+125" in numbers


def test_end_of_closed_shard_has_no_next_iterator_and_lag_is_from_newest_record() -> None:
    records = [record(1, created=1763798400.0), record(2, created=1763798450.5)]
    result = parse_get_records(get_records_body(records, next_iterator=None), "s", NOW)
    assert result.shard_ended
    assert result.next_iterator is None
    assert result.millis_behind_latest == NOW - 1763798450_500


def test_empty_batch_on_open_shard() -> None:
    result = parse_get_records(b'{"Records": [], "NextShardIterator": "next"}', "s", NOW)
    assert result.records == ()
    assert result.next_iterator == "next"
    assert result.millis_behind_latest == 0


@pytest.mark.parametrize(
    "body",
    [b"<html>proxy error</html>", b'["not", "an", "object"]', b'{"Records": {"a": 1}}', b'{"Records": [1]}'],
)
def test_bad_bodies_are_clear_errors(body: bytes) -> None:
    with pytest.raises(StreamFormatError, match="GetRecords on shard s"):
        parse_get_records(body, "s", NOW)


# ------------------------------------------------------------------------------ random values

digits = st.text("0123456789", min_size=1, max_size=38).map(lambda s: s.lstrip("0") or "0")
numbers = st.builds(
    lambda sign, coefficient, exponent: (
        f"{sign}{coefficient}E{exponent:+d}" if exponent else f"{sign}{coefficient}"
    ),
    st.sampled_from(["", "-"]),
    digits,
    st.integers(-129, 125 - 38),
)
blobs = st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
scalars = st.one_of(
    st.text(max_size=20).map(lambda s: {"S": s}),
    numbers.map(lambda n: {"N": n}),
    blobs.map(lambda b: {"B": b}),
    st.booleans().map(lambda b: {"BOOL": b}),
    st.just({"NULL": True}),
    st.lists(st.text(max_size=8), min_size=1, max_size=4, unique=True).map(lambda v: {"SS": v}),
    st.lists(numbers, min_size=1, max_size=4, unique=True).map(lambda v: {"NS": v}),
    st.lists(st.binary(max_size=8), min_size=1, max_size=4, unique=True).map(
        lambda v: {"BS": [base64.b64encode(b).decode() for b in v]}
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda v: {"L": v}),
        st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=4).map(lambda v: {"M": v}),
    ),
    max_leaves=20,
)
images = st.dictionaries(st.text(min_size=1, max_size=10), values, max_size=6)


@settings(max_examples=100, deadline=None)
@given(
    new=images,
    old=images,
    view=st.sampled_from(VIEW_TYPES),
    event=st.sampled_from(["INSERT", "MODIFY", "REMOVE"]),
)
def test_random_images_match_boto3(new: dict[str, Any], old: dict[str, Any], view: str, event: str) -> None:
    assert_same(get_records_body([record(7, view=view, event=event, new=new, old=old)]))
