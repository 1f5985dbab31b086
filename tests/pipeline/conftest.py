"""One Spark session for the whole pipeline test session (start-up is the slow part), and a moto
DynamoDB with the source table for the tests that scan it (verify, bootstrap)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from pyspark.sql import SparkSession

from pipeline.session import build_session
from tests.support import moto_server


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The tests' frames are a few rows, so no code generation: compiling each plan's generated
    Java (Janino, then the JIT) costs these tests more than interpreting their rows does. Interpreted
    expressions took 14 % off the CPU and the wall time of test_position_deletes, test_commits and
    test_snapshot (two runs each way, alternated: 127 and 133 against 157 and 146 CPU s). The
    commands' own sessions keep code generation on, as the product runs: the CLI's pipeline jobs in
    test_entry_points, the demo's Spark steps, the benchmarks."""
    session = build_session("local[2]", "pipeline-tests", shuffle_partitions=1)
    session.conf.set("spark.sql.adaptive.enabled", "false")
    session.conf.set("spark.sql.codegen.wholeStage", "false")
    # Spark's internal switch between generated and interpreted expressions (both are its own
    # tested paths); NO_CODEGEN interprets every expression.
    session.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def dynamodb(endpoint: str) -> Iterator[Any]:
    config = Config(connect_timeout=2, read_timeout=10, retries={"max_attempts": 1})
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint, config=config)
    client.create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        yield client
    finally:
        client.delete_table(TableName="orders")
