"""The demo's check that its emulator port is free: refused while a program listens there, allowed
while only a previous emulator's closed connections linger in TIME_WAIT (which the emulator binds
past), so `make demo` run twice in a row does not stop on the second."""

from __future__ import annotations

import socket

from tools.demo.stage import _free


def _listener() -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug's HTTP server
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_a_port_with_a_listener_is_taken() -> None:
    with _listener() as server:
        assert not _free(server.getsockname()[1])


def test_a_port_left_in_time_wait_by_a_stopped_server_is_free() -> None:
    server = _listener()
    port = server.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port)) as client:
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
        client.recv(1)  # the peer's FIN has arrived
    server.close()
    assert _free(port)
    # The same probe without SO_REUSEADDR is what refused the second demo.
    with socket.socket() as plain:
        try:
            plain.bind(("127.0.0.1", port))
            bound = True
        except OSError:
            bound = False
    assert not bound
