"""The leases table in DynamoDB: the only module that talks to it.

Every mutation is a conditional write from :mod:`consumer.leases.conditions` and asks for
``ReturnValuesOnConditionCheckFailure=ALL_OLD``, so a lost race tells us the current item without a
second read. Every request asks for ``ReturnConsumedCapacity=TOTAL``; :attr:`consumed` adds them up,
which is how the benchmarks compare this design's leases-table cost with the Java KCL's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.leases import conditions
from consumer.leases.errors import (
    CheckpointRefusedError,
    LeaseConflictError,
    LeaseLostError,
    LeaseStoreThrottledError,
    LeaseStoreUnavailableError,
    LeaseTableMissingError,
    LeaseTableSchemaError,
)
from consumer.leases.model import (
    FIRST_START_KEY,
    SHARD_END,
    ExtendedSequenceNumber,
    HandOverRequest,
    Heartbeat,
    Lease,
    Snapshot,
    hand_over_attribute,
    hand_over_requests,
    hand_over_value,
    heartbeat_key,
    heartbeat_to_item,
    lease_from_item,
    lease_to_item,
    snapshot_from_items,
)
from consumer.settings import WorkerSettings
from consumer.telemetry.metrics import Metrics, NullMetrics

THROTTLING = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
}


@dataclass
class ConsumedCapacity:
    read_units: float = 0.0
    write_units: float = 0.0
    requests: int = 0
    scans: int = 0
    throttles: int = 0


class DynamoDBLeaseStore:
    """The leases table. ``metrics`` receives LeaseTable ConsumedRead/WriteCapacity per request and
    LeaseTableThrottles per throttled request (seed 003: a throttled leases table is how fleets lose
    leases, so it must be visible before it hurts)."""

    def __init__(self, client: Any, table_name: str, *, metrics: Metrics | None = None) -> None:
        self._client = client
        self.table_name = table_name
        self._lock = threading.Lock()
        self._metrics: Metrics = metrics or NullMetrics()
        self.consumed = ConsumedCapacity()

    # ------------------------------------------------------------------------------- table

    def ensure_table(
        self, settings: WorkerSettings, *, create: bool = True, timeout_seconds: float = 120
    ) -> None:
        """Create the table when missing (KCL's shape), wait until ACTIVE, and check its key schema."""
        try:
            with self._errors("DescribeTable", self.table_name):
                description = self._client.describe_table(TableName=self.table_name)["Table"]
        except LeaseTableMissingError:
            if not create:
                raise
            self._create(settings)
            description = self._wait_active(timeout_seconds)
        key_schema = {(k["AttributeName"], k["KeyType"]) for k in description["KeySchema"]}
        types = {a["AttributeName"]: a["AttributeType"] for a in description.get("AttributeDefinitions", [])}
        if key_schema != {("leaseKey", "HASH")} or types.get("leaseKey") != "S":
            found = ", ".join(f"{name} ({kind}, {types.get(name, '?')})" for name, kind in sorted(key_schema))
            raise LeaseTableSchemaError(
                f"table {self.table_name} has key schema [{found}]; a leases table needs hash key "
                "leaseKey (S) and no sort key. Point worker.lease_table_name at another table, or delete "
                "this one so the worker can create it."
            )
        if description.get("TableStatus") != "ACTIVE":
            self._wait_active(timeout_seconds)

    def _create(self, settings: WorkerSettings) -> None:
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "leaseKey", "AttributeType": "S"}],
        }
        if settings.lease_table_billing_mode == "PAY_PER_REQUEST":
            request["BillingMode"] = "PAY_PER_REQUEST"
        else:
            request["BillingMode"] = "PROVISIONED"
            request["ProvisionedThroughput"] = {
                "ReadCapacityUnits": settings.initial_lease_table_read_capacity,
                "WriteCapacityUnits": settings.initial_lease_table_write_capacity,
            }
        try:
            with self._errors("CreateTable", self.table_name):
                self._client.create_table(**request)
        except LeaseStoreUnavailableError as exc:
            if "ResourceInUseException" not in str(exc):  # another worker created it first: fine
                raise

    def _wait_active(self, timeout_seconds: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_seconds
        while True:
            with self._errors("DescribeTable", self.table_name):
                table: dict[str, Any] = self._client.describe_table(TableName=self.table_name)["Table"]
            if table.get("TableStatus") == "ACTIVE":
                return table
            if time.monotonic() > deadline:
                raise LeaseStoreUnavailableError(
                    f"table {self.table_name} not ACTIVE after {timeout_seconds:.0f} s"
                )
            time.sleep(1)

    # ------------------------------------------------------------------------------ reads

    def scan(self) -> Snapshot:
        items: list[Mapping[str, Any]] = []
        request: dict[str, Any] = {"TableName": self.table_name, "ReturnConsumedCapacity": "TOTAL"}
        while True:
            with self._errors("Scan", self.table_name):
                page = self._client.scan(**request)
            self._count(page, scan=True)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return snapshot_from_items(items)

    def get(self, shard_id: str) -> Lease | None:
        with self._errors("GetItem", shard_id):
            response = self._client.get_item(
                TableName=self.table_name,
                Key={"leaseKey": {"S": shard_id}},
                ConsistentRead=True,
                ReturnConsumedCapacity="TOTAL",
            )
        self._count(response)
        item = response.get("Item")
        return lease_from_item(item) if item else None

    # ---------------------------------------------------------------------------- writes

    def create_if_absent(self, lease: Lease) -> bool:
        try:
            self._put(lease_to_item(lease), conditions.CREATE_IF_ABSENT, {}, "create", lease.shard_id)
        except LeaseConflictError:
            return False
        return True

    def heartbeat(self, beat: Heartbeat, expected_counter: int | None) -> tuple[HandOverRequest, ...]:
        if expected_counter is None:
            condition, values = conditions.HEARTBEAT_NEW, {}
        else:
            condition = conditions.HEARTBEAT_MINE
            values = {":me": {"S": beat.worker_id}, ":expected": {"N": str(expected_counter)}}
        response = self._put(
            heartbeat_to_item(beat), condition, values, "heartbeat", heartbeat_key(beat.worker_id)
        )
        return hand_over_requests(response.get("Attributes"))

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        self._write(
            "delete_heartbeat",
            heartbeat_key(beat.worker_id),
            lambda: self._client.delete_item(
                TableName=self.table_name,
                Key={"leaseKey": {"S": heartbeat_key(beat.worker_id)}},
                ConditionExpression=conditions.HEARTBEAT_STALE,
                ExpressionAttributeValues={":seen_counter": {"N": str(beat.counter)}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ReturnConsumedCapacity="TOTAL",
            ),
        )

    def take(self, seen: Lease, new_owner: str) -> Lease:
        switches = seen.owner_switches_since_checkpoint + (0 if seen.owner == new_owner else 1)
        values: dict[str, Any] = {
            ":seen_counter": {"N": str(seen.counter)},
            ":new_counter": {"N": str(seen.counter + 1)},
            ":me": {"S": new_owner},
            ":switches": {"N": str(switches)},
        }
        if seen.owner is None:
            condition = conditions.TAKE_FREE
        else:
            condition = conditions.TAKE_FROM
            values[":seen_owner"] = {"S": seen.owner}
        return self._update(
            "take",
            seen.shard_id,
            "SET leaseOwner = :me, leaseCounter = :new_counter, ownerSwitchesSinceCheckpoint = :switches "
            "REMOVE pendingOwner, pendingSince",
            condition,
            values,
        )

    def ask_hand_over(self, owner: str, request: HandOverRequest) -> None:
        self._write(
            "ask_hand_over",
            heartbeat_key(owner),
            lambda: self._client.update_item(
                TableName=self.table_name,
                Key={"leaseKey": {"S": heartbeat_key(owner)}},
                UpdateExpression="SET #ask = :ask",
                ConditionExpression=conditions.HAND_OVER_ASK,
                ExpressionAttributeNames={"#ask": hand_over_attribute(request.shard_id)},
                ExpressionAttributeValues={":ask": hand_over_value(request)},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ReturnConsumedCapacity="TOTAL",
            ),
        )

    def request_steal(self, seen: Lease, thief: str, now_wall_millis: int) -> Lease:
        if seen.owner is None:
            raise ValueError(f"{seen.shard_id} has no owner to steal from; take it instead")
        return self._update(
            "request_steal",
            seen.shard_id,
            "SET pendingOwner = :thief, pendingSince = :now",
            conditions.STEAL_REQUEST,
            {
                ":seen_counter": {"N": str(seen.counter)},
                ":seen_owner": {"S": seen.owner},
                ":thief": {"S": thief},
                ":now": {"N": str(now_wall_millis)},
            },
        )

    def release(self, held: Lease, to: str | None = None) -> Lease:
        values: dict[str, Any] = {
            ":me": {"S": held.owner or ""},
            ":held_counter": {"N": str(held.counter)},
            ":new_counter": {"N": str(held.counter + 1)},
        }
        if to is None:
            expression = "SET leaseCounter = :new_counter REMOVE leaseOwner, pendingOwner, pendingSince"
        else:
            expression = (
                "SET leaseOwner = :to, leaseCounter = :new_counter, "
                "ownerSwitchesSinceCheckpoint = ownerSwitchesSinceCheckpoint + :one "
                "REMOVE pendingOwner, pendingSince"
            )
            values[":to"] = {"S": to}
            values[":one"] = {"N": "1"}
        return self._update("release", held.shard_id, expression, conditions.HELD, values, lost=True)

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
        if held.checkpoint.is_shard_end:
            raise CheckpointRefusedError(f"{held.shard_id} is already at SHARD_END")
        if checkpoint < held.checkpoint:
            raise CheckpointRefusedError(
                f"{held.shard_id}: checkpoint {checkpoint} would move back from {held.checkpoint}"
            )
        return self._update(
            "checkpoint",
            held.shard_id,
            "SET checkpoint = :cp, checkpointSubSequenceNumber = :sub, ownerSwitchesSinceCheckpoint = :zero",
            conditions.CHECKPOINT,
            {
                ":me": {"S": held.owner or ""},
                ":held_counter": {"N": str(held.counter)},
                ":cp": {"S": checkpoint.sequence},
                ":sub": {"N": str(checkpoint.sub_sequence)},
                ":zero": {"N": "0"},
                ":shard_end": {"S": SHARD_END},
            },
            lost=True,
        )

    def delete_finished(self, lease: Lease) -> None:
        self._write(
            "delete",
            lease.shard_id,
            lambda: self._client.delete_item(
                TableName=self.table_name,
                Key={"leaseKey": {"S": lease.shard_id}},
                ConditionExpression=conditions.DELETE_FINISHED,
                ExpressionAttributeValues={":shard_end": {"S": SHARD_END}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ReturnConsumedCapacity="TOTAL",
            ),
        )

    def claim_first_start(self, worker_id: str, at_wall_millis: int) -> bool:
        item = {
            "leaseKey": {"S": FIRST_START_KEY},
            "workerId": {"S": worker_id},
            "claimedAt": {"N": str(at_wall_millis)},
        }
        try:
            self._put(item, conditions.CREATE_IF_ABSENT, {}, "claim-first-start", FIRST_START_KEY)
        except LeaseConflictError:
            return False
        return True

    # --------------------------------------------------------------------------- plumbing

    def _put(
        self, item: dict[str, Any], condition: str, values: dict[str, Any], op: str, key: str
    ) -> dict[str, Any]:
        """A conditional put; the response carries the replaced item (ALL_OLD, free with the write)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Item": item,
            "ConditionExpression": condition,
            "ReturnValues": "ALL_OLD",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            "ReturnConsumedCapacity": "TOTAL",
        }
        if values:
            request["ExpressionAttributeValues"] = values
        response: dict[str, Any] = self._write(op, key, lambda: self._client.put_item(**request))
        return response

    def _update(
        self,
        op: str,
        shard_id: str,
        expression: str,
        condition: str,
        values: dict[str, Any],
        *,
        lost: bool = False,
    ) -> Lease:
        response = self._write(
            op,
            shard_id,
            lambda: self._client.update_item(
                TableName=self.table_name,
                Key={"leaseKey": {"S": shard_id}},
                UpdateExpression=expression,
                ConditionExpression=f"attribute_exists(leaseKey) AND {condition}",
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ReturnConsumedCapacity="TOTAL",
            ),
            lost=lost,
        )
        return lease_from_item(response["Attributes"])

    def _write(self, op: str, key: str, call: Callable[[], Any], *, lost: bool = False) -> Any:
        try:
            with self._errors(op, key):
                response = call()
        except ClientError as exc:
            old = exc.response.get("Item")
            current = lease_from_item(old) if old and not key.startswith("__") else None
            error = LeaseLostError if lost else LeaseConflictError
            raise error(op, key, current) from exc
        self._count(response)
        return response

    def _count(self, response: Mapping[str, Any], *, scan: bool = False) -> None:
        capacity = response.get("ConsumedCapacity") or {}
        units = float(capacity.get("CapacityUnits", 0.0))
        if "ReadCapacityUnits" in capacity or "WriteCapacityUnits" in capacity:
            reads = float(capacity.get("ReadCapacityUnits", 0.0))
            writes = float(capacity.get("WriteCapacityUnits", 0.0))
        elif scan or "Item" in response or response.get("Items") is not None or "Responses" in response:
            reads, writes = units, 0.0
        else:
            reads, writes = 0.0, units
        with self._lock:
            self.consumed.requests += 1
            self.consumed.scans += int(scan)
            self.consumed.read_units += reads
            self.consumed.write_units += writes
        if reads:
            self._metrics.count("LeaseTable", "LeaseTableConsumedReadCapacity", reads)
        if writes:
            self._metrics.count("LeaseTable", "LeaseTableConsumedWriteCapacity", writes)

    @contextmanager
    def _errors(self, op: str, key: str) -> Iterator[None]:
        """Map botocore errors: conflicts stay ClientErrors for :meth:`_write`, the rest are ours."""
        try:
            yield
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ConditionalCheckFailedException":
                raise
            if code == "ResourceNotFoundException":
                raise LeaseTableMissingError(
                    f"leases table {self.table_name} does not exist (during {op} {key})"
                ) from exc
            if code in THROTTLING:
                with self._lock:
                    self.consumed.throttles += 1
                self._metrics.count("LeaseTable", "LeaseTableThrottles", 1)
                raise LeaseStoreThrottledError(
                    f"{op} {key}: leases table {self.table_name} is throttling ({code}); raise its capacity "
                    "(worker.initial_lease_table_*_capacity or on-demand, see `consumer plan`)"
                ) from exc
            raise LeaseStoreUnavailableError(
                f"{op} {key} on {self.table_name} failed: {code}: {exc}"
            ) from exc
        except BotoCoreError as exc:
            raise LeaseStoreUnavailableError(
                f"{op} {key}: leases table {self.table_name} unreachable: {exc}"
            ) from exc
