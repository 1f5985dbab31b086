"""The leases table's Scan as the 2N alarm sees it, on moto (which cuts Scan pages at 1 MB, as DynamoDB).

DynamoDB publishes ``ReturnedItemCount`` once per Scan *request*: here each page the real store
reads is one datapoint (taken from the responses botocore parses), and the store itself counts its
complete scans (``LeaseTableScans``) through the real metrics recorder. The scaling rules' expression
(infra/scaling.py, the text the template carries) then reads the number of leases for a table of
one page and of several, where the seed's Average per request reads a page's share.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.items import lease_to_item
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.transports import InMemoryTransport
from ground.clock import FakeClock
from ground.settings import WorkerSettings
from infra.scaling import scaling_rules
from simulation.cloudwatch import evaluate_expression
from tests.unit.telemetry.helpers import metric_sums, settings_with


@pytest.fixture
def client() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


def _fill(client: Any, table: str, count: int) -> None:
    items = [
        lease_to_item(
            Lease(
                f"shardId-{i:020d}-{i:08x}",
                f"ip-10-0-0-{i % 7}-1@ip-10-0-0-{i % 7}:4242:0123abcd",
                1,
                ExtendedSequenceNumber("4960000000000000000000" + f"{i:010d}"),
                parent_shard_ids=frozenset({f"shardId-{i - 1:020d}-{i:08x}"}),
            )
        )
        for i in range(count)
    ]
    for start in range(0, count, 25):
        client.batch_write_item(
            RequestItems={table: [{"PutRequest": {"Item": it}} for it in items[start : start + 25]]}
        )


@pytest.mark.parametrize("leases", [300, 4_500])
def test_items_over_scans_is_the_lease_count_whatever_the_pages(client: Any, leases: int) -> None:
    settings = settings_with()
    transport = InMemoryTransport()
    recorder = MetricsRecorder(settings, "w-1", transport, FakeClock(), sample_process=False)
    store = DynamoDBLeaseStore(client, "app", metrics=recorder)
    store.ensure_table(WorkerSettings(lease_table_billing_mode="PAY_PER_REQUEST"))
    _fill(client, "app", leases)

    asked: list[str] = []
    pages: list[tuple[str, int]] = []  # (table, ReturnedItemCount) per Scan request
    events = client.meta.events
    events.register(
        "before-parameter-build.dynamodb.Scan", lambda params, **_: asked.append(params["TableName"])
    )
    events.register(
        "after-call.dynamodb.Scan", lambda parsed, **_: pages.append((asked.pop(0), int(parsed["Count"])))
    )
    scans = 2
    for _ in range(scans):
        assert len(store.scan().leases) == leases
    recorder.flush()
    recorder.stop(timeout_seconds=2)
    # Each full scan reads the workers table too: DynamoDB reports it under that table's name.
    leases_pages = [count for table, count in pages if table == "app"]
    assert sum(leases_pages) == scans * leases
    counted = metric_sums(transport.documents, Operation="LeaseTable")["LeaseTableScans"]
    assert counted == scans

    rules = scaling_rules(settings, "group")
    n = leases // 2
    variables = {"items": [float(sum(leases_pages))], "scans": [float(counted)], "openShards": [float(n)]}
    (per_shard,) = evaluate_expression(rules.scale_out_expression, variables, 1)
    assert per_shard == pytest.approx(2.0)  # exactly 2N leases: the scale-out threshold
    several = len(leases_pages) > scans
    assert several == (leases == 4_500)
    average_per_request = sum(leases_pages) / len(leases_pages)
    assert (average_per_request == leases) != several
