"""A moto server on a free loopback port, stopped whatever happens; a Logs client for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.support import moto_server


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def logs_client(moto_endpoint: str) -> Any:
    config = Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1})
    return boto3.client("logs", region_name="us-east-1", endpoint_url=moto_endpoint, config=config)
