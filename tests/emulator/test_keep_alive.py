"""The emulator keeps a connection open between requests (emulator/keep_alive.py), as AWS does,
without ever mixing one request's bytes into the next."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
import urllib3

from emulator.testing import RunningEmulator

_SIGNED = {
    "Content-Type": "application/x-amz-json-1.0",
    "Authorization": "AWS4-HMAC-SHA256 Credential=local/20261129/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=host, Signature=x",
}


def _connection(emulator: RunningEmulator) -> http.client.HTTPConnection:
    address = urlsplit(emulator.endpoint)
    return http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=10)


def _call(connection: http.client.HTTPConnection, target: str, body: bytes) -> tuple[int, str, bytes]:
    headers = {**_SIGNED, "X-Amz-Target": f"DynamoDB_20120810.{target}"}
    connection.request("POST", "/", body=body, headers=headers)
    answer = connection.getresponse()
    return answer.status, answer.getheader("Connection", ""), answer.read()


def test_requests_on_one_connection_are_answered_each_in_turn(emulator: RunningEmulator) -> None:
    connection = _connection(emulator)
    try:
        for _ in range(3):
            status, closing, body = _call(connection, "ListTables", b"{}")
            assert (status, closing.lower()) == (200, "")
            assert "TableNames" in json.loads(body)
            socket_after = connection.sock
            assert socket_after is not None  # http.client drops its socket when told to close
        # A request the service refuses (its body never parsed as a table call) leaves the stream
        # at the next request line too.
        status, _, body = _call(connection, "DescribeTable", b'{"TableName": "no-such-table"}')
        assert status == 400 and b"ResourceNotFoundException" in body
        status, _, body = _call(connection, "ListTables", b"{}")
        assert status == 200 and "TableNames" in json.loads(body)
        assert connection.sock is socket_after  # the same connection throughout
    finally:
        connection.close()


def test_a_body_of_unknown_length_is_answered_and_the_connection_closed(emulator: RunningEmulator) -> None:
    connection = _connection(emulator)
    try:
        headers = {**_SIGNED, "X-Amz-Target": "DynamoDB_20120810.ListTables"}
        connection.request("POST", "/", body=iter([b"{", b"}"]), headers=headers, encode_chunked=True)
        answer = connection.getresponse()
        assert answer.status == 200 and "TableNames" in json.loads(answer.read())
        assert answer.getheader("Connection", "").lower() == "close"
    finally:
        connection.close()


def test_a_boto3_client_makes_its_calls_on_one_connection(
    emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = emulator.client("dynamodb")
    opened: list[object] = []
    connect = urllib3.util.connection.create_connection

    def counted(*args: Any, **kwargs: Any) -> Any:
        opened.append(args[0])
        return connect(*args, **kwargs)

    monkeypatch.setattr(urllib3.util.connection, "create_connection", counted)
    for _ in range(20):
        client.list_tables()
    assert len(opened) == 1, opened
