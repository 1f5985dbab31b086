"""A moto server on a free loopback port, stopped whatever happens; a Logs client for it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto.server import ThreadedMotoServer


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def logs_client(moto_endpoint: str) -> Any:
    config = Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1})
    return boto3.client("logs", region_name="us-east-1", endpoint_url=moto_endpoint, config=config)
