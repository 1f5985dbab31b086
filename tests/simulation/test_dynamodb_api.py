"""The DynamoDB client model's own rules, on simulated time: botocore's standard retries under the
leases client's config (consumer.runtime.clients.lease_client_timeouts), read timeouts, a process
paused with a request in flight, writes that commit and still fail."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from consumer.runtime.clients import lease_client_timeouts
from simulation.ddb_tables import Tables
from simulation.dynamodb_api import FaultyDynamoDB
from simulation.faults import Faults
from simulation.kernel import Group, Kernel

FAILOVER = 10_000
PUT = {"TableName": "t", "Item": {"k": {"S": "a"}}, "ConditionExpression": "attribute_not_exists(k)"}


def run(
    faults: Faults, body: Callable[[FaultyDynamoDB, Kernel], Any], seed: int = 1
) -> tuple[Any, Tables, int]:
    """``body`` on one simulated thread with a client on a fresh table; (its result or error, the
    table, the simulated ms it took)."""
    kernel = Kernel(1)
    tables = Tables(kernel, {"leases": "leaseKey", "t": "k"}, "leases")
    config = lease_client_timeouts(FAILOVER)
    client = FaultyDynamoDB(
        tables, kernel, faults, random.Random(seed), config=config, failover_millis=FAILOVER
    )
    found: list[Any] = []
    start = kernel.now

    def main() -> None:
        try:
            found.append(body(client, kernel))
        except Exception as exc:  # the answer under test
            found.append(exc)
        found.append(kernel.now - start)

    kernel.spawn("t", Group("w"), main)
    kernel.run_until(kernel.now + 10 * FAILOVER)
    kernel.shutdown()
    return found[0], tables, found[1]


def test_a_throttled_request_is_tried_four_times_with_backoff_then_raised() -> None:
    error, tables, took = run(Faults(throttle_rate=1.0), lambda c, _: c.put_item(**PUT))
    assert isinstance(error, ClientError)
    assert error.response["Error"]["Code"] in (
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
    )
    assert error.response["ResponseMetadata"]["RetryAttempts"] == 3
    assert 0 < took <= 1_000 + 2_000 + 4_000  # rand * (1 + 2 + 4) s of backoff
    assert tables.items["t"] == {}


def test_a_request_queued_past_the_read_timeout_is_given_up_and_never_acted_on() -> None:
    """The first attempt would reach the server after 5 s; its client gives it up at 2 s and sends
    it again, and only the second attempt is ever acted on."""
    from simulation.directed import Directed

    def body(client: FaultyDynamoDB, kernel: Kernel) -> Any:
        client.begin(Directed("w", "put", 0, commit_delay_millis=5_000))
        return client.put_item(**PUT)

    answer, tables, took = run(Faults(), body)
    assert answer["ResponseMetadata"]["RetryAttempts"] == 1
    assert 2_000 <= took <= 2_000 + 25
    assert tables._times["t"][1:] == [1_000_000 + took]  # one commit, the retry's


def test_every_attempt_timing_out_ends_within_four_read_timeouts() -> None:
    slow = Faults(latency_millis=1, tail_probability=1.0, tail_millis=FAILOVER)
    error, _, took = run(slow, lambda c, _: c.put_item(**PUT), seed=3)
    assert isinstance(error, ReadTimeoutError)
    assert 4 * 2_000 <= took <= 4 * 2_000 + 25 * (1 + 2 + 4)


def test_a_paused_process_reads_the_answer_that_arrived_meanwhile() -> None:
    def body(client: FaultyDynamoDB, kernel: Kernel) -> Any:
        group = kernel.current.group
        group.paused_until = kernel.now + 5 * 2_000  # stopped right after sending, past its read timeout
        return client.put_item(**PUT)

    answer, tables, took = run(Faults(), body)
    assert answer["ResponseMetadata"]["RetryAttempts"] == 0
    assert took == 10_000 and "a" in tables.items["t"]


@pytest.mark.parametrize("seed", range(20))
def test_a_write_that_commits_and_fails_is_retried_into_its_own_write(seed: int) -> None:
    """Answered 500 or not at all after the commit: botocore sends it again, and the retry meets the
    item its first attempt wrote (the condition fails, ALL_OLD naming it) -- or, every attempt
    failing, the caller sees the error with the write in the table."""
    put = {**PUT, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    error, tables, _ = run(Faults(ambiguous_rate=1.0), lambda c, _: c.put_item(**put), seed)
    assert tables.items["t"]["a"] == PUT["Item"]
    assert isinstance(error, (ClientError, ReadTimeoutError))
    if (
        isinstance(error, ClientError)
        and error.response["Error"]["Code"] == "ConditionalCheckFailedException"
    ):
        assert error.response["Item"] == PUT["Item"]


@pytest.mark.parametrize("page_bytes", [300, 1_000])
def test_the_store_reads_the_same_snapshot_over_small_pages(page_bytes: int) -> None:
    """The model's Scan pages are smaller than DynamoDB's 1 MB so that every history pages: the
    store's snapshot over them is the one a single page gives."""
    from consumer.leases.dynamodb import DynamoDBLeaseStore
    from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease

    snapshots = []
    for size in (page_bytes, 1 << 20):
        kernel = Kernel(1)
        tables = Tables(
            kernel, {"leases": "leaseKey", "leases-workers": "workerId"}, "leases", page_bytes=size
        )
        config = lease_client_timeouts(FAILOVER)
        client = FaultyDynamoDB(
            tables, kernel, Faults(), random.Random(1), config=config, failover_millis=FAILOVER
        )
        store = DynamoDBLeaseStore(client, "leases")
        found: list[Any] = []

        def body(store: DynamoDBLeaseStore = store, found: list[Any] = found) -> None:
            for i in range(30):
                store.create_if_absent(
                    Lease(f"shardId-{i:04d}", None, 0, ExtendedSequenceNumber("TRIM_HORIZON"))
                )
            for worker in ("a", "b", "c"):
                store.heartbeat(Heartbeat(worker, 1, 1_000), None)
            found.append((store.scan(), store.consumed.scans))

        kernel.spawn("t", Group("w"), body)
        kernel.run_until(kernel.now + FAILOVER)
        kernel.shutdown()
        snapshots.append(found[0])
    (paged, pages), (whole, one) = snapshots
    assert paged == whole and len(paged.leases) == 30 and len(paged.heartbeats) == 3
    assert (one, pages > 4) == (2, True)  # one page per table, or many


def test_the_model_is_configured_as_botocore_configures_the_leases_client() -> None:
    """Attempts and timeouts as botocore resolves the product's own Config (its ``max_attempts``
    counts retries: botocore makes one attempt more)."""
    import boto3
    from botocore.config import Config

    real = boto3.client("dynamodb", region_name="us-east-1", config=Config(**lease_client_timeouts(FAILOVER)))
    kernel = Kernel(1)
    tables = Tables(kernel, {"leases": "leaseKey"}, "leases")
    config = lease_client_timeouts(FAILOVER)
    model = FaultyDynamoDB(
        tables, kernel, Faults(), random.Random(1), config=config, failover_millis=FAILOVER
    )
    assert model.attempts == real.meta.config.retries["total_max_attempts"] == 4
    assert model.read_millis == real.meta.config.read_timeout * 1000
    assert model.connect_millis == real.meta.config.connect_timeout * 1000
    assert real.meta.config.retries["mode"] == "standard"
