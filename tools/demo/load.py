"""A seeded load generator that knows exactly which stream records its writes must produce.

Every write bumps a per-key write number ``w`` stored in the item, so every write changes the item
and produces exactly one stream record (DynamoDB emits none for a write that changes nothing). A
delete is only issued for an item that exists (a delete of a missing item produces no record either).
The generator appends what it did to an *oracle* file, one JSON line per write:

    {"key": "item-00042", "event": "INSERT" | "MODIFY" | "REMOVE", "w": 7}

For INSERT/MODIFY ``w`` is the new item's write number; for REMOVE it is the write number of the
item that was deleted (the record's OldImage carries it). The verdict compares this with what the
fleet delivered.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from botocore.exceptions import ClientError

from consumer.api.metrics import LOAD_GENERATOR_OPERATION, Metrics, NullMetrics
from ground.clock import Clock, SystemClock
from ground.settings import LoadSettings, TableSettings

Event = Literal["INSERT", "MODIFY", "REMOVE"]


@dataclass(frozen=True, slots=True)
class Write:
    key: str
    event: Event
    w: int


@dataclass
class KeyState:
    next_w: int = 1
    exists: bool = False
    current_w: int = 0


@dataclass
class LoadPlan:
    """Pure: decides the next write from the seed and what exists (no I/O)."""

    settings: LoadSettings
    rng: random.Random = field(init=False)
    keys: dict[str, KeyState] = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.settings.seed)
        self.keys = {f"item-{i:05d}": KeyState() for i in range(self.settings.keys)}
        self._names = sorted(self.keys)

    def next_write(self) -> tuple[Literal["put", "update", "delete"], Write]:
        key = self.rng.choice(self._names)
        state = self.keys[key]
        roll = self.rng.random()
        op: Literal["put", "update", "delete"]
        if roll < self.settings.put_ratio:
            op = "put"
        elif roll < self.settings.put_ratio + self.settings.update_ratio:
            op = "update"
        else:
            op = "delete" if state.exists else "put"
        if op == "update" and not state.exists:
            # UpdateItem creating an item is one INSERT on DynamoDB but two records on moto; the
            # emulator's own tests cover that case, the load keeps updates to existing items.
            op = "put"
        if op == "delete":
            write = Write(key, "REMOVE", state.current_w)
            state.exists = False
            return op, write
        w = state.next_w
        state.next_w += 1
        write = Write(key, "MODIFY" if state.exists else "INSERT", w)
        state.exists = True
        state.current_w = w
        return op, write


def _key_value(name_type: str, text: str) -> dict[str, str]:
    if name_type == "N":
        return {"N": str(int(text.rsplit("-", 1)[-1]))}
    if name_type == "B":
        return {"B": text}
    return {"S": text}


# Error codes DynamoDB and Kinesis document as safe to retry (besides any HTTP 5xx): throttles.
RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "KMSThrottlingException",
    }
)
REFUSED_WRITE_BACKOFF_SECONDS = 0.1


class LoadError(Exception):
    """The table (or the Kinesis stream) refused a write for a reason a retry cannot cure (its
    message names the write)."""


def retryable(exc: ClientError) -> bool:
    """A throttle or a server error: the same request again may succeed."""
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return error.get("Code") in RETRYABLE_CODES or int(status) >= 500


PREFILL_ITEMS = 200  # items the table holds before its stream exists (the bootstrap's part)


def prefill(dynamodb: Any, table: TableSettings, count: int = PREFILL_ITEMS) -> int:
    """Write ``count`` items (keys ``seed-NNNNN``, which the load never touches) with BatchWriteItem:
    the table's state from before the stream, which only a bootstrap brings into the snapshot."""
    sort = {table.sort_key.name: _key_value(table.sort_key.type, "0")} if table.sort_key else {}
    items = [
        {
            table.partition_key.name: _key_value(table.partition_key.type, f"seed-{number:05d}"),
            **sort,
            "payload": {"S": f"written before the stream: {number}"},
            "kind": {"S": "seed"},
        }
        for number in range(count)
    ]
    for start in range(0, len(items), 25):
        pending: dict[str, Any] = {
            table.name: [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]
        }
        while pending:
            pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
    return len(items)


class LoadGenerator:
    """Applies a :class:`LoadPlan` to the source table at a steady rate, recording the oracle and
    counting each write as ``TableWrites`` (the dashboard's "records processed vs table writes")."""

    def __init__(
        self,
        dynamodb: Any,
        table: TableSettings,
        settings: LoadSettings,
        oracle_path: Path,
        clock: Clock | None = None,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self._ddb = dynamodb
        self._metrics: Metrics = metrics or NullMetrics()
        self._table = table
        self._plan = LoadPlan(settings)
        self._rate = settings.writes_per_second
        self._oracle_path = oracle_path
        self._clock = clock or SystemClock()
        self._stop = threading.Event()
        self.writes = 0
        self.refused = 0  # refusals retried (throttles and server errors past the client's retries)

    def _item_key(self, key: str) -> dict[str, dict[str, str]]:
        item = {self._table.partition_key.name: _key_value(self._table.partition_key.type, key)}
        if self._table.sort_key is not None:
            item[self._table.sort_key.name] = _key_value(self._table.sort_key.type, "0")
        return item

    def _apply(self, op: str, write: Write, payload: dict[str, str]) -> None:
        key = self._item_key(write.key)
        if op == "put":
            item = {**key, "w": {"N": str(write.w)}, "payload": payload, "kind": {"S": "put"}}
            self._ddb.put_item(TableName=self._table.name, Item=item)
        elif op == "update":
            self._ddb.update_item(
                TableName=self._table.name,
                Key=key,
                UpdateExpression="SET w = :w, payload = :p, kind = :k",
                ExpressionAttributeValues={":w": {"N": str(write.w)}, ":p": payload, ":k": {"S": "update"}},
            )
        else:
            self._ddb.delete_item(TableName=self._table.name, Key=key)

    def _write(self, op: str, write: Write) -> bool:
        """Apply one write until the table takes it; False if the load was stopped first.

        A throttle or a server error that outlasts the client's own retries is retried here with the
        same item, as an application that must not drop a write would: only a write the table took
        goes into the oracle, so a refused one is neither lost nor double counted. (A write the
        table applied but answered with a 500 would be written twice; the demo's table faults
        refuse a request before it applies.) Any other error stops the load, named."""
        payload = {"S": f"{write.key}:{write.w}:{self._plan.rng.getrandbits(32):08x}"}
        while True:
            try:
                self._apply(op, write, payload)
                return True
            except ClientError as exc:
                if not retryable(exc):
                    raise LoadError(
                        f"the table {self._table.name} refused the {op} of {write.key}: {exc}"
                    ) from exc
                self.refused += 1
                if self._stop.wait(REFUSED_WRITE_BACKOFF_SECONDS):
                    return False

    def run(self, duration_seconds: float, on_write: Callable[[Write], None] | None = None) -> int:
        """Write for ``duration_seconds`` (or until :meth:`stop`); returns this run's writes. Raises
        :class:`LoadError` when the table refuses a write for good."""
        self._oracle_path.parent.mkdir(parents=True, exist_ok=True)
        start = self._clock.monotonic_millis()
        interval = 1000 / self._rate
        this_run = 0
        with self._oracle_path.open("a", encoding="utf-8") as oracle:
            while not self._stop.is_set():
                now = self._clock.monotonic_millis()
                if now - start >= duration_seconds * 1000:
                    break
                due = start + this_run * interval
                if due > now:
                    self._stop.wait((due - now) / 1000)
                    continue
                op, write = self._plan.next_write()
                if not self._write(op, write):
                    break
                # The write succeeded: only now is it part of what must arrive.
                oracle.write(json.dumps({"key": write.key, "event": write.event, "w": write.w}) + "\n")
                oracle.flush()
                self.writes += 1
                this_run += 1
                # Locally this stands in for the source table's ConsumedWriteCapacityUnits (CloudWatch's
                # "table writes"), which the emulator does not publish.
                self._metrics.count(LOAD_GENERATOR_OPERATION, "TableWrites", 1)
                if on_write is not None:
                    on_write(write)
        return this_run

    def stop(self) -> None:
        self._stop.set()
