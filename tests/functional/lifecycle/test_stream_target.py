"""Start-up checks of the source table and its stream: each failure names its fix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from moto import mock_aws

from consumer.streams.target import StreamConfigError, resolve_stream, resolve_stream_patiently
from ground.settings import KeyAttribute, TableSettings

NO_ACCOUNT_ENDPOINTS = Config(account_id_endpoint_mode="disabled")
TABLE = TableSettings(name="orders", partition_key=KeyAttribute(name="pk"))


@pytest.fixture
def clients() -> Iterator[tuple[Any, Any]]:
    with mock_aws():
        # In-process moto cannot see botocore's account-based endpoints (a StreamArn carries the account).
        streams = boto3.client("dynamodbstreams", region_name="us-east-1", config=NO_ACCOUNT_ENDPOINTS)
        yield boto3.client("dynamodb", region_name="us-east-1"), streams


def create(ddb: Any, view: str | None) -> None:
    spec = {"StreamEnabled": True, "StreamViewType": view} if view else {"StreamEnabled": False}
    ddb.create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification=spec,
    )


def test_resolves_the_latest_stream(clients: tuple[Any, Any]) -> None:
    ddb, streams = clients
    create(ddb, "NEW_AND_OLD_IMAGES")
    target = resolve_stream(ddb, streams, TABLE)
    assert target.stream_arn == ddb.describe_table(TableName="orders")["Table"]["LatestStreamArn"]
    assert target.view_type == "NEW_AND_OLD_IMAGES"


def test_missing_table(clients: tuple[Any, Any]) -> None:
    with pytest.raises(StreamConfigError, match="table orders does not exist: check table.name"):
        resolve_stream(*clients, TABLE)


def test_table_without_stream_names_the_command_that_enables_it(clients: tuple[Any, Any]) -> None:
    create(clients[0], None)
    with pytest.raises(StreamConfigError, match="update-table --table-name orders --stream-specification"):
        resolve_stream(*clients, TABLE)


def test_wrong_view_type(clients: tuple[Any, Any]) -> None:
    create(clients[0], "KEYS_ONLY")
    with pytest.raises(
        StreamConfigError, match="view type KEYS_ONLY but table.stream_view_type is NEW_AND_OLD_IMAGES"
    ):
        resolve_stream(*clients, TABLE)


def test_wrong_stream_arn(clients: tuple[Any, Any]) -> None:
    create(clients[0], "NEW_AND_OLD_IMAGES")
    bad = TABLE.model_copy(
        update={
            "existing_stream_arn": "arn:aws:dynamodb:us-east-1:123456789012:table/no-such-table/stream/2020-01-01T00:00:00.000"
        }
    )
    with pytest.raises(StreamConfigError, match="does not exist|not a valid stream ARN"):
        resolve_stream(*clients, bad)


def test_missing_permission_names_the_action() -> None:
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    stub = Stubber(ddb)
    stub.add_client_error("describe_table", "AccessDeniedException", "not authorized", 400)
    with stub, pytest.raises(StreamConfigError, match="permission denied for dynamodb:DescribeTable"):
        resolve_stream(ddb, boto3.client("dynamodbstreams", region_name="us-east-1"), TABLE)


def test_a_transient_error_at_start_up_is_waited_out_and_a_setting_error_is_not(
    clients: tuple[Any, Any],
) -> None:
    """A worker starting during an outage must not end (the outage test saw one exit 2 after five
    failed attempts); a missing table is a setting and still ends it at once."""
    ddb, streams = clients
    create(ddb, "NEW_AND_OLD_IMAGES")
    stubbed = boto3.client("dynamodb", region_name="us-east-1")
    table = ddb.describe_table(TableName="orders")["Table"]
    real = {"Table": {k: table[k] for k in ("TableName", "LatestStreamArn", "StreamSpecification")}}
    slept: list[float] = []
    warnings: list[str] = []
    with Stubber(stubbed) as stub:
        for _ in range(3):
            stub.add_client_error("describe_table", "InternalServerError", http_status_code=500)
        stub.add_response("describe_table", real)
        target = resolve_stream_patiently(stubbed, streams, TABLE, sleep=slept.append, warn=warnings.append)
    assert target is not None and target.stream_arn == real["Table"]["LatestStreamArn"]
    assert slept == [1, 2, 4] and len(warnings) == 3 and "retrying in 1 s" in warnings[0]
    with Stubber(stubbed) as stub:
        stub.add_client_error("describe_table", "ResourceNotFoundException", http_status_code=400)
        with pytest.raises(StreamConfigError, match="does not exist"):
            resolve_stream_patiently(stubbed, streams, TABLE, sleep=slept.append, warn=warnings.append)


def test_starting_spends_no_describe_stream_call(clients: tuple[Any, Any]) -> None:
    """DescribeStream is the account's budget (about 10/s for everyone): a fleet restarting must not
    spend one call per worker just to start. DescribeTable says all a start needs."""
    ddb, _ = clients
    create(ddb, "NEW_AND_OLD_IMAGES")
    streams = boto3.client("dynamodbstreams", region_name="us-east-1", config=NO_ACCOUNT_ENDPOINTS)
    with Stubber(streams) as stub:  # any DescribeStream would find no stubbed answer and fail
        target = resolve_stream(ddb, streams, TABLE)
        stub.assert_no_pending_responses()
    assert target.view_type == "NEW_AND_OLD_IMAGES"
