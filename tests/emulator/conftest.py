"""Fixtures: one emulator per module (tables per test isolate them), always cleaned up."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.testing import RunningEmulator, running_emulator

_names = itertools.count()


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    # Long periods: tests force rollovers, splits and trims through the control API.
    with running_emulator(
        partitions=2, rollover_seconds=3600, trim_after_seconds=86400, reads_per_shard_per_second=1000
    ) as running:
        yield running


def make_table(
    emu: RunningEmulator, view: str = "NEW_AND_OLD_IMAGES", sort_key: bool = False
) -> tuple[str, str]:
    """A new stream-enabled table; returns (name, stream ARN)."""
    name = f"t{next(_names)}"
    keys: list[dict[str, Any]] = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attrs = [{"AttributeName": "pk", "AttributeType": "S"}]
    if sort_key:
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attrs.append({"AttributeName": "sk", "AttributeType": "N"})
    described = emu.client("dynamodb").create_table(
        TableName=name,
        KeySchema=keys,
        AttributeDefinitions=attrs,
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": view},
    )
    return name, described["TableDescription"]["LatestStreamArn"]


def all_shards(streams: Any, arn: str, **extra: Any) -> list[dict[str, Any]]:
    shards: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"StreamArn": arn, **extra}
    while True:
        page = streams.describe_stream(**kwargs)["StreamDescription"]
        shards.extend(page["Shards"])
        if "LastEvaluatedShardId" not in page:
            return shards
        kwargs["ExclusiveStartShardId"] = page["LastEvaluatedShardId"]


def read_shard(streams: Any, arn: str, shard_id: str) -> list[dict[str, Any]]:
    """Every record of a shard; stops at the end of a closed shard or an empty batch of an open one."""
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    records: list[dict[str, Any]] = []
    while iterator:
        response = streams.get_records(ShardIterator=iterator)
        records.extend(response["Records"])
        if not response["Records"]:
            break
        iterator = response.get("NextShardIterator")
    return records


def read_stream(streams: Any, arn: str) -> list[dict[str, Any]]:
    """All records, parents before children."""
    shards = all_shards(streams, arn)
    out: list[dict[str, Any]] = []
    for shard in shards:  # the listing is in creation order: parents come first
        out.extend(read_shard(streams, arn, shard["ShardId"]))
    return out


def error_code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def no_retry_streams(emu: RunningEmulator) -> Any:
    """A DynamoDB Streams client that makes one attempt: the test sees the emulator's first answer."""
    return emu.client("dynamodbstreams", config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
