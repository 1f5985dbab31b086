"""The server side of the simulated DynamoDB: the leases and workers tables as DynamoDB keeps them,
acting on the low-level requests the product's lease store sends (simulation/dynamodb_api.py is
the client that carries them, with faults).

Items are DynamoDB's own form (``{"leaseKey": {"S": ...}, "leaseCounter": {"N": ...}}``), and each
operation follows the API reference for the parameters the store uses: conditional PutItem /
UpdateItem / DeleteItem with ``ReturnValues`` and ``ReturnValuesOnConditionCheckFailure=ALL_OLD``
(the current item in the ConditionalCheckFailedException), GetItem, Scan in pages with
``ExclusiveStartKey`` / ``LastEvaluatedKey``, and TransactWriteItems (Put and ConditionCheck, all or
nothing, CancellationReasons in item order, a ClientRequestToken answering its retry as the first
attempt). Expressions: simulation/ddb_expressions.py.

Every committed change is kept as a version of its table, so an eventually consistent read can be
answered from a past one; a Scan reads each page at its own moment (a scan is not a snapshot in
DynamoDB either). A Scan page ends after ``page_bytes`` of items: DynamoDB's limit is 1 MB, the
model's is drawn smaller so that the store's paging runs in every history (a caller cannot tell:
it follows LastEvaluatedKey whatever the page holds). The leases table's changes also go into the
:class:`History` the checker reads (checkpoints in commit order, owners, finished shards, creates).
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from consumer.leases.items import heartbeat_from_item, lease_from_item
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease
from simulation.ddb_expressions import Bound, ExpressionInvalidError, apply, bind, holds
from simulation.ddb_items import ServerError, UnmodelledRequestError, check_value, invalid, item_size, units
from simulation.kernel import Kernel

Item = dict[str, Any]
MEGABYTE = 1 << 20
TOKEN_LIFE_MILLIS = 600_000  # a ClientRequestToken is honoured for ten minutes


@dataclass
class History:
    """What the leases table saw, for the checker."""

    checkpoints: dict[str, list[tuple[int, ExtendedSequenceNumber]]] = field(default_factory=dict)
    finished_at: dict[str, int] = field(default_factory=dict)
    created: list[tuple[int, str]] = field(default_factory=list)
    fenced_takes: list[tuple[int, str, str]] = field(default_factory=list)  # (time, worker, shard)
    owners: dict[str, list[tuple[int, str | None]]] = field(default_factory=dict)  # shard -> owner changes


class Tables:
    """Every table of the simulated account: name -> hash key attribute (S), items, past versions."""

    def __init__(
        self, kernel: Kernel, keys: Mapping[str, str], leases_table: str, page_bytes: int = MEGABYTE
    ) -> None:
        self.kernel, self.keys, self.leases_table, self.page_bytes = (
            kernel,
            dict(keys),
            leases_table,
            page_bytes,
        )
        self.items: dict[str, dict[str, Item]] = {name: {} for name in keys}
        self._versions: dict[str, list[tuple[int, dict[str, Item]]]] = {
            name: [(kernel.now, {})] for name in keys
        }
        self._times: dict[str, list[int]] = {name: [kernel.now] for name in keys}
        self._order: dict[
            int, tuple[dict[str, Item], list[str]]
        ] = {}  # id(version) -> it, its keys in scan order
        self._tokens: dict[str, tuple[int, Any, dict[str, Any]]] = {}  # token -> (at, request, response)
        self.history = History()
        self.workers_table = next((name for name in keys if name != leases_table), leases_table)

    # ------------------------------------------------------------- the checker's instant view

    def get(self, shard_id: str) -> Lease | None:
        item = self.items[self.leases_table].get(shard_id)
        return lease_from_item(item) if item else None

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        item = self.items[self.workers_table].get(worker_id)
        return heartbeat_from_item(item) if item else None

    # ------------------------------------------------------------------------- requests

    def _table(self, request: Mapping[str, Any]) -> str:
        name = request["TableName"]
        if name not in self.items:
            raise ServerError("ResourceNotFoundException", "Requested resource not found")
        return str(name)

    def _key(self, table: str, key: Mapping[str, Any]) -> str:
        attribute = self.keys[table]
        if set(key) != {attribute} or "S" not in key[attribute]:
            raise invalid("The provided key element does not match the schema")
        text = key[attribute]["S"]
        if not text:
            raise invalid(
                "One or more parameter values are not valid. "
                "The AttributeValue for a key attribute cannot contain an empty string value."
            )
        return str(text)

    def _bound(self, table: str, request: Mapping[str, Any], update: str | None = None) -> Bound:
        try:
            return bind(
                request.get("ConditionExpression"),
                update,
                request.get("ExpressionAttributeNames"),
                request.get("ExpressionAttributeValues"),
                self.keys[table],
            )
        except ExpressionInvalidError as exc:
            raise invalid(str(exc)) from None

    def _commit(self, table: str, key: str, item: Item | None) -> None:
        now = self.kernel.now
        items = dict(self.items[table])
        before = items.get(key)
        if item is None:
            items.pop(key, None)
        else:
            items[key] = item
        self.items[table] = items
        times, versions = self._times[table], self._versions[table]
        if times[-1] == now:
            versions[-1] = (now, items)
        else:
            versions.append((now, items))
            times.append(now)
        if table == self.leases_table and item is not None:
            self._remember(key, before, item, now)

    def _remember(self, key: str, before: Item | None, item: Item, now: int) -> None:
        lease = lease_from_item(item)
        if before is None:
            self.history.created.append((now, key))
        marks = self.history.checkpoints.setdefault(key, [])
        if not marks or marks[-1][1] != lease.checkpoint:
            marks.append((now, lease.checkpoint))
        if lease.finished:
            self.history.finished_at.setdefault(key, now)
        owners = self.history.owners.setdefault(key, [])
        if not owners or owners[-1][1] != lease.owner:
            owners.append((now, lease.owner))

    def view_at(self, table: str, at: int) -> dict[str, Item]:
        """The table as it was at simulated time ``at`` (the newest version not after it)."""
        index = max(0, bisect.bisect_right(self._times[table], at) - 1)
        return self._versions[table][index][1]

    def _failed(self, current: Item | None, request: Mapping[str, Any]) -> ServerError:
        fields: dict[str, Any] = {}
        if current is not None and request.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD":
            fields["Item"] = current
        return ServerError("ConditionalCheckFailedException", "The conditional request failed", **fields)

    @staticmethod
    def _capacity(request: Mapping[str, Any], table: str, units: float) -> dict[str, Any]:
        if request.get("ReturnConsumedCapacity", "NONE") == "NONE":
            return {}
        return {"ConsumedCapacity": {"TableName": table, "CapacityUnits": units}}

    def get_item(self, request: Mapping[str, Any], age: int = 0) -> dict[str, Any]:
        table = self._table(request)
        key = self._key(table, request["Key"])
        consistent = bool(request.get("ConsistentRead"))
        items = self.items[table] if consistent else self.view_at(table, self.kernel.now - age)
        item = items.get(key)
        used = units(item_size(item) if item else 1, 4096) * (1.0 if consistent else 0.5)
        response: dict[str, Any] = self._capacity(request, table, used)
        if item is not None:
            response["Item"] = item
        return response

    def put_item(self, request: Mapping[str, Any]) -> dict[str, Any]:
        table = self._table(request)
        item = dict(request["Item"])
        key = self._key(table, {self.keys[table]: item.get(self.keys[table], {})})
        for name, value in item.items():
            check_value(name, value)
        bound = self._bound(table, request)
        current = self.items[table].get(key)
        if not holds(bound, current):
            raise self._failed(current, request)
        self._commit(table, key, item)
        response = self._capacity(request, table, units(max(item_size(item), item_size(current or {})), 1024))
        if request.get("ReturnValues") == "ALL_OLD" and current is not None:
            response["Attributes"] = current
        elif request.get("ReturnValues", "NONE") not in ("NONE", "ALL_OLD"):
            raise invalid("ReturnValues can only be ALL_OLD or NONE")
        return response

    def update_item(self, request: Mapping[str, Any]) -> dict[str, Any]:
        table = self._table(request)
        key = self._key(table, request["Key"])
        if "UpdateExpression" not in request:
            raise UnmodelledRequestError("an UpdateItem without an UpdateExpression is not modelled")
        bound = self._bound(table, request, request["UpdateExpression"])
        for name, value in bound.values.items():
            check_value(name, value)
        current = self.items[table].get(key)
        if not holds(bound, current):
            raise self._failed(current, request)
        base = current if current is not None else dict(request["Key"])
        try:
            updated = apply(bound, base)
        except ExpressionInvalidError as exc:
            raise invalid(str(exc)) from None
        self._commit(table, key, updated)
        response = self._capacity(
            request, table, units(max(item_size(updated), item_size(current or {})), 1024)
        )
        returned = request.get("ReturnValues", "NONE")
        if returned == "ALL_NEW":
            response["Attributes"] = updated
        elif returned == "ALL_OLD" and current is not None:
            response["Attributes"] = current
        elif returned not in ("NONE", "ALL_OLD"):
            raise UnmodelledRequestError(f"ReturnValues={returned} is not modelled")
        return response

    def delete_item(self, request: Mapping[str, Any]) -> dict[str, Any]:
        table = self._table(request)
        key = self._key(table, request["Key"])
        bound = self._bound(table, request)
        current = self.items[table].get(key)
        if not holds(bound, current):
            raise self._failed(current, request)
        if current is not None:
            self._commit(table, key, None)
        response = self._capacity(request, table, units(item_size(current or {}), 1024))
        if request.get("ReturnValues") == "ALL_OLD" and current is not None:
            response["Attributes"] = current
        return response

    def scan(self, request: Mapping[str, Any], age: int = 0) -> dict[str, Any]:
        """One page, read from the table as it was ``age`` ms ago (always: a Scan here is
        eventually consistent unless it asks otherwise), in hash order, after ExclusiveStartKey."""
        table = self._table(request)
        if request.get("ConsistentRead"):
            age = 0
        for unmodelled in ("Limit", "FilterExpression", "Segment", "ProjectionExpression", "Select"):
            if unmodelled in request:
                raise UnmodelledRequestError(f"Scan with {unmodelled} is not modelled")
        items = self.view_at(table, self.kernel.now - age)
        cached = self._order.get(id(items))
        if cached is None or cached[0] is not items:
            cached = self._order[id(items)] = (items, sorted(items, key=_scan_order))
        order = cached[1]
        start = 0
        if "ExclusiveStartKey" in request:
            after = _scan_order(self._key(table, request["ExclusiveStartKey"]))
            start = bisect.bisect_right([_scan_order(k) for k in order], after)
        page: list[Item] = []
        size = 0
        for key in order[start:]:
            page.append(items[key])
            size += item_size(items[key])
            if size >= self.page_bytes:
                break
        response: dict[str, Any] = {"Items": page, "Count": len(page), "ScannedCount": len(page)}
        response.update(self._capacity(request, table, units(size or 1, 4096) * 0.5))
        if start + len(page) < len(order):
            last = page[-1][self.keys[table]]
            response["LastEvaluatedKey"] = {self.keys[table]: last}
        return response

    def transact_write_items(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """All or nothing: every condition is checked first, then every write commits at once."""
        token = request.get("ClientRequestToken")
        now = self.kernel.now
        if token is not None and token in self._tokens:
            at, first, response = self._tokens[token]
            if now - at < TOKEN_LIFE_MILLIS:
                if first != request:
                    raise ServerError(
                        "IdempotentParameterMismatchException",
                        "ClientRequestToken reused with other parameters",
                    )
                return response
        entries = request["TransactItems"]
        plans: list[tuple[str, str, Item | None, bool]] = []  # (table, key, new item, writes)
        reasons: list[dict[str, Any]] = []
        failed = False
        capacity: dict[str, float] = {}
        for entry in entries:
            ((kind, body),) = entry.items()
            table = self._table(body)
            if kind == "Put":
                item = dict(body["Item"])
                key = self._key(table, {self.keys[table]: item.get(self.keys[table], {})})
                for name, value in item.items():
                    check_value(name, value)
            elif kind == "ConditionCheck":
                key, item = self._key(table, body["Key"]), None
                if "ConditionExpression" not in body:
                    raise invalid("ConditionCheck needs a ConditionExpression")
            else:
                raise UnmodelledRequestError(f"TransactWriteItems {kind} is not modelled")
            if any(p[0] == table and p[1] == key for p in plans):
                raise invalid("Transaction request cannot include multiple operations on one item")
            bound = self._bound(table, body)
            current = self.items[table].get(key)
            if holds(bound, current):
                reasons.append({"Code": "None"})
            else:
                failed = True
                reason: dict[str, Any] = {
                    "Code": "ConditionalCheckFailed",
                    "Message": "The conditional request failed",
                }
                if current is not None and body.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD":
                    reason["Item"] = current
                reasons.append(reason)
            plans.append((table, key, item, kind == "Put"))
            capacity[table] = capacity.get(table, 0.0) + 2.0 * units(item_size(item or current or {}), 1024)
        if failed:
            codes = ", ".join(r["Code"] for r in reasons)
            raise ServerError(
                "TransactionCanceledException",
                f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
                CancellationReasons=reasons,
            )
        for table, key, item, writes in plans:
            if writes:
                self._commit(table, key, item)
        answer: dict[str, Any] = {}
        if request.get("ReturnConsumedCapacity", "NONE") != "NONE":
            # A list, one entry per table, unlike every single-item operation's one map.
            answer["ConsumedCapacity"] = [{"TableName": t, "CapacityUnits": u} for t, u in capacity.items()]
        if token is not None:
            self._tokens[token] = (now, request, answer)
        return answer


def _scan_order(key: str) -> tuple[int, str]:
    """DynamoDB returns a Scan in the order of its partition keys' hashes, not of the keys."""
    return zlib.crc32(key.encode()), key
