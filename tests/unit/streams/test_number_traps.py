"""``N`` values convert with boto3's decimal context *and its traps*, and a bad one says where it is.

A number DynamoDB cannot hold exactly (39 digits, 1E-170) raises instead of being rounded or
flushed to zero; text that is no number raises instead of becoming NaN (or an error naming
nothing). The error is a :class:`RecordFormatError` (a ``ValueError``) naming the attribute path,
the record and the shard, and since it is raised where a processor reads the image, it fails that
record through the normal failure handling: bisected, retried, dead-lettered.
"""

from __future__ import annotations

import base64
import decimal
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer

from consumer.processing import Batch, function_processor
from consumer.processing.dead_letter import LocalDeadLetter
from consumer.processing.retry import RetryPolicy
from consumer.records import (
    AttributeValueError,
    RecordFormatError,
    StreamRecord,
    deserialize_value,
)
from ground.settings import WorkerSettings
from tests.unit.lifecycle.test_shard_consumer import Rig

BOTO3 = TypeDeserializer()


def stream_record(
    image: dict[str, Any], *, seq: str = "000000000000000000123", shard: str = "shardId-7"
) -> StreamRecord:
    raw = {
        "eventID": "ev-42",
        "eventName": "MODIFY",
        "dynamodb": {"SequenceNumber": seq, "Keys": {"pk": {"S": "a"}}, "NewImage": image, "SizeBytes": 10},
    }
    return StreamRecord(raw, shard)


def new_image_error(image: dict[str, Any]) -> AttributeValueError:
    record = stream_record(image)
    with pytest.raises(AttributeValueError) as caught:
        _ = record.new_image
    return caught.value


def test_a_39_digit_number_raises_instead_of_being_rounded() -> None:
    error = new_image_error({"price": {"N": "1" * 39}})
    assert isinstance(error, RecordFormatError) and isinstance(error, ValueError)
    assert isinstance(error.__cause__, decimal.Inexact)
    assert error.path == "NewImage.price"


def test_a_number_below_dynamodbs_range_raises_instead_of_becoming_zero() -> None:
    error = new_image_error({"tiny": {"N": "1E-170"}})
    assert isinstance(error.__cause__, decimal.Underflow)
    assert error.path == "NewImage.tiny"


def test_text_that_is_no_number_names_the_attribute_the_record_and_the_shard() -> None:
    error = new_image_error({"qty": {"N": "abc"}})
    message = str(error)
    assert "NewImage.qty" in message and "'abc'" in message
    assert "ev-42" in message and "000000000000000000123" in message and "shardId-7" in message
    assert (error.path, error.event_id, error.sequence_number, error.shard_id) == (
        "NewImage.qty",
        "ev-42",
        "000000000000000000123",
        "shardId-7",
    )


@pytest.mark.parametrize(
    ("image", "path"),
    [
        (
            {"order": {"M": {"lines": {"L": [{"N": "1"}, {"M": {"qty": {"N": "NaN"}}}]}}}},
            "NewImage.order.lines[1].qty",
        ),
        ({"tags": {"NS": ["1", "2", "1E+200"]}}, "NewImage.tags"),
        ({"odd key": {"N": "Infinity"}}, "NewImage['odd key']"),
    ],
)
def test_the_path_names_nested_maps_lists_and_sets(image: dict[str, Any], path: str) -> None:
    assert new_image_error(image).path == path


@pytest.mark.parametrize(
    ("image", "path"),
    [
        ({"a": {"M": [{"N": "1"}]}}, "NewImage.a"),
        ({"a": {"L": [{"M": {"b": {"SS": 5}}}]}}, "NewImage.a[0].b"),
        ({"a": {"L": [{"B": "not base64!"}]}}, "NewImage.a[0]"),
    ],
)
def test_a_value_of_the_wrong_shape_names_its_path_too(image: dict[str, Any], path: str) -> None:
    assert new_image_error(image).path == path


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"B": "!!!"}, "not base64"),  # botocore's non-validating decode gives b""
        ({"B": "AAE"}, "not base64"),  # padding missing
        ({"BS": ["AAE=", "??"]}, "not base64"),
        ({"SS": "abc"}, "not a list"),  # set("abc") would be {"a", "b", "c"}
        ({"NS": "123"}, "not a list"),
        ({"BS": "AAE="}, "not a list"),
        ({"L": "abc"}, "not a list"),
        ({"SS": ["a", 5]}, "not a string"),
        ({"S": 5}, "not a string"),
        ({"BOOL": "false"}, "not true or false"),  # bool("false") is True
    ],
)
def test_bad_base64_and_wrong_shaped_sets_are_refused_naming_shard_record_and_attribute(
    value: dict[str, Any], problem: str
) -> None:
    error = new_image_error({"tags": value})
    message = str(error)
    assert problem in message
    assert (error.path, error.event_id, error.sequence_number, error.shard_id) == (
        "NewImage.tags",
        "ev-42",
        "000000000000000000123",
        "shardId-7",
    )
    assert "NewImage.tags" in message and "ev-42" in message and "shardId-7" in message


def test_well_formed_binaries_and_sets_still_convert_as_boto3_does() -> None:
    for value in (
        {"B": "AAE="},
        {"B": ""},
        {"BS": ["AAE=", "/w=="]},
        {"SS": ["a", "b"]},
        {"NS": ["1", "2.5"]},
    ):
        wire = {"B": base64.b64decode(value["B"])} if "B" in value else value
        if "BS" in value:
            wire = {"BS": [base64.b64decode(b) for b in value["BS"]]}
        assert deserialize_value(value) == BOTO3.deserialize(wire)


def test_keys_and_old_image_name_their_own_image() -> None:
    raw = {
        "eventID": "e",
        "dynamodb": {"SequenceNumber": "5", "Keys": {"sk": {"N": "1" * 40}}, "OldImage": {"v": {"N": "x"}}},
    }
    record = StreamRecord(raw, "s")
    with pytest.raises(AttributeValueError, match=r"Keys\.sk"):
        _ = record.keys
    with pytest.raises(AttributeValueError, match=r"OldImage\.v"):
        _ = record.old_image


EXACT = ["0", "-0", "42", "-3E+10", "1E-130", "-1E-130", "9.9999999999999999999999999999999999999E+125"]
EXACT += ["12345678901234567890123456789012345678", "0.000000000000000000000000000000000000001"]
TRAPPED = ["1" * 39, "1E-170", "1.00000000000000000000000000000000000001", "1E+130"]


@pytest.mark.parametrize("text", EXACT)
def test_numbers_dynamodb_holds_convert_exactly_as_boto3_does(text: str) -> None:
    ours = deserialize_value({"N": text})
    theirs = BOTO3.deserialize({"N": text})
    assert str(ours) == str(theirs) and ours == Decimal(text)


@pytest.mark.parametrize("text", TRAPPED)
def test_the_same_numbers_are_trapped_as_in_boto3(text: str) -> None:
    with pytest.raises(decimal.DecimalException):
        BOTO3.deserialize({"N": text})
    with pytest.raises(AttributeValueError):
        deserialize_value({"N": text})


# ------------------------------------------------------------------ through the failure policy


def test_a_number_that_cannot_be_held_fails_only_its_record_into_the_dead_letter(tmp_path: Path) -> None:
    """Read lazily inside the handler: bisected down to the one record, dead-lettered, the rest processed."""
    rig = Rig(WorkerSettings(max_records=10, idle_time_between_reads_millis=200))
    rig.stream.add("s1", 100, 10)  # 100, 110, ..., 190; closed
    poisoned = rig.stream.shards["s1"][4]
    poisoned.raw["dynamodb"]["NewImage"]["n"] = {"N": "1E-170"}
    rig.lease("s1")
    totals: list[Decimal] = []

    def handle(batch: Batch) -> None:
        values = [r.new_image["n"] for r in batch.records if r.new_image is not None]
        totals.extend(values)  # only reached when every value of the batch converted

    dead = LocalDeadLetter(tmp_path)
    processor = function_processor(
        handle,
        clock=rig.clock,
        policy=RetryPolicy(
            max_retry_attempts=1, base_backoff_millis=5, max_backoff_millis=10, rng=random.Random(3)
        ),
        dead_letter=dead,
    )
    consumer = rig.consumer("s1", processor)
    rig.drive(consumer)  # never raises: the error is the record's, not the worker's
    assert sorted(totals) == [Decimal(n) for n in range(100, 200, 10) if n != 140]
    assert Decimal(0) not in totals  # the old context silently turned 1E-170 into 0
    (document,) = dead.read_all()
    assert [r["eventID"] for r in document["records"]] == [poisoned.event_id]
    assert document["error"]["type"] == "AttributeValueError"
    assert "NewImage.n" in document["error"]["message"] and "s1" in document["error"]["message"]
    assert consumer.checkpointer.last_checkpoint == "SHARD_END"
