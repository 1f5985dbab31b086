"""ListShards paging in the Kinesis adapter: a page token that expired (300 s) restarts the listing
once; a second expiry, and other errors, are the port's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.hooks import HierarchicalEmitter

from consumer.streams.errors import StreamSourceError, ThrottledError
from consumer.streams.kinesis import KinesisStreamSource

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/s"


def shard(index: int, *parents: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "ShardId": f"shardId-{index:012d}",
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**128 - 1)},
        "SequenceNumberRange": {"StartingSequenceNumber": "1"},
    }
    if parents:
        item["ParentShardId"] = parents[0]
    if len(parents) > 1:
        item["AdjacentParentShardId"] = parents[1]
    return item


def error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "ListShards")


class PagedClient:
    """ListShards in pages of one; ``expire`` lists the calls (1-based) answered with an expired token."""

    def __init__(self, shards: list[dict[str, Any]], expire: set[int], fail_with: str | None = None) -> None:
        self.shards, self.expire, self.fail_with, self.calls = shards, expire, fail_with, 0
        self.meta = SimpleNamespace(events=HierarchicalEmitter())  # a boto3 client's, for the adapter's hook

    def list_shards(self, **request: Any) -> dict[str, Any]:
        self.calls += 1
        if self.fail_with is not None:
            raise error(self.fail_with)
        if self.calls in self.expire:
            raise error("ExpiredNextTokenException")
        index = int(request.get("NextToken", "0"))
        page: dict[str, Any] = {"Shards": self.shards[index : index + 1]}
        if index + 1 < len(self.shards):
            page["NextToken"] = str(index + 1)
        return page


def test_an_expired_page_token_restarts_the_listing_once() -> None:
    shards = [shard(0), shard(1), shard(2, "shardId-000000000000", "shardId-000000000001")]
    client = PagedClient(shards, expire={2})
    listed = KinesisStreamSource(client).list_shards(ARN)
    assert [s.shard_id for s in listed] == [
        "shardId-000000000000",
        "shardId-000000000001",
        "shardId-000000000002",
    ]
    assert listed[2].parent_shard_ids == ("shardId-000000000000", "shardId-000000000001")
    assert client.calls == 5  # one page, the expired one, then the three pages from the start
    with pytest.raises(StreamSourceError, match="300 s"):
        KinesisStreamSource(PagedClient(shards, expire={2, 4})).list_shards(ARN)


def test_throttled_listing_is_the_ports_throttle() -> None:
    with pytest.raises(ThrottledError):
        KinesisStreamSource(PagedClient([shard(0)], set(), "LimitExceededException")).list_shards(ARN)
