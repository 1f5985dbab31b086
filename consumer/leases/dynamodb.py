"""The leases table and its workers table in DynamoDB: the only module that talks to them.

Every mutation is a conditional write from :mod:`consumer.leases.conditions` and asks for
``ReturnValuesOnConditionCheckFailure=ALL_OLD``, so a lost race tells us the current item without a
second read. Every request asks for ``ReturnConsumedCapacity=TOTAL``; :attr:`consumed` adds them up,
which is how the benchmarks compare this design's leases-table cost with the Java KCL's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.leases import conditions
from consumer.leases.errors import (
    CheckpointRefusedError,
    HeartbeatConflictError,
    LeaseConflictError,
    LeaseLostError,
    LeaseStoreThrottledError,
    LeaseStoreUnavailableError,
    LeaseTableMissingError,
    LeaseTableSchemaError,
    LineageChangedError,
)
from consumer.leases.model import (
    LINEAGE_KEY,
    SHARD_END,
    ExtendedSequenceNumber,
    HandOverRequest,
    Heartbeat,
    Lease,
    Snapshot,
    first_start_item,
    hand_over_attribute,
    hand_over_requests,
    hand_over_value,
    heartbeat_from_item,
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


def workers_table_for(leases_table: str) -> str:
    """The workers table's default name: the leases table's with ``-workers``."""
    return f"{leases_table}-workers"


class DynamoDBLeaseStore:
    """The leases table and the workers table beside it. ``metrics`` receives LeaseTable
    ConsumedRead/WriteCapacity per request and LeaseTableThrottles per throttled request (KCL operators' advice: a
    throttled leases table is how fleets lose leases, so it must be visible before it hurts).

    Leases stay in the leases table alone, in KCL's format; heartbeat rows and the first-start marker
    go to the workers table, so a Java KCL (or its tooling) can read the leases table at any moment
    and the Scan count that the 2N scale-out alarm watches counts leases only (docs/leases.md).
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        workers_table_name: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._client = client
        self.table_name = table_name
        self.workers_table_name = workers_table_name or workers_table_for(table_name)
        self._lock = threading.Lock()
        self._metrics: Metrics = metrics or NullMetrics()
        self.consumed = ConsumedCapacity()

    # ------------------------------------------------------------------------------- table

    def ensure_table(
        self, settings: WorkerSettings, *, create: bool = True, timeout_seconds: float = 120
    ) -> None:
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
            with self._errors("DescribeTable", table, table=table):
                description = self._client.describe_table(TableName=table)["Table"]
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
        if settings.lease_table_billing_mode == "PAY_PER_REQUEST":
            request["BillingMode"] = "PAY_PER_REQUEST"
        else:
            request["BillingMode"] = "PROVISIONED"
            request["ProvisionedThroughput"] = {
                "ReadCapacityUnits": settings.initial_lease_table_read_capacity,
                "WriteCapacityUnits": settings.initial_lease_table_write_capacity,
            }
        try:
            with self._errors("CreateTable", table, table=table):
                self._client.create_table(**request)
        except LeaseStoreUnavailableError as exc:
            if "ResourceInUseException" not in str(exc):  # another worker created it first: fine
                raise

    def _wait_active(self, table: str, timeout_seconds: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_seconds
        while True:
            with self._errors("DescribeTable", table, table=table):
                found: dict[str, Any] = self._client.describe_table(TableName=table)["Table"]
            if found.get("TableStatus") == "ACTIVE":
                return found
            if time.monotonic() > deadline:
                raise LeaseStoreUnavailableError(f"table {table} not ACTIVE after {timeout_seconds:.0f} s")
            time.sleep(1)

    # ------------------------------------------------------------------------------ reads

    def scan(self) -> Snapshot:
        """Both tables, leases first (eventually consistent, as every Scan here)."""
        return snapshot_from_items(self._scan_all(self.table_name), self._scan_all(self.workers_table_name))

    def _scan_all(self, table: str) -> list[Mapping[str, Any]]:
        items: list[Mapping[str, Any]] = []
        request: dict[str, Any] = {"TableName": table, "ReturnConsumedCapacity": "TOTAL"}
        while True:
            with self._errors("Scan", table, table=table):
                page = self._client.scan(**request)
            self._count(page, scan=True)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def get(self, shard_id: str) -> Lease | None:
        item = self._get_item(self.table_name, {"leaseKey": {"S": shard_id}}, shard_id)
        return lease_from_item(item) if item else None

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        item = self._get_item(self.workers_table_name, {"workerId": {"S": worker_id}}, worker_id)
        return heartbeat_from_item(item) if item else None

    def _get_item(self, table: str, key: dict[str, Any], name: str) -> Mapping[str, Any] | None:
        with self._errors("GetItem", name, table=table):
            response = self._client.get_item(
                TableName=table, Key=key, ConsistentRead=True, ReturnConsumedCapacity="TOTAL"
            )
        self._count(response)
        item: Mapping[str, Any] | None = response.get("Item")
        return item

    # ---------------------------------------------------------------------------- writes

    def lineage_generation(self) -> int:
        item = self._get_item(self.workers_table_name, {"workerId": {"S": LINEAGE_KEY}}, LINEAGE_KEY)
        return int(item["generation"]["N"]) if item and "generation" in item else 0

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
        if generation is None:
            try:
                self._put(lease_to_item(lease), conditions.CREATE_IF_ABSENT, {}, "create", lease.shard_id)
            except LeaseConflictError:
                return False
            return True
        check: dict[str, Any] = {
            "TableName": self.workers_table_name,
            "Key": {"workerId": {"S": LINEAGE_KEY}},
            "ConditionExpression": conditions.LINEAGE_NEVER_MOVED,
        }
        if generation:
            check["ConditionExpression"] = conditions.LINEAGE_UNCHANGED
            check["ExpressionAttributeValues"] = {":generation": {"N": str(generation)}}
        put = {
            "TableName": self.table_name,
            "Item": lease_to_item(lease),
            "ConditionExpression": conditions.CREATE_IF_ABSENT,
        }
        # botocore fills ClientRequestToken, so its own retry of a transaction that committed and
        # still failed is answered as the first attempt was, not as a conflict.
        with self._errors("create", lease.shard_id):
            try:
                response = self._client.transact_write_items(
                    TransactItems=[{"Put": put}, {"ConditionCheck": check}], ReturnConsumedCapacity="TOTAL"
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                return self._cancelled_create(exc, lease.shard_id, generation)
        self._count(response)
        return True

    def _cancelled_create(self, exc: ClientError, shard_id: str, generation: int) -> bool:
        """Read a cancelled create's reasons (one per item: the lease put, the lineage check)."""
        reasons = [str(r.get("Code", "None")) for r in exc.response.get("CancellationReasons", [])]
        if reasons[:1] == ["ConditionalCheckFailed"]:
            return False  # the lease exists
        if reasons[1:2] == ["ConditionalCheckFailed"]:
            raise LineageChangedError(shard_id, generation) from exc
        if any(
            code in THROTTLING or code in ("ThrottlingError", "ProvisionedThroughputExceeded")
            for code in reasons
        ):
            with self._lock:
                self.consumed.throttles += 1
            self._metrics.count("LeaseTable", "LeaseTableThrottles", 1)
            raise LeaseStoreThrottledError(f"create {shard_id}: throttled ({', '.join(reasons)})") from exc
        raise LeaseStoreUnavailableError(
            f"create {shard_id}: transaction cancelled ({', '.join(reasons)})"
        ) from exc

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Sequence[str] = ()
    ) -> tuple[HandOverRequest, ...]:
        """A new row is a conditional put; after that, an update (SET the beat, REMOVE the requests
        I have dealt with) that returns the whole row: requests stay on it until I clear them, so a
        lost answer loses none, and a failed condition returns them too (ALL_OLD)."""
        try:
            if expected_counter is None:
                self._put(
                    heartbeat_to_item(beat),
                    conditions.HEARTBEAT_NEW,
                    {},
                    "heartbeat",
                    beat.worker_id,
                    worker_row=True,
                )
                return ()
            names = {f"#c{i}": hand_over_attribute(shard_id) for i, shard_id in enumerate(clear)}
            expression = "SET heartbeatCounter = :counter, heartbeatAt = :at, leaseCount = :count"
            if names:
                expression += " REMOVE " + ", ".join(names)
            request: dict[str, Any] = {
                "TableName": self.workers_table_name,
                "Key": {"workerId": {"S": beat.worker_id}},
                "UpdateExpression": expression,
                "ConditionExpression": conditions.HEARTBEAT_MINE,
                "ExpressionAttributeValues": {
                    ":expected": {"N": str(expected_counter)},
                    ":counter": {"N": str(beat.counter)},
                    ":at": {"N": str(beat.at_wall_millis)},
                    ":count": {"N": str(beat.lease_count)},
                },
                "ReturnValues": "ALL_NEW",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                "ReturnConsumedCapacity": "TOTAL",
            }
            if names:
                request["ExpressionAttributeNames"] = names
            response = self._write(
                "heartbeat", beat.worker_id, lambda: self._client.update_item(**request), worker_row=True
            )
        except LeaseConflictError as exc:
            row = _row_item(exc)
            raise HeartbeatConflictError(
                beat.worker_id, heartbeat_from_item(row) if row else None, hand_over_requests(row)
            ) from exc
        return hand_over_requests(response.get("Attributes"))

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        self._write(
            "delete_heartbeat",
            beat.worker_id,
            lambda: self._client.delete_item(
                TableName=self.workers_table_name,
                Key={"workerId": {"S": beat.worker_id}},
                ConditionExpression=conditions.HEARTBEAT_STALE,
                ExpressionAttributeValues={":seen_counter": {"N": str(beat.counter)}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ReturnConsumedCapacity="TOTAL",
            ),
            worker_row=True,
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
            owner,
            lambda: self._client.update_item(
                TableName=self.workers_table_name,
                Key={"workerId": {"S": owner}},
                UpdateExpression="SET #ask = :ask",
                ConditionExpression=conditions.HAND_OVER_ASK,
                ExpressionAttributeNames={"#ask": hand_over_attribute(request.shard_id)},
                ExpressionAttributeValues={":ask": hand_over_value(request)},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ReturnConsumedCapacity="TOTAL",
            ),
            worker_row=True,
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
        # The generation moves first: a create planned before this delete must fail (conditions.py).
        self._write(
            "lineage",
            LINEAGE_KEY,
            lambda: self._client.update_item(
                TableName=self.workers_table_name,
                Key={"workerId": {"S": LINEAGE_KEY}},
                UpdateExpression="ADD generation :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
                ReturnConsumedCapacity="TOTAL",
            ),
            worker_row=True,
        )
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
        item = first_start_item(worker_id, at_wall_millis)
        try:
            self._put(item, conditions.FIRST_START_ABSENT, {}, "claim-first-start", "", worker_row=True)
        except LeaseConflictError as exc:
            # A retried put whose first attempt committed finds its own marker: still the winner.
            old = exc.__cause__.response.get("Item", {}) if isinstance(exc.__cause__, ClientError) else {}
            return bool(old.get("claimedBy", {}).get("S") == worker_id)
        return True

    # --------------------------------------------------------------------------- plumbing

    def _put(
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
            "TableName": self.workers_table_name if worker_row else self.table_name,
            "Item": item,
            "ConditionExpression": condition,
            "ReturnValues": "ALL_OLD",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            "ReturnConsumedCapacity": "TOTAL",
        }
        if values:
            request["ExpressionAttributeValues"] = values
        response: dict[str, Any] = self._write(
            op, key, lambda: self._client.put_item(**request), worker_row=worker_row
        )
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

    def _write(
        self, op: str, key: str, call: Callable[[], Any], *, lost: bool = False, worker_row: bool = False
    ) -> Any:
        table = self.workers_table_name if worker_row else self.table_name
        try:
            with self._errors(op, key, table=table):
                response = call()
        except ClientError as exc:
            old = exc.response.get("Item")
            current = lease_from_item(old) if old and not worker_row else None
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
    def _errors(self, op: str, key: str, *, table: str | None = None) -> Iterator[None]:
        """Map botocore errors: conflicts stay ClientErrors for :meth:`_write`, the rest are ours."""
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
                with self._lock:
                    self.consumed.throttles += 1
                self._metrics.count("LeaseTable", "LeaseTableThrottles", 1)
                raise LeaseStoreThrottledError(
                    f"{op} {key}: {kind} {table} is throttling ({code}); raise its capacity "
                    "(worker.initial_lease_table_*_capacity or on-demand, see `consumer plan`)"
                ) from exc
            raise LeaseStoreUnavailableError(f"{op} {key} on {kind} {table} failed: {code}: {exc}") from exc
        except BotoCoreError as exc:
            raise LeaseStoreUnavailableError(f"{op} {key}: {kind} {table} unreachable: {exc}") from exc


def _row_item(exc: LeaseConflictError) -> Mapping[str, Any] | None:
    """The item a failed conditional write found (ALL_OLD), or None when there is none."""
    cause = exc.__cause__
    item: Mapping[str, Any] | None = cause.response.get("Item") if isinstance(cause, ClientError) else None
    return item or None
