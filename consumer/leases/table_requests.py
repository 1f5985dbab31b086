"""The two DynamoDB tables behind the lease store, and how every request to them is made.

:class:`TableRequests` is the request layer :class:`consumer.leases.dynamodb.DynamoDBLeaseStore`
builds its operations on. It is kept apart from those operations because it answers different
questions: which table a row lives in, which botocore failures mean a lost race (left as
``ClientError`` for the caller, which reads the current item from it) and which mean the table is
missing, throttling or unreachable (mapped to :mod:`consumer.leases.errors`), and what every
request cost. Every request asks for ``ReturnConsumedCapacity=TOTAL``; :attr:`TableRequests.consumed`
adds them up, which is how the benchmarks compare this design's leases-table cost with the Java
KCL's, and ``metrics`` receives the same figures so an operator sees a throttled leases table
before it loses leases.

It also creates the tables when asked (:meth:`TableRequests.ensure`) and checks the key schema of
tables it did not create, so a worker pointed at the wrong table stops with a message naming the
setting instead of failing on its first conditional write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.leases.errors import (
    LeaseConflictError,
    LeaseLostError,
    LeaseStoreThrottledError,
    LeaseStoreUnavailableError,
    LeaseTableMissingError,
    LeaseTableSchemaError,
)
from consumer.leases.items import lease_from_item
from consumer.telemetry.metrics import Metrics, NullMetrics
from ground.settings import WorkerSettings

THROTTLING = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
}
# How a cancelled transaction names a throttled item (its CancellationReasons' codes).
TRANSACTION_THROTTLING = THROTTLING | {"ThrottlingError", "ProvisionedThroughputExceeded"}


@dataclass
class ConsumedCapacity:
    read_units: float = 0.0
    write_units: float = 0.0
    requests: int = 0
    scans: int = 0
    throttles: int = 0


def workers_table_for(leases_table: str) -> str:
    """The workers table's default name: the leases table's with ``-workers``."""
    return f"{leases_table}-workers"


class TableRequests:
    """The leases table (key ``leaseKey``) and the workers table (key ``workerId``) on one client."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        workers_table_name: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.workers_table_name = workers_table_name or workers_table_for(table_name)
        self._lock = threading.Lock()
        self._metrics: Metrics = metrics or NullMetrics()
        self.consumed = ConsumedCapacity()

    def table_of(self, *, worker_row: bool) -> str:
        return self.workers_table_name if worker_row else self.table_name

    # ------------------------------------------------------------------------- provisioning

    def ensure(self, settings: WorkerSettings, *, create: bool = True, timeout_seconds: float = 120) -> None:
        """Create both tables when missing, wait until ACTIVE, and check their key schemas."""
        for table, key, setting in (
            (self.table_name, "leaseKey", "worker.lease_table_name"),
            (self.workers_table_name, "workerId", "worker.worker_table_name"),
        ):
            self._ensure(table, key, setting, settings, create=create, timeout_seconds=timeout_seconds)

    def _ensure(
        self,
        table: str,
        key: str,
        setting: str,
        settings: WorkerSettings,
        *,
        create: bool,
        timeout_seconds: float,
    ) -> None:
        try:
            with self.errors("DescribeTable", table, table=table):
                description = self.client.describe_table(TableName=table)["Table"]
        except LeaseTableMissingError:
            if not create:
                raise
            self._create(table, key, settings)
            description = self._wait_active(table, timeout_seconds)
        key_schema = {(k["AttributeName"], k["KeyType"]) for k in description["KeySchema"]}
        types = {a["AttributeName"]: a["AttributeType"] for a in description.get("AttributeDefinitions", [])}
        if key_schema != {(key, "HASH")} or types.get(key) != "S":
            found = ", ".join(f"{name} ({kind}, {types.get(name, '?')})" for name, kind in sorted(key_schema))
            raise LeaseTableSchemaError(
                f"table {table} has key schema [{found}]; it needs hash key {key} (S) and no sort key. "
                f"Point {setting} at another table, or delete this one so the worker can create it."
            )
        if description.get("TableStatus") != "ACTIVE":
            self._wait_active(table, timeout_seconds)

    def _create(self, table: str, key: str, settings: WorkerSettings) -> None:
        request: dict[str, Any] = {
            "TableName": table,
            "KeySchema": [{"AttributeName": key, "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": key, "AttributeType": "S"}],
        }
        # The workers table is on-demand whatever the leases table is: its heartbeat traffic grows
        # with the fleet and stays far below the leases table's capacity (as the CDK stack makes it).
        if settings.lease_table_billing_mode == "PAY_PER_REQUEST" or table == self.workers_table_name:
            request["BillingMode"] = "PAY_PER_REQUEST"
        else:
            request["BillingMode"] = "PROVISIONED"
            request["ProvisionedThroughput"] = {
                "ReadCapacityUnits": settings.initial_lease_table_read_capacity,
                "WriteCapacityUnits": settings.initial_lease_table_write_capacity,
            }
        try:
            with self.errors("CreateTable", table, table=table):
                self.client.create_table(**request)
        except LeaseStoreUnavailableError as exc:
            if "ResourceInUseException" not in str(exc):  # another worker created it first: fine
                raise

    def _wait_active(self, table: str, timeout_seconds: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_seconds
        while True:
            with self.errors("DescribeTable", table, table=table):
                found: dict[str, Any] = self.client.describe_table(TableName=table)["Table"]
            if found.get("TableStatus") == "ACTIVE":
                return found
            if time.monotonic() > deadline:
                raise LeaseStoreUnavailableError(f"table {table} not ACTIVE after {timeout_seconds:.0f} s")
            time.sleep(1)

    # ----------------------------------------------------------------------------- requests

    def scan_all(self, table: str) -> list[Mapping[str, Any]]:
        """Every item of ``table``, page by page (eventually consistent, as every Scan here).

        A complete scan of the leases table is counted as ``LeaseTableScans``: DynamoDB's Scan
        ReturnedItemCount is one datapoint per *page*, so the scaling alarms divide its sum by the
        scans to read the number of leases whatever the pages (infra/scaling.py)."""
        items: list[Mapping[str, Any]] = []
        request: dict[str, Any] = {"TableName": table, "ReturnConsumedCapacity": "TOTAL"}
        while True:
            with self.errors("Scan", table, table=table):
                page = self.client.scan(**request)
            self.count(page, scan=True)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                if table == self.table_name:
                    self._metrics.count("LeaseTable", "LeaseTableScans", 1)
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def get_item(self, table: str, key: dict[str, Any], name: str) -> Mapping[str, Any] | None:
        """One item by key, strongly consistent: a decision about one lease must see the last write."""
        with self.errors("GetItem", name, table=table):
            response = self.client.get_item(
                TableName=table, Key=key, ConsistentRead=True, ReturnConsumedCapacity="TOTAL"
            )
        self.count(response)
        item: Mapping[str, Any] | None = response.get("Item")
        return item

    def put(
        self,
        item: dict[str, Any],
        condition: str,
        values: dict[str, Any],
        op: str,
        key: str,
        *,
        worker_row: bool = False,
    ) -> dict[str, Any]:
        """A conditional put; the response carries the replaced item (ALL_OLD, free with the write)."""
        request: dict[str, Any] = {
            "TableName": self.table_of(worker_row=worker_row),
            "Item": item,
            "ConditionExpression": condition,
            "ReturnValues": "ALL_OLD",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            "ReturnConsumedCapacity": "TOTAL",
        }
        if values:
            request["ExpressionAttributeValues"] = values
        response: dict[str, Any] = self.write(
            op, key, lambda: self.client.put_item(**request), worker_row=worker_row
        )
        return response

    def write(
        self, op: str, key: str, call: Callable[[], Any], *, lost: bool = False, worker_row: bool = False
    ) -> Any:
        """Run one conditional write; a failed condition raises LeaseLostError (``lost``: the
        caller held the lease) or LeaseConflictError, carrying the current lease when ALL_OLD has one."""
        table = self.table_of(worker_row=worker_row)
        try:
            with self.errors(op, key, table=table):
                response = call()
        except ClientError as exc:
            old = exc.response.get("Item")
            current = lease_from_item(old) if old and not worker_row else None
            error = LeaseLostError if lost else LeaseConflictError
            raise error(op, key, current) from exc
        self.count(response)
        return response

    def count(self, response: Mapping[str, Any], *, scan: bool = False) -> None:
        """Add one response's consumed capacity (reads or writes, by the request's kind)."""
        capacity = response.get("ConsumedCapacity") or {}
        # TransactWriteItems answers a list (one entry per table); every other operation, one map.
        entries = capacity if isinstance(capacity, list) else [capacity]
        read = scan or "Item" in response or response.get("Items") is not None or "Responses" in response
        reads = writes = 0.0
        for entry in entries:
            units = float(entry.get("CapacityUnits", 0.0))
            if "ReadCapacityUnits" in entry or "WriteCapacityUnits" in entry:
                reads += float(entry.get("ReadCapacityUnits", 0.0))
                writes += float(entry.get("WriteCapacityUnits", 0.0))
            elif read:
                reads += units
            else:
                writes += units
        with self._lock:
            self.consumed.requests += 1
            self.consumed.scans += int(scan)
            self.consumed.read_units += reads
            self.consumed.write_units += writes
        if reads:
            self._metrics.count("LeaseTable", "LeaseTableConsumedReadCapacity", reads)
        if writes:
            self._metrics.count("LeaseTable", "LeaseTableConsumedWriteCapacity", writes)

    def throttled(self) -> None:
        """Count one throttled request, in :attr:`consumed` and as LeaseTableThrottles."""
        with self._lock:
            self.consumed.throttles += 1
        self._metrics.count("LeaseTable", "LeaseTableThrottles", 1)

    @contextmanager
    def errors(self, op: str, key: str, *, table: str | None = None) -> Iterator[None]:
        """Map botocore errors: conflicts stay ClientErrors for :meth:`write`, the rest are ours."""
        table = table or self.table_name
        kind = "workers table" if table == self.workers_table_name else "leases table"
        try:
            yield
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ConditionalCheckFailedException":
                raise
            if code == "ResourceNotFoundException":
                raise LeaseTableMissingError(f"{kind} {table} does not exist (during {op} {key})") from exc
            if code in THROTTLING:
                self.throttled()
                raise LeaseStoreThrottledError(
                    f"{op} {key}: {kind} {table} is throttling ({code}); raise its capacity "
                    "(worker.initial_lease_table_*_capacity or on-demand, see `consumer plan`)"
                ) from exc
            self._metrics.count("LeaseTable", "LeaseTableErrors", 1)
            raise LeaseStoreUnavailableError(f"{op} {key} on {kind} {table} failed: {code}: {exc}") from exc
        except BotoCoreError as exc:
            # Refused, timed out or unreachable: DynamoDB's own metrics see none of it (a request
            # that never arrived), so the workers count it for the lease-tables-failing alarm.
            self._metrics.count("LeaseTable", "LeaseTableErrors", 1)
            raise LeaseStoreUnavailableError(f"{op} {key}: {kind} {table} unreachable: {exc}") from exc
