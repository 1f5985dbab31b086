"""The lease store's operations on DynamoDB: each one conditional write (or read) of a lease or worker row.

Every mutation is a conditional write from :mod:`consumer.leases.conditions` and asks for
``ReturnValuesOnConditionCheckFailure=ALL_OLD``, so a lost race tells us the current item without a
second read. How a request is made -- which table, how botocore errors map to lease errors, what it
cost -- lives in :mod:`consumer.leases.table_requests`, so this module reads as the store's protocol alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from consumer.leases import conditions
from consumer.leases.errors import (
    CheckpointRefusedError,
    HeartbeatConflictError,
    LeaseConflictError,
    LeaseStoreThrottledError,
    LeaseStoreUnavailableError,
    LineageChangedError,
)
from consumer.leases.items import (
    first_start_item,
    hand_over_attribute,
    hand_over_requests,
    hand_over_value,
    heartbeat_from_item,
    heartbeat_sets,
    heartbeat_to_item,
    lease_from_item,
    lease_to_item,
    snapshot_from_items,
)
from consumer.leases.model import (
    LINEAGE_KEY,
    ExtendedSequenceNumber,
    HandOverRequest,
    Heartbeat,
    Lease,
    Snapshot,
)
from consumer.leases.table_requests import TRANSACTION_THROTTLING, ConsumedCapacity, TableRequests
from consumer.telemetry.metrics import Metrics
from ground.positions import SHARD_END
from ground.settings import WorkerSettings


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
        self._tables = TableRequests(
            client, table_name, workers_table_name=workers_table_name, metrics=metrics
        )
        self.table_name = self._tables.table_name
        self.workers_table_name = self._tables.workers_table_name

    @property
    def consumed(self) -> ConsumedCapacity:
        """Capacity every request so far consumed, and how many were throttled (benchmarks read it)."""
        return self._tables.consumed

    def ensure_table(
        self, settings: WorkerSettings, *, create: bool = True, timeout_seconds: float = 120
    ) -> None:
        """Create both tables when missing, wait until ACTIVE, and check their key schemas."""
        self._tables.ensure(settings, create=create, timeout_seconds=timeout_seconds)

    # ------------------------------------------------------------------------------ reads

    def scan(self) -> Snapshot:
        """Both tables, leases first (eventually consistent, as every Scan here)."""
        return snapshot_from_items(
            self._tables.scan_all(self.table_name), self._tables.scan_all(self.workers_table_name)
        )

    def scan_workers(self) -> Snapshot:
        return snapshot_from_items((), self._tables.scan_all(self.workers_table_name))

    def get(self, shard_id: str) -> Lease | None:
        item = self._tables.get_item(self.table_name, {"leaseKey": {"S": shard_id}}, shard_id)
        return lease_from_item(item) if item else None

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        item = self._tables.get_item(self.workers_table_name, {"workerId": {"S": worker_id}}, worker_id)
        return heartbeat_from_item(item) if item else None

    # ---------------------------------------------------------------------------- writes

    def lineage_generation(self) -> int:
        item = self._tables.get_item(self.workers_table_name, {"workerId": {"S": LINEAGE_KEY}}, LINEAGE_KEY)
        return int(item["generation"]["N"]) if item and "generation" in item else 0

    def create_if_absent(self, lease: Lease, generation: int | None = None) -> bool:
        if generation is None:
            try:
                self._tables.put(
                    lease_to_item(lease), conditions.CREATE_IF_ABSENT, {}, "create", lease.shard_id
                )
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
        with self._tables.errors("create", lease.shard_id):
            try:
                response = self._tables.client.transact_write_items(
                    TransactItems=[{"Put": put}, {"ConditionCheck": check}], ReturnConsumedCapacity="TOTAL"
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                return self._cancelled_create(exc, lease.shard_id, generation)
        self._tables.count(response)
        return True

    def _cancelled_create(self, exc: ClientError, shard_id: str, generation: int) -> bool:
        """Read a cancelled create's reasons (one per item: the lease put, the lineage check)."""
        reasons = [str(r.get("Code", "None")) for r in exc.response.get("CancellationReasons", [])]
        if reasons[:1] == ["ConditionalCheckFailed"]:
            return False  # the lease exists
        if reasons[1:2] == ["ConditionalCheckFailed"]:
            raise LineageChangedError(shard_id, generation) from exc
        if any(code in TRANSACTION_THROTTLING for code in reasons):
            self._tables.throttled()
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
                self._tables.put(
                    heartbeat_to_item(beat),
                    conditions.HEARTBEAT_NEW,
                    {},
                    "heartbeat",
                    beat.worker_id,
                    worker_row=True,
                )
                return ()
            names = {f"#c{i}": hand_over_attribute(shard_id) for i, shard_id in enumerate(clear)}
            sets, values = heartbeat_sets(beat)
            expression = "SET " + ", ".join(sets)
            removed = list(names) if beat.stopping else [*names, "stopping"]
            if removed:
                expression += " REMOVE " + ", ".join(removed)
            request: dict[str, Any] = {
                "TableName": self.workers_table_name,
                "Key": {"workerId": {"S": beat.worker_id}},
                "UpdateExpression": expression,
                "ConditionExpression": conditions.HEARTBEAT_MINE,
                "ExpressionAttributeValues": {":expected": {"N": str(expected_counter)}, **values},
                "ReturnValues": "ALL_NEW",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                "ReturnConsumedCapacity": "TOTAL",
            }
            if names:
                request["ExpressionAttributeNames"] = names
            response = self._tables.write(
                "heartbeat",
                beat.worker_id,
                lambda: self._tables.client.update_item(**request),
                worker_row=True,
            )
        except LeaseConflictError as exc:
            row = _row_item(exc)
            raise HeartbeatConflictError(
                beat.worker_id, heartbeat_from_item(row) if row else None, hand_over_requests(row)
            ) from exc
        return hand_over_requests(response.get("Attributes"))

    def delete_heartbeat(self, beat: Heartbeat) -> None:
        self._tables.write(
            "delete_heartbeat",
            beat.worker_id,
            lambda: self._tables.client.delete_item(
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
        self._tables.write(
            "ask_hand_over",
            owner,
            lambda: self._tables.client.update_item(
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
        self._tables.write(
            "lineage",
            LINEAGE_KEY,
            lambda: self._tables.client.update_item(
                TableName=self.workers_table_name,
                Key={"workerId": {"S": LINEAGE_KEY}},
                UpdateExpression="ADD generation :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
                ReturnConsumedCapacity="TOTAL",
            ),
            worker_row=True,
        )
        self._tables.write(
            "delete",
            lease.shard_id,
            lambda: self._tables.client.delete_item(
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
            self._tables.put(
                item, conditions.FIRST_START_ABSENT, {}, "claim-first-start", "", worker_row=True
            )
        except LeaseConflictError as exc:
            # A retried put whose first attempt committed finds its own marker: still the winner.
            old = exc.__cause__.response.get("Item", {}) if isinstance(exc.__cause__, ClientError) else {}
            return bool(old.get("claimedBy", {}).get("S") == worker_id)
        return True

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
        """A conditional update of an existing lease, answered with the lease as written (ALL_NEW)."""
        response = self._tables.write(
            op,
            shard_id,
            lambda: self._tables.client.update_item(
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


def _row_item(exc: LeaseConflictError) -> Mapping[str, Any] | None:
    """The item a failed conditional write found (ALL_OLD), or None when there is none."""
    cause = exc.__cause__
    item: Mapping[str, Any] | None = cause.response.get("Item") if isinstance(cause, ClientError) else None
    return item or None
