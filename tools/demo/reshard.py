"""Resharding a Kinesis stream under the demo's fleet: split an open shard in two, merge two adjacent
open shards, through the Kinesis API (SplitShard, MergeShards) as an operator would.

A stream accepts one resharding at a time (``ResourceInUseException`` while it is UPDATING) and an
injected fault may refuse a call; both are waited out and the call made again, within a deadline.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from typing import Any

from tools.demo.events import short_shard

DEADLINE_SECONDS = 30.0


def is_open(shard: dict[str, Any]) -> bool:
    return "EndingSequenceNumber" not in shard["SequenceNumberRange"]


def hash_range(shard: dict[str, Any]) -> tuple[int, int]:
    keys = shard["HashKeyRange"]
    return int(keys["StartingHashKey"]), int(keys["EndingHashKey"])


def adjacent_pairs(shards: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Open shards whose hash-key ranges touch, lowest range first (what MergeShards accepts)."""
    ordered = sorted((s for s in shards if is_open(s)), key=hash_range)
    return [(a, b) for a, b in itertools.pairwise(ordered) if hash_range(a)[1] + 1 == hash_range(b)[0]]


class Resharder:
    def __init__(self, client: Any, stream: str) -> None:
        self._client = client
        self._stream = stream

    def _shards(self) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = self._retrying(
            lambda: self._client.list_shards(StreamName=self._stream)
        )["Shards"]
        return shards

    def wait_active(self) -> None:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            try:
                summary = self._client.describe_stream_summary(StreamName=self._stream)
                if summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                    return
            except Exception:  # an injected fault: ask again
                pass
            time.sleep(0.2)
        raise TimeoutError(f"stream {self._stream} did not become ACTIVE in {DEADLINE_SECONDS:g} s")

    def _retrying(self, call: Callable[[], Any]) -> Any:
        """``call`` until it is accepted: a stream busy resharding or a fault is waited out."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            try:
                return call()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def split(self, rng: random.Random | None = None) -> str:
        """Split an open shard (the widest, or one drawn by ``rng``) at the middle of its range."""
        self.wait_active()
        candidates = [s for s in self._shards() if is_open(s)]
        parent = (
            rng.choice(candidates)
            if rng is not None
            else max(candidates, key=lambda s: hash_range(s)[1] - hash_range(s)[0])
        )
        low, high = hash_range(parent)
        self._retrying(
            lambda: self._client.split_shard(
                StreamName=self._stream,
                ShardToSplit=parent["ShardId"],
                NewStartingHashKey=str((low + high) // 2 + 1),
            )
        )
        self.wait_active()
        children = [s["ShardId"] for s in self._shards() if s.get("ParentShardId") == parent["ShardId"]]
        return (
            f"split: shard {short_shard(parent['ShardId'])} closed; children "
            f"{', '.join(short_shard(c) for c in children)}"
        )

    def merge(self) -> str:
        """Merge the two adjacent open shards with the narrowest ranges together."""
        self.wait_active()
        pairs = adjacent_pairs(self._shards())
        if not pairs:
            return "merge: no two open shards are adjacent"
        low, high = min(pairs, key=lambda p: hash_range(p[1])[1] - hash_range(p[0])[0])
        self._retrying(
            lambda: self._client.merge_shards(
                StreamName=self._stream, ShardToMerge=low["ShardId"], AdjacentShardToMerge=high["ShardId"]
            )
        )
        self.wait_active()
        child = [
            s["ShardId"]
            for s in self._shards()
            if s.get("ParentShardId") in (low["ShardId"], high["ShardId"])
        ]
        return (
            f"merge: shards {short_shard(low['ShardId'])} and {short_shard(high['ShardId'])} closed; "
            f"child {', '.join(short_shard(c) for c in child)}"
        )
