"""Processors for the end-to-end tests. ``CountingChangelog``: the changelog sink with injected trouble, counting what it
handled so the tests can check the metrics against it.

``fail_every``-th call raises (the failure policy retries it); the second call and every
``slow_every``-th after it sleeps ``slow_millis`` first (longer than the emulator's iterator
expiry, so the next GetRecords finds an expired iterator). Calls are counted per worker process,
over all its shards: counted per shard, a slow machine's bigger batches left a short run with no
ninth call on any shard, and nothing failed. After a batch lands, its record count is appended to
``<seen_dir>/<pid>.txt``.
It logs through ``tests.e2e.processors``, a logger outside ``consumer``: the application log group.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from pathlib import Path

from consumer.processing import Batch, BatchResult
from consumer.records import ShardInfo
from consumer.sinks.changelog import ChangelogSink, ChangelogStore
from consumer.sinks.dynamodb_replica import DynamoDBReplicaSink

log = logging.getLogger("tests.e2e.processors")
_CALLS = itertools.count(1)  # this process's calls, whichever shard's processor makes them


class CountingChangelog:
    def __init__(
        self,
        destination: str,
        table: str,
        seen_dir: str,
        fail_every: int | str = 0,
        slow_every: int | str = 0,
        slow_millis: int | str = 0,
    ) -> None:
        self._sink = ChangelogSink(ChangelogStore(destination), table)
        self._seen = Path(seen_dir) / f"{os.getpid()}.txt"
        self._seen.parent.mkdir(parents=True, exist_ok=True)
        self._fail_every, self._slow_every = int(fail_every), int(slow_every)
        self._slow = int(slow_millis) / 1000

    def handle(self, batch: Batch) -> BatchResult | None:
        call = next(_CALLS)
        if self._fail_every and call % self._fail_every == 0:
            log.error(
                "injected processor failure on shard %s (%d records)", batch.shard_id, len(batch.records)
            )
            raise RuntimeError(f"injected processor failure on shard {batch.shard_id}")
        if self._slow_every and (call - 2) % self._slow_every == 0:  # the 2nd, then every slow_every-th
            time.sleep(self._slow)
        result = self._sink(batch)
        with self._seen.open("a", encoding="utf-8") as seen:
            seen.write(f"{len(batch.records)}\n")
        return result


class ChangelogAndReplica:
    """Both built-in sinks behind one handler (so one worker, one reload pace, feeds both), and every
    gap event it is handed appended to ``gaps_file`` as a JSON line: what reached the processor."""

    def __init__(
        self, destination: str, table: str, replica_table: str, endpoint_url: str, gaps_file: str
    ) -> None:
        import boto3

        self._changelog = ChangelogSink(ChangelogStore(destination), table)
        client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint_url)
        self._replica = DynamoDBReplicaSink(replica_table, client)
        self._gaps = Path(gaps_file)

    def shard_started(self, shard: ShardInfo, checkpoint: str) -> None:
        self._changelog.shard_started(shard, checkpoint)

    def shard_stopped(self, shard: ShardInfo) -> None:
        self._changelog.shard_stopped(shard)

    def handle(self, batch: Batch) -> BatchResult | None:
        if batch.gap is not None:
            with self._gaps.open("a", encoding="utf-8") as gaps:
                gaps.write(json.dumps(batch.gap.as_json()) + "\n")
        self._changelog(batch)
        return self._replica(batch)
