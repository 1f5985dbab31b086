"""``python -m emulator``: serve moto, the stream engine and Kinesis on one loopback endpoint.

Settings come from ``config/<env>.yaml`` (section ``emulator``); flags override them. With
``--port 0`` the operating system picks a free port. Once the socket is listening the process prints
one line ``EMULATOR READY <endpoint>`` on stdout, which is what :mod:`emulator.testing` and
``consumer local up`` wait for. SIGTERM and SIGINT stop it cleanly.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from werkzeug.serving import make_server

from emulator.app import EmulatorApp
from emulator.config import EngineConfig
from emulator.engine import StreamEngine
from emulator.errors import ControlError
from emulator.faults import FaultSettings
from emulator.keep_alive import KeepAliveRequestHandler
from emulator.kinesis_engine import KinesisEngine
from emulator.moto_bridge import MotoBridge
from ground.settings import ConfigError, EmulatorSettings, load_settings

READY_PREFIX = "EMULATOR READY "
TICK_SECONDS = 0.25


def _flag(text: str) -> bool:
    """A true/false flag's value (argparse's ``bool`` would take "False" for true)."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return lowered in ("true", "1", "yes")


# flag name -> (settings key, type); faults live under "faults".
OVERRIDES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "port": ("port", int),
    "partitions": ("partitions", int),
    "rollover_seconds": ("rollover_seconds", float),
    "split_every_seconds": ("split_every_seconds", float),
    "trim_after_seconds": ("trim_after_seconds", float),
    "iterator_expiry_seconds": ("iterator_expiry_seconds", float),
    "seed": ("seed", int),
    "unknown_record_fields": ("unknown_record_fields", _flag),
    "error_rate": ("faults.error_rate", float),
    "latency_millis": ("faults.latency_millis", int),
    "reads_per_shard_per_second": ("faults.reads_per_shard_per_second", float),
    "describe_stream_per_second": ("faults.describe_stream_per_second", float),
    "consistency_delay_millis": ("faults.consistency_delay_millis", int),
    "child_visibility_delay_millis": ("faults.child_visibility_delay_millis", int),
}

# Table faults settable at start-up (flags only: they are not part of config/<env>.yaml; the control
# API changes them live). Names are FaultSettings fields.
TABLE_FAULT_FLAGS: dict[str, type] = {
    "table_throttle_rate": float,
    "table_error_rate": float,
    "table_latency_millis": int,
    "table_latency_tail_millis": int,
    "table_latency_tail_rate": float,
    "table_ambiguous_rate": float,
    "table_ambiguous_delay_millis": int,
    "table_stale_scan_millis": int,
    "table_fault_tables": str,
}
STARTUP_FLAGS = frozenset(OVERRIDES) | frozenset(TABLE_FAULT_FLAGS)


def add_override_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per emulator setting (``--rollover-seconds 5``...), each overriding the config."""
    for name, (key, kind) in OVERRIDES.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, type=kind, default=None, help=f"override emulator.{key}")
    for name, kind in TABLE_FAULT_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, type=kind, default=None, help=f"table fault {name} at start-up")


def table_faults_from(args: argparse.Namespace) -> dict[str, Any]:
    """The table-fault flags that were given, by FaultSettings field name."""
    return {name: getattr(args, name) for name in TABLE_FAULT_FLAGS if getattr(args, name, None) is not None}


def overrides_from(args: argparse.Namespace) -> dict[str, Any]:
    """The flags that were given, as a nested dict in the shape of EmulatorSettings."""
    nested: dict[str, Any] = {}
    for name, (key, _) in OVERRIDES.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        section, _, leaf = key.rpartition(".")
        (nested.setdefault(section, {}) if section else nested)[leaf] = value
    return nested


def emulator_settings(base: EmulatorSettings, overrides: dict[str, Any]) -> EmulatorSettings:
    data = base.model_dump()
    faults = overrides.pop("faults", {})
    data.update(overrides)
    data["faults"].update(faults)
    return EmulatorSettings.model_validate(data)


def serve(
    settings: EmulatorSettings,
    announce: Any = print,
    exit_with_parent: bool = False,
    table_faults: dict[str, Any] | None = None,
) -> None:
    """Run until SIGTERM/SIGINT (or, with ``exit_with_parent``, until the starting process dies, so
    a test runner killed mid-test leaves no emulator behind). ``announce`` receives the ready line;
    ``table_faults`` are FaultSettings table_* values to start with."""
    parent = os.getppid()
    config = EngineConfig.from_settings(settings)
    if table_faults:
        config = replace(config, faults=config.faults.updated(table_faults))
    engine = StreamEngine(config)
    bridge = MotoBridge(engine)
    bridge.install()
    kinesis = KinesisEngine(config, faults=lambda: engine.faults)
    app = EmulatorApp(engine, bridge, kinesis)
    server = make_server(
        settings.host, settings.port, app, threaded=True, request_handler=KeepAliveRequestHandler
    )
    stop = threading.Event()
    # SIGTERM/SIGINT only note themselves here: the handler runs on the main thread, which may hold
    # a lock at that moment (serve_forever starts a thread per connection, under threading's own
    # lock), so it takes none; the ticker sees the note within a tick and stops the server.
    signalled: list[int] = []
    failed: list[BaseException] = []

    def ticker() -> None:
        try:
            while not stop.wait(TICK_SECONDS):
                if signalled or (exit_with_parent and os.getppid() != parent):
                    break
                engine.tick()
                kinesis.tick()
        except BaseException as exc:
            failed.append(exc)
        finally:  # a tick that raised stops the emulator too, rather than leaving it serving a stream
            # whose time stands still and that no SIGTERM can stop any more
            stop.set()
            server.shutdown()  # returns once serve_forever, on the main thread, has

    signal.signal(signal.SIGTERM, lambda signum, _frame: signalled.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: signalled.append(signum))
    threading.Thread(target=ticker, name="emulator-ticker", daemon=True).start()
    host, port = server.server_address[:2]
    announce(f"{READY_PREFIX}http://{host!s}:{port}")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        stop.set()
        server.server_close()
    if failed:
        raise RuntimeError("the emulator stopped: a tick of its streams failed") from failed[0]


def announce_ready(line: str) -> None:
    """Write the ready line in one ``write`` and then let go of stdout.

    ``print`` writes the text and its newline separately when Python runs unbuffered
    (``PYTHONUNBUFFERED=1``), and whoever waits for the line may close its end of the pipe as soon as
    it has the text: the newline then fails with EPIPE and, before this, took the emulator down with
    it. One ``os.write`` of the whole line is atomic for a pipe (well under PIPE_BUF), and pointing
    stdout at /dev/null afterwards means nothing printed later can hit the closed pipe.
    """
    data = (line + "\n").encode()
    with contextlib.suppress(OSError):  # a reader that already left is not the emulator's problem
        os.write(sys.stdout.fileno(), data)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m emulator", description=__doc__)
    parser.add_argument("--env", default="local", help="environment: config/<env>.yaml (default: local)")
    parser.add_argument("--config-dir", default=None, help="configuration directory (default: ./config)")
    parser.add_argument("--quiet", action="store_true", help="do not log every request")
    parser.add_argument("--exit-with-parent", action="store_true", help="stop when the starting process dies")
    add_override_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        base = load_settings(args.env, args.config_dir).emulator
        settings = emulator_settings(base, overrides_from(args))
        table_faults = table_faults_from(args)
        FaultSettings().updated(table_faults)  # refuse a bad value before listening
    except ConfigError as exc:
        print(f"configuration error:\n{exc}", file=sys.stderr)
        return 2
    except (ValueError, ControlError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"bad emulator flag: {exc}", file=sys.stderr)
        return 2
    if settings.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"emulator.host must be a loopback address, got {settings.host}", file=sys.stderr)
        return 2
    if args.quiet:
        import logging

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
    try:
        serve(
            settings,
            announce=announce_ready,
            exit_with_parent=args.exit_with_parent,
            table_faults=table_faults,
        )
    except OSError as exc:
        print(f"cannot listen on {settings.host}:{settings.port}: {exc}", file=sys.stderr)
        return 1
    return 0
