"""The emulator's HTTP request handler: moto's, with connections kept open between requests.

Werkzeug's development server ends every response with ``Connection: close``, because Python's
``http.server`` cannot skip a request body the application left unread before it reads the next
request line. Every call to the emulator then paid a new TCP connection on both sides (the client's
address lookup and connect, the server's accept and a new thread): about a third of an idle
worker's CPU in its calls to the emulator, and more than the call itself in the emulator.

Here the body is read whole before the application sees it, so the stream always stands at the next
request line and the connection can stay open, as AWS's endpoints keep it. Werkzeug, sure that the
connection closes, also reads whatever arrives within 10 ms of its answer and throws it away: that
would swallow the client's next request, so once a body has been read whole, that read finds
nothing (:class:`_BodyOnce`). A request whose length is not known up front (a chunked body) is
answered as before, and closes.
"""

from __future__ import annotations

import io
from typing import Any

from moto.moto_server.werkzeug_app import MotoRequestHandler


class _BodyOnce:
    """The connection's read stream: lines always (request lines and headers), and bytes until the
    request's body was read whole; after that, until the next request, a read returns nothing."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.body_read = False

    def readline(self, size: int = -1) -> bytes:
        line: bytes = self._stream.readline(size)
        return line

    def read(self, size: int = -1) -> bytes:
        if self.body_read:
            return b""
        data: bytes = self._stream.read(size)
        return data

    def close(self) -> None:
        self._stream.close()


class KeepAliveRequestHandler(MotoRequestHandler):
    """Moto's request handler, HTTP/1.1 with keep-alive for requests with a ``Content-Length``."""

    protocol_version = "HTTP/1.1"
    # An answer is written in pieces (headers, then body): on an open connection Nagle's algorithm
    # would hold the body back until the client acknowledged the headers, some 40 ms later.
    disable_nagle_algorithm = True
    _keep_open = False

    def setup(self) -> None:
        super().setup()
        self._body = _BodyOnce(self.rfile)
        self.rfile = self._body  # type: ignore[assignment]

    def make_environ(self) -> dict[str, Any]:
        self._body.body_read = False
        environ = super().make_environ()
        chunked = environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked"
        length = environ.get("CONTENT_LENGTH") or "0"
        self._keep_open = not chunked and length.isdigit()
        if self._keep_open:
            environ["wsgi.input"] = io.BytesIO(self._body.read(int(length)))
            self._body.body_read = True
        return environ

    def send_header(self, keyword: str, value: str) -> None:
        if self._keep_open and keyword.lower() == "connection" and value.lower() == "close":
            return  # the whole body was read: the next request line is next on the stream
        super().send_header(keyword, value)
