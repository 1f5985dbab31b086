"""De-aggregation of KPL records (consumer/records/kpl.py) against a corpus built by tests/kpl_format.py
from the published format: the user records come back as the producer handed them, numbered by
sub-sequence; whatever is not a well-formed aggregate comes back raw, never partly, never raising."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.records.kpl import MAGIC, UserRecord, deaggregate, hash_key_of
from tests.kpl_format import (
    User,
    aggregate,
    aggregated_message,
    frame,
    key,
    length_delimited,
    record_message,
    uint,
    varint,
)

users_strategy = st.lists(
    st.builds(
        User,
        partition_key=st.text(min_size=1, max_size=40),
        data=st.binary(max_size=300),
        explicit_hash_key=st.none() | st.integers(0, 2**128 - 1).map(str),
        tags=st.lists(
            st.tuples(st.text(min_size=1, max_size=5), st.none() | st.text(max_size=5)), max_size=2
        ).map(tuple),
    ),
    min_size=1,
    max_size=30,
)


def expected(users: list[User]) -> tuple[UserRecord, ...]:
    return tuple(
        UserRecord(u.data, u.partition_key, u.explicit_hash_key, index, aggregated=True)
        for index, u in enumerate(users)
    )


@given(users_strategy)
@settings(max_examples=200, deadline=None)
def test_an_aggregate_yields_its_user_records_in_order_numbered_from_zero(users: list[User]) -> None:
    result = deaggregate(aggregate(users), "outer-key")
    assert result.outcome == "aggregated"
    assert result.records == expected(users)


def test_a_seeded_corpus_with_shared_key_tables_and_large_payloads() -> None:
    rng = random.Random(50)
    for _ in range(50):
        users = [
            User(f"key-{rng.randrange(5)}", rng.randbytes(rng.choice((0, 1, 127, 128, 20_000))))
            for _ in range(rng.randint(1, 40))
        ]
        data = aggregate(users)
        assert deaggregate(data, "pk").records == expected(users)


def test_a_plain_record_is_delivered_as_is() -> None:
    for data in (b"", b"{}", MAGIC, MAGIC + bytes(16), b"\xf3\x89\x9a" + bytes(40)):
        result = deaggregate(data, "pk")
        assert result.outcome == "plain"
        assert result.records == (UserRecord(data, "pk", None, 0, aggregated=False),)


def test_a_truncated_aggregate_is_delivered_raw_whole() -> None:
    data = aggregate([User("a", b"one"), User("b", b"two" * 50), User("a", b"three")])
    for cut in range(1, len(data)):
        truncated = data[:cut]
        result = deaggregate(truncated, "pk")
        assert result.records == (UserRecord(truncated, "pk", None, 0, aggregated=False),), cut
        assert result.outcome in ("plain", "bad_digest")


def test_a_bad_digest_is_delivered_raw() -> None:
    data = bytearray(aggregate([User("a", b"one"), User("b", b"two")]))
    for position in (len(MAGIC) + 3, len(data) - 1):
        corrupted = bytearray(data)
        corrupted[position] ^= 0x01
        result = deaggregate(bytes(corrupted), "pk")
        assert result.outcome == "bad_digest"
        assert result.records == (UserRecord(bytes(corrupted), "pk", None, 0, aggregated=False),)


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(aggregated_message([User("a", b"one")])[:-2], id="message cut inside a field"),
        pytest.param(length_delimited(1, b"a") + length_delimited(3, record_message(0, None)), id="no data"),
        pytest.param(
            length_delimited(1, b"a") + length_delimited(3, record_message(None, b"x")), id="no key index"
        ),
        pytest.param(
            length_delimited(1, b"a") + length_delimited(3, record_message(1, b"x")), id="key index out"
        ),
        pytest.param(
            length_delimited(1, b"a") + length_delimited(3, record_message(0, b"x", 0)), id="no ehk table"
        ),
        pytest.param(
            length_delimited(1, b"a")
            + length_delimited(2, b"12x")
            + length_delimited(3, record_message(0, b"x", 0)),
            id="ehk not a number",
        ),
        pytest.param(
            length_delimited(1, b"a")
            + length_delimited(3, uint(1, 0) + length_delimited(3, b"x") + length_delimited(4, b"")),
            id="tag without key",
        ),
        pytest.param(length_delimited(1, b"a") + key(3, 3), id="a group"),
        pytest.param(key(0, 0) + varint(1), id="field number 0"),
        pytest.param(uint(5, 2**64), id="varint over 64 bits"),
    ],
)
def test_a_protobuf_that_does_not_parse_is_delivered_raw_not_partly(message: bytes) -> None:
    data = frame(message)
    result = deaggregate(data, "pk")
    assert result.outcome == "bad_protobuf"
    assert result.records == (UserRecord(data, "pk", None, 0, aggregated=False),)


def test_unknown_fields_and_mistyped_known_fields_are_skipped() -> None:
    record = uint(1, 0) + key(3, 1) + bytes(8) + length_delimited(3, b"data") + uint(9, 7)
    message = (
        length_delimited(3, record)  # records before the tables: field order is free
        + uint(1, 5)  # partition_key_table as a varint: not the format's wire type, skipped
        + length_delimited(1, "clé".encode())
        + key(7, 5)
        + bytes(4)
        + length_delimited(15, b"future field")
    )
    result = deaggregate(frame(message), "pk")
    assert result.outcome == "aggregated"
    assert result.records == (UserRecord(b"data", "clé", None, 0, aggregated=True),)


def test_an_aggregate_reaching_outside_the_shard_yields_nothing() -> None:
    low_key = next(k for k in (f"k{i}" for i in range(1000)) if hash_key_of(k) < 2**127)
    high_key = next(k for k in (f"k{i}" for i in range(1000)) if hash_key_of(k) >= 2**127)
    lower_half = (0, 2**127 - 1)
    inside = aggregate([User(low_key, b"1"), User(high_key, b"2", explicit_hash_key="5")])
    assert deaggregate(inside, "pk", lower_half).outcome == "aggregated"
    assert [r.data for r in deaggregate(inside, "pk", lower_half).records] == [b"1", b"2"]
    straddling = aggregate([User(low_key, b"1"), User(high_key, b"2")])
    result = deaggregate(straddling, "pk", lower_half)
    assert (result.outcome, result.records) == ("outside_shard", ())
    assert len(deaggregate(straddling, "pk").records) == 2  # the whole space: every record is inside


def test_hash_key_of_is_kinesis_md5_placement() -> None:
    assert hash_key_of("a") == int(hashlib.md5(b"a").hexdigest(), 16)
