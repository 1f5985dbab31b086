"""The WSGI application: moto for every service, with four things routed around or through it.

* ``X-Amz-Target: DynamoDBStreams_20120810.*`` goes to the stream engine (never to moto);
* ``X-Amz-Target: Kinesis_20131202.*`` goes to the Kinesis engine (never to moto);
* DynamoDB requests pass the table faults first (throttle, 500, latency, ambiguous writes, stale
  scans: :meth:`emulator.gate.Gate.admit_table_call`); those that may write then run one at a time inside a
  :meth:`MotoBridge.capture`, so the order of sequence numbers is the order in which moto applied
  the writes;
* ``/_emulator/*`` is the control API (rollover, split, trim, faults, TTL deletes, counters, shards,
  the Scans each table served with their read units: emulator/capacity.py; ``kinesis/shards`` and
  ``kinesis/trim`` for Kinesis streams, which reshard through their own API).
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from moto.dynamodb.models.dynamo_type import DynamoType
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from emulator.capacity import ReadLog, scan_units
from emulator.engine import StreamEngine
from emulator.errors import ControlError, StreamsApiError
from emulator.gate import TableCall
from emulator.kinesis_api import handle_kinesis_call, region_of
from emulator.kinesis_engine import KinesisEngine
from emulator.kinesis_listing import shard_table
from emulator.moto_bridge import MotoBridge
from emulator.records import TTL_IDENTITY
from emulator.streams_api import ERROR_NAMESPACE, handle_streams_call

StartResponse = Callable[..., Any]
Environ = dict[str, Any]

STREAMS_PREFIX = "DynamoDBStreams_20120810."
KINESIS_PREFIX = "Kinesis_20131202."
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
# The table a PartiQL statement names: SELECT … FROM "t", INSERT INTO "t", UPDATE "t", DELETE FROM "t".
_PARTIQL_TABLE = re.compile(r"""\b(?:FROM|INTO|UPDATE)\s+"?([A-Za-z0-9_.\-]+)"?""", re.IGNORECASE)


class EmulatorApp:
    def __init__(
        self, engine: StreamEngine, bridge: MotoBridge, kinesis: KinesisEngine | None = None
    ) -> None:
        self.engine = engine
        self.bridge = bridge
        self.kinesis = kinesis or KinesisEngine(engine.config, faults=lambda: engine.faults)
        self.moto = DomainDispatcherApplication(create_backend_app)
        self._write_lock = threading.Lock()
        self.reads = ReadLog()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        if path.startswith(CONTROL_PREFIX):
            return self._control(environ, start_response, path[len(CONTROL_PREFIX) :])
        if target.startswith(STREAMS_PREFIX):
            return self._streams(environ, start_response, target[len(STREAMS_PREFIX) :])
        if target.startswith(KINESIS_PREFIX):
            return self._kinesis(environ, start_response, target[len(KINESIS_PREFIX) :])
        if target.startswith(DYNAMODB_PREFIX):
            return self._dynamodb(environ, start_response, target[len(DYNAMODB_PREFIX) :])
        response: Iterable[bytes] = self.moto(environ, start_response)
        return response

    # ---------------------------------------------------------------------------- dynamodb

    def _dynamodb(self, environ: Environ, start_response: StartResponse, operation: str) -> Iterable[bytes]:
        """One DynamoDB request through the table faults and moto. The body is read here (to know
        which tables it names) and handed on to moto unchanged."""
        arrived_millis = int(time.monotonic() * 1000)
        body = _read_body(environ)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        params = _json_object(body)
        tables = tables_of(params)
        call = self.engine.gate.admit_table_call(operation, tables)
        _sleep_millis(call.before_millis)
        if call.refused is not None:
            _sleep_millis(call.after_millis)
            payload = {"__type": ERROR_NAMESPACE + call.refused.code, "message": call.refused.message}
            return _json_response(start_response, call.refused.status, payload)
        if operation in ("CreateTable", "DeleteTable"):
            for table in tables:  # a recreated table must not answer with its predecessor's views
                self.engine.gate.forget_scan_views(table)
        if operation not in READ_ONLY:
            with self._write_lock, self.bridge.capture():
                status, headers, data = self._call_moto(environ)
        else:
            status, headers, data = self._call_moto(environ)
            if operation == "Scan" and status.startswith("2"):
                headers, data = self._charge_scan(params, headers, data, arrived_millis)
            if _eventually_consistent_scan(operation, call, params) and status.startswith("2"):
                key = f"{params.get('TableName')}\n{json.dumps(params, sort_keys=True)}"
                view = self.engine.gate.answer_scan(key, status, headers, data, call.stale_window_millis)
                status, headers, data = view.status, view.headers, view.body
        if call.ambiguous and status.startswith("2"):
            # Applied (moto has committed it and the stream has its record), answered as a failure.
            self.engine.gate.count_ambiguous(delayed=call.ambiguous_delay_millis > 0)
            _sleep_millis(call.after_millis + call.ambiguous_delay_millis)
            payload = {
                "__type": ERROR_NAMESPACE + "InternalServerError",
                "message": f"{operation}: injected fault after the write was applied (emulator table_ambiguous_rate).",
            }
            return _json_response(start_response, 500, payload)
        _sleep_millis(call.after_millis)
        start_response(status, list(headers))
        return [data]

    def _charge_scan(
        self, params: dict[str, Any], headers: tuple[tuple[str, str], ...], data: bytes, arrived_millis: int
    ) -> tuple[tuple[tuple[str, str], ...], bytes]:
        """Charge a Scan what DynamoDB would (emulator/capacity.py), log it at the time it arrived,
        answer with it. A pace is kept on when each page is asked for; the time a page took to be
        read here (moto's own, longer on a loaded machine) is not the asker's."""
        try:
            body = json.loads(data)
        except ValueError:
            return headers, data
        table = _table_name(params.get("TableName")) or ""
        units = scan_units(body.get("Items", []), consistent=params.get("ConsistentRead") is True)
        segments = params.get("TotalSegments")
        self.reads.add(table, arrived_millis, units, segments if isinstance(segments, int) else 0)
        if params.get("ReturnConsumedCapacity", "NONE") == "NONE":
            return headers, data
        body["ConsumedCapacity"] = {"TableName": table, "CapacityUnits": units}
        if params.get("ReturnConsumedCapacity") == "INDEXES":
            body["ConsumedCapacity"]["Table"] = {"CapacityUnits": units}
        data = json.dumps(body).encode()
        kept = tuple((k, v) for k, v in headers if k.lower() not in ("content-length", "x-amz-crc32"))
        return (*kept, ("Content-Length", str(len(data)))), data

    def _call_moto(self, environ: Environ) -> tuple[str, tuple[tuple[str, str], ...], bytes]:
        """Run moto on the request and hold its whole answer, so it can be kept, replaced or sent."""
        captured: dict[str, Any] = {}
        written: list[bytes] = []

        def capture(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            captured["status"], captured["headers"] = status, tuple(headers)
            return written.append

        data = b"".join(self.moto(environ, capture))
        return str(captured["status"]), captured["headers"], b"".join(written) + data

    # ---------------------------------------------------------------------------- streams

    def _streams(self, environ: Environ, start_response: StartResponse, operation: str) -> Iterable[bytes]:
        body = _read_body(environ)
        status, payload, latency = handle_streams_call(self.engine, self.bridge, operation, body)
        if latency > 0:
            time.sleep(latency / 1000)
        return _json_response(start_response, status, payload)

    def _kinesis(self, environ: Environ, start_response: StartResponse, operation: str) -> Iterable[bytes]:
        body = _read_body(environ)
        region = region_of(str(environ.get("HTTP_AUTHORIZATION", "")))
        now = self.kinesis.now_millis()
        status, payload, latency = handle_kinesis_call(self.kinesis, operation, body, region, now)
        if latency > 0:
            time.sleep(latency / 1000)
        return _json_response(start_response, status, payload, "application/x-amz-json-1.1")

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
        stream = body.get("stream", query.get("stream"))
        if stream is not None and not isinstance(stream, str):
            raise ControlError("stream must be a Kinesis stream name")
        routes: dict[tuple[str, str], Callable[[], Any]] = {
            ("GET", "health"): lambda: {"ok": True},
            ("GET", "counters"): lambda: {**self.engine.counters(), **self.kinesis.counter_values()},
            ("GET", "shards"): lambda: {"shards": self.engine.shard_table(table)},
            ("GET", "faults"): lambda: _faults_json(self.engine),
            ("GET", "reads"): lambda: {"reads": self.reads.of(table or "")},
            ("POST", "rollover"): lambda: {"created": self.engine.rollover(table, partition)},
            ("POST", "split"): lambda: {"created": self.engine.split(table, partition)},
            ("POST", "trim"): lambda: {"trimmed": self.engine.trim(table, _seconds(body))},
            ("POST", "faults"): lambda: _set_faults(self.engine, body),
            ("POST", "ttl-delete"): lambda: {"deleted": self._ttl_delete(table, body.get("key"))},
            ("GET", "kinesis/shards"): lambda: {
                "shards": self._kinesis_control(lambda name: shard_table(self.kinesis, name), stream)
            },
            ("POST", "kinesis/trim"): lambda: {
                "trimmed": self._kinesis_control(lambda name: self.kinesis.trim(name, _seconds(body)), stream)
            },
        }
        handler = routes.get((method, route))
        if handler is None:
            known = ", ".join(f"{m} /_emulator/{r}" for m, r in routes)
            raise LookupError(f"no control route {method} /_emulator/{route}; routes: {known}")
        return handler()

    @staticmethod
    def _kinesis_control(action: Callable[[str | None], Any], stream: str | None) -> Any:
        try:
            return action(stream)
        except StreamsApiError as exc:
            raise ControlError(exc.message) from exc

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


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        params = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}  # moto answers the malformed request itself
    return params if isinstance(params, dict) else {}


def _table_name(value: object) -> str | None:
    """A table name, or the name inside a table ARN (``arn:aws:dynamodb:…:table/<name>``)."""
    if not isinstance(value, str) or not value:
        return None
    if value.startswith("arn:") and ":table/" in value:
        return value.split(":table/", 1)[1].split("/", 1)[0]
    return value


def tables_of(params: dict[str, Any]) -> frozenset[str]:
    """Every table a DynamoDB request names: ``TableName``, the keys of ``RequestItems`` (batch
    calls), each entry of ``TransactItems`` and the tables PartiQL statements name."""
    names: set[str | None] = {_table_name(params.get("TableName"))}
    request_items = params.get("RequestItems")
    if isinstance(request_items, dict):
        names.update(_table_name(name) for name in request_items)
    statements = [params.get("Statement")]
    for entry in params.get("TransactItems") or params.get("TransactStatements") or []:
        if isinstance(entry, dict):
            statements.append(entry.get("Statement"))
            for action in entry.values():
                if isinstance(action, dict):
                    names.add(_table_name(action.get("TableName")))
    for entry in params.get("Statements") or []:
        if isinstance(entry, dict):
            statements.append(entry.get("Statement"))
    for statement in statements:
        if isinstance(statement, str):
            names.update(_PARTIQL_TABLE.findall(statement))
    return frozenset(name for name in names if name)


def _eventually_consistent_scan(operation: str, call: TableCall, params: dict[str, Any]) -> bool:
    """A Scan that may be stale: not ConsistentRead (which DynamoDB answers from the leader)."""
    return operation == "Scan" and call.stale_window_millis > 0 and params.get("ConsistentRead") is not True


def _sleep_millis(millis: int) -> None:
    if millis > 0:
        time.sleep(millis / 1000)


def _json_response(
    start_response: StartResponse, status: int, payload: Any, content_type: str = "application/x-amz-json-1.0"
) -> Iterable[bytes]:
    # As DynamoDB Streams and Kinesis send it: compact, with text as UTF-8 (no \u escapes), so the
    # worker's GetRecords path takes the cut it takes against the service (consumer/streams/wire.py).
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    start_response(
        f"{status} {_REASONS.get(status, 'Error')}",
        [
            ("Content-Type", content_type),
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
