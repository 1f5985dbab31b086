"""The leases table: creation, adoption of a Java KCL table, and bad tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.errors import LeaseStoreUnavailableError, LeaseTableMissingError, LeaseTableSchemaError
from consumer.leases.model import ExtendedSequenceNumber, Lease
from ground.clock import FakeClock
from ground.settings import WorkerSettings


@pytest.fixture
def client() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


def test_created_with_configured_capacity(client: Any) -> None:
    settings = WorkerSettings(initial_lease_table_read_capacity=40, initial_lease_table_write_capacity=25)
    DynamoDBLeaseStore(client, "app").ensure_table(settings)
    table = client.describe_table(TableName="app")["Table"]
    assert table["KeySchema"] == [{"AttributeName": "leaseKey", "KeyType": "HASH"}]
    assert table["ProvisionedThroughput"]["ReadCapacityUnits"] == 40
    assert table["ProvisionedThroughput"]["WriteCapacityUnits"] == 25
    # The workers table beside it is on-demand whatever the leases table is (as the CDK stack makes it).
    workers = client.describe_table(TableName="app-workers")["Table"]
    assert workers["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_on_demand(client: Any) -> None:
    DynamoDBLeaseStore(client, "app").ensure_table(WorkerSettings(lease_table_billing_mode="PAY_PER_REQUEST"))
    assert (
        client.describe_table(TableName="app")["Table"]["BillingModeSummary"]["BillingMode"]
        == "PAY_PER_REQUEST"
    )


def test_existing_table_created_elsewhere_is_accepted(client: Any) -> None:
    client.create_table(
        TableName="from-cdk",
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(LeaseTableMissingError, match="workers table from-cdk-workers does not exist"):
        DynamoDBLeaseStore(client, "from-cdk").ensure_table(WorkerSettings(), create=False)
    client.create_table(
        TableName="from-cdk-workers",
        KeySchema=[{"AttributeName": "workerId", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "workerId", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    DynamoDBLeaseStore(client, "from-cdk").ensure_table(WorkerSettings(), create=False)


def test_wrong_key_schema_is_a_clear_error(client: Any) -> None:
    client.create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(LeaseTableSchemaError, match=r"needs hash key leaseKey \(S\).*lease_table_name"):
        DynamoDBLeaseStore(client, "orders").ensure_table(WorkerSettings())


def test_java_kcl_table_is_adopted_with_its_checkpoints(client: Any) -> None:
    """A table written by the Java KCL (no heartbeat rows): its owner is judged by KCL's rule, and once
    expired the lease is taken with its checkpoint intact."""
    store = DynamoDBLeaseStore(client, "kcl-app")
    store.ensure_table(WorkerSettings())
    for i, checkpoint in enumerate(
        ["49590338271490256608559692538361571095921575989136588898", "SHARD_END", "TRIM_HORIZON"]
    ):
        client.put_item(
            TableName="kcl-app",
            Item={
                "leaseKey": {"S": f"shardId-0000000{i}"},
                "leaseOwner": {"S": "ip-10-0-0-7.ec2.internal:4f1d"},
                "leaseCounter": {"N": str(100 + i)},
                "checkpoint": {"S": checkpoint},
                "checkpointSubSequenceNumber": {"N": "0"},
                "ownerSwitchesSinceCheckpoint": {"N": "0"},
                **({"parentShardId": {"SS": ["shardId-00000001"]}} if i == 2 else {}),
            },
        )
    clock = FakeClock()
    coordinator = LeaseCoordinator(store, "py-worker", WorkerSettings(failover_time_millis=10_000), clock)
    coordinator.heartbeat_once()
    coordinator.take_round()
    assert coordinator.held() == []  # the Java worker might still be alive: watch its counters first
    clock.advance(10_001)
    coordinator.heartbeat_once()
    coordinator.take_round()
    held = {lease.shard_id: lease for lease in coordinator.held()}
    assert set(held) == {"shardId-00000000", "shardId-00000002"}  # the finished one needs no owner
    assert (
        held["shardId-00000000"].checkpoint.sequence
        == "49590338271490256608559692538361571095921575989136588898"
    )
    assert held["shardId-00000000"].counter == 101


def test_throttled_table_is_an_unavailable_error_with_the_fix() -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    stub = Stubber(client)
    stub.add_client_error("scan", "ProvisionedThroughputExceededException", "Rate exceeded", 400)
    with stub, pytest.raises(LeaseStoreUnavailableError, match=r"throttling.*initial_lease_table"):
        DynamoDBLeaseStore(client, "app").scan()


def test_unreachable_table_backs_off_without_losing_leases() -> None:
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    client.meta.config.retries = {"max_attempts": 1}
    store = DynamoDBLeaseStore(client, "app")
    clock = FakeClock()
    coordinator = LeaseCoordinator(store, "w", WorkerSettings(), clock)
    assert coordinator.heartbeat_once() is False
    assert coordinator.take_round() is None
    assert coordinator.fenced()  # never heartbeated: may not process anything


class RecordingMetrics:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        self.counts[name] = value

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        key = f"{name_prefix}.{'Success' if success else 'Failure'}"
        self.counts[key] = self.counts.get(key, 0) + 1


def test_throttling_is_counted_as_a_metric_and_the_taker_backs_off() -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    metrics = RecordingMetrics()
    store = DynamoDBLeaseStore(client, "app", metrics=metrics)
    coordinator = LeaseCoordinator(store, "w", WorkerSettings(), FakeClock(), metrics=metrics)
    stub = Stubber(client)
    stub.add_client_error("scan", "ProvisionedThroughputExceededException", "Rate exceeded", 400)
    stub.add_client_error("scan", "ThrottlingException", "Rate exceeded", 400)
    with stub:
        assert coordinator.take_round() is None
        assert coordinator.take_round() is None
    assert metrics.counts["LeaseTableThrottles"] == 2 and store.consumed.throttles == 2
    assert metrics.counts["ListLeases.Failure"] == 2
    # Half as often as usual (a round per interval, not two), and never slower: the leases are
    # taken up within one interval of the table answering again.
    assert coordinator.taker_wait_millis() == WorkerSettings().taker_interval_millis


def test_failed_table_requests_are_counted_apart_from_throttles() -> None:
    """What the lease-tables-failing alarm reads: refusals (HTTP 5xx) and unreachable tables, not
    throttles (leases-table-throttled reads DynamoDB's own throttle metrics)."""
    client = boto3.client("dynamodb", region_name="us-east-1")
    metrics = RecordingMetrics()
    store = DynamoDBLeaseStore(client, "app", metrics=metrics)
    coordinator = LeaseCoordinator(store, "w", WorkerSettings(), FakeClock(), metrics=metrics)
    stub = Stubber(client)
    stub.add_client_error("scan", "InternalServerError", "Internal server error", 500)
    stub.add_client_error("scan", "ProvisionedThroughputExceededException", "Rate exceeded", 400)
    with stub:
        assert coordinator.take_round() is None
        assert coordinator.take_round() is None
    assert metrics.counts["LeaseTableErrors"] == 1 and metrics.counts["LeaseTableThrottles"] == 1


def test_consumed_capacity_is_counted_per_request(client: Any) -> None:
    metrics = RecordingMetrics()
    store = DynamoDBLeaseStore(client, "app", metrics=metrics)
    store.ensure_table(WorkerSettings())
    store.create_if_absent(Lease("shardId-1", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    store.scan()
    store.get("shardId-1")
    assert store.consumed.requests == 4 and store.consumed.scans == 2  # a scan reads both tables
    assert store.consumed.write_units >= 1 and store.consumed.read_units >= 1
    assert metrics.counts["LeaseTableConsumedWriteCapacity"] == store.consumed.write_units
    assert metrics.counts["LeaseTableConsumedReadCapacity"] == store.consumed.read_units


def test_the_leases_table_holds_kcl_leases_only_while_workers_run_and_after_a_kill(client: Any) -> None:
    """Heartbeats and the first-start marker live in the workers table: every item of the leases table
    parses by the Java KCL's rules, and the Scan the 2N alarm counts returns leases only."""
    from tests.kcl_format import kcl_problems

    store = DynamoDBLeaseStore(client, "app")
    store.ensure_table(WorkerSettings())
    shards = {f"shardId-0000000{i}" for i in range(3)}
    for shard in sorted(shards):
        store.create_if_absent(Lease(shard, None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    clock = FakeClock()
    workers = [LeaseCoordinator(store, name, WorkerSettings(), clock) for name in ("a", "b")]
    assert store.claim_first_start("a", clock.wall_millis())
    for worker in workers:
        worker.heartbeat_once()
        worker.take_round()
    workers[0].checkpoint(workers[0].held()[0].shard_id, "1234")
    # b is killed: nothing is released, its heartbeat row stays behind
    scan = client.scan(TableName="app")
    assert scan["Count"] == len(shards)  # what the scale-out alarm's ReturnedItemCount counts
    assert [p for item in scan["Items"] for p in kcl_problems(item, shards)] == []
    workers_rows = client.scan(TableName="app-workers")["Items"]
    assert {row["workerId"]["S"] for row in workers_rows} == {"a", "b", "__app__#first-start"}


def test_a_transaction_s_consumed_capacity_is_a_list_and_is_added_up() -> None:
    """TransactWriteItems answers ConsumedCapacity as a list (one entry per table), every other
    operation as one map. Read as a map, the list raised AttributeError after every lineage-checked
    create and ended shard sync; moto answers an empty list, so only the DynamoDB API model in the
    simulator (branch simdb) saw it."""
    from consumer.leases.table_requests import TableRequests

    requests = TableRequests(object(), "app-leases")
    transaction = {
        "ConsumedCapacity": [
            {"TableName": "app-leases", "CapacityUnits": 4.0, "WriteCapacityUnits": 4.0},
            {"TableName": "app-leases-workers", "CapacityUnits": 2.0, "ReadCapacityUnits": 2.0},
        ]
    }
    requests.count(transaction)
    requests.count({"ConsumedCapacity": {"TableName": "app-leases", "CapacityUnits": 1.0}})  # a put
    requests.count({"ConsumedCapacity": {"CapacityUnits": 0.5}, "Items": []}, scan=True)
    assert requests.consumed.write_units == 5.0 and requests.consumed.read_units == 2.5
    assert requests.consumed.requests == 3
