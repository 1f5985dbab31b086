"""The WSGI application: moto for every service, with three things routed around or through it.

* ``X-Amz-Target: DynamoDBStreams_20120810.*`` goes to the stream engine (never to moto);
* DynamoDB requests that may write run one at a time inside a :meth:`MotoBridge.capture`, so the
  order of sequence numbers is the order in which moto applied the writes;
* ``/_emulator/*`` is the control API (rollover, split, trim, faults, TTL deletes, counters, shards).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from moto.dynamodb.models.dynamo_type import DynamoType
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from emulator.engine import StreamEngine
from emulator.errors import ControlError, StreamsApiError
from emulator.moto_bridge import MotoBridge
from emulator.records import TTL_IDENTITY
from emulator.streams_api import ERROR_NAMESPACE, handle_streams_call

StartResponse = Callable[..., Any]
Environ = dict[str, Any]

STREAMS_PREFIX = "DynamoDBStreams_20120810."
DYNAMODB_PREFIX = "DynamoDB_20120810."
# DynamoDB operations that never change an item; everything else is serialized and captured.
READ_ONLY = frozenset(
    {
        "GetItem",
        "BatchGetItem",
        "Query",
        "Scan",
        "TransactGetItems",
        "DescribeTable",
        "ListTables",
        "DescribeTimeToLive",
        "DescribeContinuousBackups",
        "ListTagsOfResource",
        "DescribeEndpoints",
        "DescribeLimits",
    }
)
CONTROL_PREFIX = "/_emulator/"


class EmulatorApp:
    def __init__(self, engine: StreamEngine, bridge: MotoBridge) -> None:
        self.engine = engine
        self.bridge = bridge
        self.moto = DomainDispatcherApplication(create_backend_app)
        self._write_lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        if path.startswith(CONTROL_PREFIX):
            return self._control(environ, start_response, path[len(CONTROL_PREFIX) :])
        if target.startswith(STREAMS_PREFIX):
            return self._streams(environ, start_response, target[len(STREAMS_PREFIX) :])
        if target.startswith(DYNAMODB_PREFIX):
            operation = target[len(DYNAMODB_PREFIX) :]
            try:
                self.engine.admit_table_call(operation)
            except StreamsApiError as exc:
                payload = {"__type": ERROR_NAMESPACE + exc.code, "message": exc.message}
                return _json_response(start_response, exc.status, payload)
            if operation not in READ_ONLY:
                with self._write_lock, self.bridge.capture():
                    return [b"".join(self.moto(environ, start_response))]
        response: Iterable[bytes] = self.moto(environ, start_response)
        return response

    # ---------------------------------------------------------------------------- streams

    def _streams(self, environ: Environ, start_response: StartResponse, operation: str) -> Iterable[bytes]:
        body = _read_body(environ)
        status, payload, latency = handle_streams_call(self.engine, self.bridge, operation, body)
        if latency > 0:
            time.sleep(latency / 1000)
        return _json_response(start_response, status, payload)

    # ---------------------------------------------------------------------------- control

    def _control(self, environ: Environ, start_response: StartResponse, route: str) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET"))
        query = {k: v[-1] for k, v in parse_qs(str(environ.get("QUERY_STRING", ""))).items()}
        try:
            body = json.loads(_read_body(environ) or b"{}") if method == "POST" else {}
            if not isinstance(body, dict):
                raise ControlError("the request body must be a JSON object")
            status, payload = 200, self._control_route(method, route, body, query)
        except json.JSONDecodeError as exc:
            status, payload = 400, {"error": f"the request body is not JSON: {exc}"}
        except ControlError as exc:
            status, payload = 400, {"error": str(exc)}
        except LookupError as exc:
            status, payload = 404, {"error": str(exc)}
        data = json.dumps(payload).encode()
        start_response(
            f"{status} {_REASONS.get(status, 'Error')}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
        )
        return [data]

    def _control_route(self, method: str, route: str, body: dict[str, Any], query: dict[str, str]) -> Any:
        self.bridge.sync()
        table = body.get("table", query.get("table"))
        if table is not None and not isinstance(table, str):
            raise ControlError("table must be a table name")
        partition = body.get("partition")
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
            raise ControlError("partition must be an integer")
        routes: dict[tuple[str, str], Callable[[], Any]] = {
            ("GET", "health"): lambda: {"ok": True},
            ("GET", "counters"): self.engine.counters,
            ("GET", "shards"): lambda: {"shards": self.engine.shard_table(table)},
            ("GET", "faults"): lambda: _faults_json(self.engine),
            ("POST", "rollover"): lambda: {"created": self.engine.rollover(table, partition)},
            ("POST", "split"): lambda: {"created": self.engine.split(table, partition)},
            ("POST", "trim"): lambda: {"trimmed": self.engine.trim(table, _seconds(body))},
            ("POST", "faults"): lambda: _set_faults(self.engine, body),
            ("POST", "ttl-delete"): lambda: {"deleted": self._ttl_delete(table, body.get("key"))},
        }
        handler = routes.get((method, route))
        if handler is None:
            known = ", ".join(f"{m} /_emulator/{r}" for m, r in routes)
            raise LookupError(f"no control route {method} /_emulator/{route}; routes: {known}")
        return handler()

    def _ttl_delete(self, table_name: str | None, key: object) -> bool:
        """Delete an item as DynamoDB's TTL process would: the REMOVE carries ``userIdentity``."""
        if table_name is None or not isinstance(key, dict):
            raise ControlError('ttl-delete needs {"table": name, "key": {attribute: {type: value}}}')
        try:
            table = self.bridge.find_table(table_name)
        except KeyError as exc:
            raise ControlError(f"no table named {table_name!r}") from exc
        try:
            hash_value = DynamoType(key[table.hash_key_attr])
            range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        except (KeyError, TypeError, AttributeError) as exc:
            raise ControlError(
                f"key must name {table.hash_key_attr} (and the sort key if any): {exc}"
            ) from exc
        with self._write_lock, self.bridge.capture(TTL_IDENTITY):
            return table.delete_item(hash_value, range_value) is not None


def _seconds(body: dict[str, Any]) -> float:
    value = body.get("older_than_seconds", 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ControlError(f"older_than_seconds must be a number >= 0, got {value!r}")
    return float(value)


def _faults_json(engine: StreamEngine) -> dict[str, Any]:
    faults = engine.faults
    return {name: getattr(faults, name) for name in faults.__dataclass_fields__}


def _set_faults(engine: StreamEngine, body: dict[str, Any]) -> dict[str, Any]:
    engine.set_faults({k: v for k, v in body.items() if k != "table"})
    return _faults_json(engine)


def _json_response(start_response: StartResponse, status: int, payload: Any) -> Iterable[bytes]:
    data = json.dumps(payload).encode()
    start_response(
        f"{status} {_REASONS.get(status, 'Error')}",
        [
            ("Content-Type", "application/x-amz-json-1.0"),
            ("Content-Length", str(len(data))),
            ("x-amzn-RequestId", uuid.uuid4().hex),
        ],
    )
    return [data]


def _read_body(environ: Environ) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    stream = environ.get("wsgi.input")
    if stream is None or length <= 0:
        return b""
    data: bytes = stream.read(length)
    return data


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}

__all__ = ["EmulatorApp", "StreamsApiError"]
