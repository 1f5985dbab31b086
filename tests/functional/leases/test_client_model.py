"""The simulator's DynamoDB (simulation/dynamodb_api.py, ddb_tables.py) against moto's, request by
request: the product's lease store drives moto's DynamoDB through a seeded sequence of its operations
-- races, stale views, conflicts, hand-overs, cleanups -- every request it sends is recorded with
moto's answer, and the same requests are then sent to the simulator's client. Answers (items,
attributes, counts) and errors (class, code, the ALL_OLD item, the cancellation reasons) must be the
same. Where moto and DynamoDB's documentation disagree, the test says so and holds the model to the
documentation."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ParamValidationError
from moto import mock_aws

from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.errors import LeaseError
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease
from consumer.runtime.clients import lease_client_timeouts
from ground.settings import WorkerSettings
from simulation.ddb_tables import Tables
from simulation.dynamodb_api import FaultyDynamoDB
from simulation.faults import Faults
from simulation.kernel import Group, Kernel

Recorded = tuple[str, dict[str, Any], Any]
DATA_PLANE = ("get_item", "put_item", "update_item", "delete_item", "scan", "transact_write_items")


class Recording:
    """A moto client that keeps every data-plane request the store sends, with moto's answer."""

    def __init__(self, client: Any) -> None:
        self.client, self.requests = client, []  # type: ignore[var-annotated]

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if name not in DATA_PLANE:
            return method

        def call(**request: Any) -> Any:
            try:
                response = method(**request)
            except ClientError as exc:
                self.requests.append((name, request, outcome_of_error(exc)))
                raise
            self.requests.append((name, request, outcome_of(response)))
            return response

        return call


def outcome_of(response: dict[str, Any]) -> dict[str, Any]:
    found = {
        k: v
        for k, v in response.items()
        if k not in ("ResponseMetadata", "ConsumedCapacity", "ItemCollectionMetrics")
    }
    if "Items" in found:
        found["Items"] = sorted(found["Items"], key=repr)  # DynamoDB's order is the hash's
    return found


def outcome_of_error(exc: ClientError) -> dict[str, Any]:
    found: dict[str, Any] = {"error": exc.response["Error"]["Code"], "class": type(exc).__name__}
    if found["error"] == "ValidationException":  # the gist of the message: moto words it a little apart
        found["message"] = exc.response["Error"]["Message"].rsplit(": ", 2)[-2:]
    if "Item" in exc.response:
        found["Item"] = exc.response["Item"]
    if "CancellationReasons" in exc.response:
        found["reasons"] = [r.get("Code") for r in exc.response["CancellationReasons"]]
    return found


def replay(requests: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Send ``requests`` to the simulator's client (no faults), one after the other, on simulated time."""
    kernel = Kernel(0)
    tables = Tables(kernel, {"leases": "leaseKey", "leases-workers": "workerId"}, "leases")
    client = FaultyDynamoDB(
        tables,
        kernel,
        Faults(),
        random.Random(0),
        config=lease_client_timeouts(10_000),
        failover_millis=10_000,
    )
    answers: list[Any] = []

    def body() -> None:
        for name, request in requests:
            try:
                answers.append(outcome_of(getattr(client, name)(**request)))
            except ClientError as exc:
                answers.append(outcome_of_error(exc))

    kernel.spawn("replay", Group("test"), body)
    kernel.run_until(kernel.now + 10**9)
    kernel.shutdown()
    assert not kernel.errors, kernel.errors
    return answers


@pytest.fixture
def moto_store() -> Iterator[tuple[DynamoDBLeaseStore, Recording]]:
    with mock_aws():
        recording = Recording(boto3.client("dynamodb", region_name="us-east-1"))
        store = DynamoDBLeaseStore(recording, "leases")
        store.ensure_table(WorkerSettings())
        yield store, recording


def operations(store: DynamoDBLeaseStore, rng: random.Random, steps: int) -> None:
    """A seeded sequence of the store's operations by three workers with views that go stale."""
    workers, shards = ("a", "b", "c"), [f"shardId-{i}" for i in range(5)]
    views: dict[str, Lease] = {}
    beats: dict[str, Heartbeat] = {}
    generations: list[int] = [0]
    position = iter(range(100, 10**9, 37))
    actions: list[Callable[[], Any]] = []

    def seen(shard: str) -> Lease:
        return views.get(shard) or Lease(shard, None, 0, ExtendedSequenceNumber("TRIM_HORIZON"))

    def keep(lease: Any) -> None:
        if isinstance(lease, Lease):
            views[lease.shard_id] = lease

    def create() -> None:
        shard = rng.choice(shards)
        parents = frozenset({shards[shards.index(shard) - 1]}) if shard != shards[0] else frozenset()
        generation = rng.choice((None, generations[-1], generations[0]))
        store.create_if_absent(
            Lease(shard, None, 0, ExtendedSequenceNumber("TRIM_HORIZON"), parent_shard_ids=parents),
            generation,
        )

    def scan() -> None:
        snapshot = store.scan()
        for lease in snapshot.leases.values():
            if rng.random() < 0.7:
                keep(lease)
        for beat in snapshot.heartbeats.values():
            beats.setdefault(beat.worker_id, beat)

    def heartbeat() -> None:
        worker = rng.choice(workers)
        last = beats.get(worker)
        counter = (last.counter + 1) if last else 1
        expected = None if last is None or rng.random() < 0.1 else last.counter - rng.choice((0, 0, 0, 1))
        beat = Heartbeat(
            worker,
            counter,
            1_000 * counter,
            rng.randint(0, 4),
            stopping=rng.random() < 0.1,
            new_leases_at=rng.choice((0, 5)),
        )
        clear = rng.sample(shards, rng.randint(0, 2))
        store.heartbeat(beat, expected, clear)
        beats[worker] = beat

    def checkpoint() -> None:
        lease = seen(rng.choice(shards))
        mark = (
            ExtendedSequenceNumber("SHARD_END")
            if rng.random() < 0.15
            else ExtendedSequenceNumber(str(next(position)))
        )
        keep(store.checkpoint(lease, mark))

    def steal() -> None:
        lease, thief = seen(rng.choice(shards)), rng.choice(workers)
        if lease.owner:
            store.ask_hand_over(lease.owner, HandOverRequest(lease.shard_id, thief, rng.randint(1, 10**6)))
            keep(store.request_steal(lease, thief, rng.randint(1, 10**6)))

    def delete_finished() -> None:
        store.delete_finished(seen(rng.choice(shards)))
        generations.append(store.lineage_generation())

    actions += [create, create, scan, scan, heartbeat, heartbeat, checkpoint, steal, delete_finished]
    actions += [lambda: keep(store.take(seen(rng.choice(shards)), rng.choice(workers)))] * 3
    actions += [lambda: keep(store.release(seen(rng.choice(shards)), rng.choice((None, *workers))))]
    actions += [lambda: keep(store.get(rng.choice(shards))), lambda: store.get_heartbeat(rng.choice(workers))]
    actions += [lambda: store.delete_heartbeat(beats.get(rng.choice(workers)) or Heartbeat("a", 1, 1))]
    actions += [lambda: store.claim_first_start(rng.choice(workers), 5), store.scan_workers]
    for _ in range(steps):
        with contextlib.suppress(LeaseError):
            rng.choice(actions)()


@pytest.mark.parametrize("seed", range(6))
def test_every_request_the_store_sends_is_answered_as_moto_answers_it(
    moto_store: tuple[DynamoDBLeaseStore, Recording], seed: int
) -> None:
    store, recording = moto_store
    operations(store, random.Random(seed), 150)
    sent = recording.requests
    kinds = {name for name, _, _ in sent}
    assert kinds == set(DATA_PLANE), f"the sequence never sent {set(DATA_PLANE) - kinds}"
    assert any("error" in answer for _, _, answer in sent), "no conflict: the sequence shows little"
    answers = replay([(name, request) for name, request, _ in sent])
    for (name, request, expected), answer in zip(sent, answers, strict=True):
        assert answer == expected, f"{name} {request}"


def one(requests: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """The answers of moto and of the simulator to the same requests (on fresh tables)."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        DynamoDBLeaseStore(client, "leases").ensure_table(WorkerSettings())
        found = []
        for name, request in requests:
            try:
                found.append(outcome_of(getattr(client, name)(**request)))
            except ClientError as exc:
                found.append(outcome_of_error(exc))
    return found, replay(requests)


ROW = {"workerId": {"S": "a"}, "n": {"N": "1"}}


@pytest.mark.parametrize(
    "request_",
    [
        {"ConditionExpression": "unset = :v", "ExpressionAttributeValues": {":v": {"N": "1"}}},
        {"ConditionExpression": "n <> :v", "ExpressionAttributeValues": {":v": {"S": "1"}}},  # types differ
        {"ConditionExpression": "n = :v", "ExpressionAttributeValues": {":v": {"N": "1.0"}}},  # by value
        {"ConditionExpression": "counter = :v", "ExpressionAttributeValues": {":v": {"N": "1"}}},  # reserved
        {"ConditionExpression": "n = :v", "ExpressionAttributeValues": {":v": {"N": "2"}}},
    ],
)
def test_conditions_and_their_validation_match_moto(request_: dict[str, Any]) -> None:
    put = {"TableName": "leases-workers", "Item": ROW}
    moto, model = one(
        [
            ("put_item", put),
            ("put_item", {**put, **request_, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}),
        ]
    )
    assert model == moto


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            {
                "ConditionExpression": "n = :v",
                "ExpressionAttributeValues": {":v": {"N": "1"}, ":w": {"N": "2"}},
            },
            "Value provided in ExpressionAttributeValues unused in expressions: keys: {:w}",
        ),
        (
            {"ConditionExpression": "#n = :v", "ExpressionAttributeValues": {":v": {"N": "1"}}},
            "An expression attribute name used in the document path is not defined; attribute name: #n",
        ),
    ],
)
def test_placeholders_are_checked_on_every_operation_as_dynamodb_does(
    request_: dict[str, Any], message: str
) -> None:
    """DynamoDB refuses an unused value or an undefined name on any operation; moto checks the
    first on UpdateItem only and fails on the second with a KeyError, so the model is held to
    DynamoDB's messages (as moto gives them for UpdateItem) here."""
    put = {"TableName": "leases-workers", "Item": ROW}
    model = replay([("put_item", put), ("put_item", {**put, **request_})])
    assert model[1]["error"] == "ValidationException"
    assert model[1]["message"] == message.rsplit(": ", 2)[-2:]


@pytest.mark.parametrize(
    "expression",
    [
        "SET n = n + :one REMOVE n",  # two paths overlap
        "SET workerId = :one",  # the key
        "SET m = unset + :one",  # no such attribute
        "ADD n :one",
        "SET n = :one, m = n + :one",  # every right-hand side reads the item as it was
    ],
)
def test_updates_and_their_validation_match_moto(expression: str) -> None:
    update = {
        "TableName": "leases-workers",
        "Key": {"workerId": {"S": "a"}},
        "UpdateExpression": expression,
        "ExpressionAttributeValues": {":one": {"N": "5"}},
        "ReturnValues": "ALL_NEW",
    }
    moto, model = one([("put_item", {"TableName": "leases-workers", "Item": ROW}), ("update_item", update)])
    assert model == moto


def test_not_equal_on_a_missing_attribute_is_true_as_dynamodb_documents() -> None:
    """DynamoDB: a missing attribute equals nothing, so ``<>`` holds (``=`` does not)."""
    condition = {"ConditionExpression": "unset <> :v", "ExpressionAttributeValues": {":v": {"N": "1"}}}
    put = {"TableName": "leases-workers", "Item": ROW}
    _, model = one([("put_item", put), ("put_item", {**put, **condition})])
    assert "error" not in model[1]


def test_a_request_botocore_refuses_is_refused_by_the_model_too() -> None:
    kernel = Kernel(0)
    tables = Tables(kernel, {"leases": "leaseKey"}, "leases")
    client = FaultyDynamoDB(
        tables,
        kernel,
        Faults(),
        random.Random(0),
        config=lease_client_timeouts(10_000),
        failover_millis=10_000,
    )
    with pytest.raises(ParamValidationError):
        client.put_item(TableName="leases", Item={"leaseKey": {"S": "x"}}, ReturnValue="ALL_OLD")


def test_a_transaction_answers_consumed_capacity_as_a_list_as_botocore_models_it() -> None:
    """TransactWriteItems' ConsumedCapacity is a list in botocore's service model (one entry per
    table); moto answers an empty one, so only the model shows the store what DynamoDB sends."""
    kernel = Kernel(0)
    tables = Tables(kernel, {"leases": "leaseKey"}, "leases")
    client = FaultyDynamoDB(
        tables,
        kernel,
        Faults(),
        random.Random(0),
        config=lease_client_timeouts(10_000),
        failover_millis=10_000,
    )
    shape = client.model.operation_model("TransactWriteItems").output_shape.members["ConsumedCapacity"]
    answers: list[Any] = []

    def body() -> None:
        put = {"Put": {"TableName": "leases", "Item": {"leaseKey": {"S": "x"}}}}
        answers.append(client.transact_write_items(TransactItems=[put], ReturnConsumedCapacity="TOTAL"))

    kernel.spawn("t", Group("t"), body)
    kernel.run_until(kernel.now + 1_000)
    kernel.shutdown()
    assert shape.type_name == "list"
    assert answers[0]["ConsumedCapacity"] == [{"TableName": "leases", "CapacityUnits": 2.0}]
