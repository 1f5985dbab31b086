"""Helpers every test tier shares: a free loopback port and a moto server that always stops."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from moto.server import ThreadedMotoServer


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on 127.0.0.1 and a free port; yields its endpoint URL.

    moto keeps its backends per process, not per server, so each server starts from a reset,
    empty account: a test never sees another test's tables.
    """
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        urllib.request.urlopen(
            urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30
        ).close()
        yield endpoint
    finally:
        server.stop()


def create_orders_table(ddb: Any, name: str) -> None:
    """The source table the tests' configs name (pk/sk strings, on demand, a NEW_AND_OLD_IMAGES stream)."""
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``condition`` every half second; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
