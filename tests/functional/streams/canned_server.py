"""A tiny DynamoDB Streams look-alike on 127.0.0.1 that answers with canned responses.

Tests script each operation with a queue of (status, body) answers or a function of the request, so
the adapter is exercised through real botocore HTTP: signing, retries, error parsing and all.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, bytes]
Responder = Callable[[dict[str, Any]], Answer]


def ok(document: dict[str, Any]) -> Answer:
    return 200, json.dumps(document).encode()


def error(code: str, message: str, status: int = 400) -> Answer:
    return status, json.dumps(
        {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message}
    ).encode()


class CannedStreams:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._scripts: dict[str, list[Responder]] = {}
        self._lock = threading.Lock()

    def script(self, operation: str, *answers: Answer | Responder) -> None:
        """Answer the next calls of ``operation`` in order; the last answer repeats."""
        responders = [a if callable(a) else (lambda _r, a=a: a) for a in answers]
        with self._lock:
            self._scripts[operation] = responders

    def calls(self, operation: str) -> list[dict[str, Any]]:
        return [body for op, body in self.requests if op == operation]

    def answer(self, operation: str, request: dict[str, Any]) -> Answer:
        with self._lock:
            self.requests.append((operation, request))
            queue = self._scripts.get(operation)
            if not queue:
                return error("UnknownOperationException", f"no canned answer for {operation}")
            responder = queue.pop(0) if len(queue) > 1 else queue[0]
        return responder(request)


def _handler(canned: CannedStreams) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
            status, body = canned.answer(operation, request)
            self.send_response(status)
            is_json = body.startswith(b"{")
            self.send_header("Content-Type", "application/x-amz-json-1.0" if is_json else "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("x-amzn-RequestId", "canned-request")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def serve() -> Iterator[tuple[CannedStreams, str]]:
    """A running server on a free port, shut down and closed however the test ends."""
    canned = CannedStreams()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(canned))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="canned-streams", daemon=True)
    thread.start()
    try:
        yield canned, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
