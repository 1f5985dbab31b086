"""`consumer run` refuses bad input at start-up: a clear message naming the fix, a non-zero exit,
and no lease taken or checkpoint touched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import boto3
import pytest

pytestmark = pytest.mark.e2e


def run(config_dir: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer.cli", "run", "--env", "e2e", "--config-dir", str(config_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def leases_table_exists(endpoint: str) -> bool:
    names = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint).list_tables()[
        "TableNames"
    ]
    return "e2e-fleet" in names


def test_missing_table(config_dir: Path, moto_endpoint: str) -> None:
    result = run(config_dir)
    assert result.returncode == 2
    assert "table orders does not exist" in result.stderr and "Traceback" not in result.stderr
    assert not leases_table_exists(moto_endpoint)


def test_table_without_stream(config_dir: Path, moto_endpoint: str) -> None:
    boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_endpoint).create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    result = run(config_dir)
    assert result.returncode == 2
    assert "--stream-specification StreamEnabled=true" in result.stderr
    assert not leases_table_exists(moto_endpoint)


def test_processor_that_does_not_import(config_dir: Path, moto_endpoint: str) -> None:
    text = (
        (config_dir / "e2e.yaml")
        .read_text()
        .replace("processor: changelog", "processor: no_such_module:Processor")
    )
    (config_dir / "e2e.yaml").write_text(text)
    result = run(config_dir)
    assert result.returncode == 2
    assert "module no_such_module does not import" in result.stderr
    assert not leases_table_exists(moto_endpoint)
