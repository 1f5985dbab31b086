"""``consumer dashboard``: the CloudWatch dashboard's widgets drawn locally into a PNG and a page,
or (``--serve``) served live to a browser with the lease table while a local fleet runs.

Reads the EMF documents back from the metrics log group (the emulator's CloudWatch Logs when
``--env local``) or from a JSON Lines file of EMF documents (``--from-file``).
"""

from __future__ import annotations

import argparse
from typing import Any

from tools.commands import add_command, add_env_arguments, require_local_endpoint_up, settings_from


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "dashboard",
        "draw the dashboard's widgets from the collected metrics (PNG + HTML), or serve them live",
        "Draw the CloudWatch dashboard's panels locally, from the workers' EMF documents read back "
        "from the metrics log group (the emulator's, for a local environment) or from a JSON Lines "
        "file. A panel that stays empty says why. With --serve, a page on 127.0.0.1 shows the same "
        "panels and the lease table (who holds what, checkpoints, lag), updated every two seconds "
        "while a local fleet (`consumer run`, `consumer demo`) works.",
    )
    add_env_arguments(parser)
    parser.add_argument(
        "--out", default="var/dashboard.png", help="PNG to write; the HTML page goes beside it"
    )
    parser.add_argument(
        "--from-file", default=None, help="read EMF documents from this JSON Lines file instead"
    )
    parser.add_argument(
        "--since-minutes",
        type=float,
        default=None,
        help="only documents from the last N minutes (Logs source)",
    )
    parser.add_argument(
        "--start-millis",
        type=int,
        default=None,
        help="epoch milliseconds drawn as t+0 on the time axis (`consumer demo` passes its own start; "
        "default: the start of the first document's period)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="serve the panels and the lease table live on http://127.0.0.1:PORT/ until Ctrl-C",
    )
    parser.add_argument(
        "--port", type=int, default=8599, help="port of --serve on 127.0.0.1 (0: any free port)"
    )
    parser.set_defaults(handler=_dashboard)


def _serve(args: argparse.Namespace, settings: Any) -> int:
    import signal
    import time
    from pathlib import Path

    from consumer.api.aws import client_for, logs_client
    from consumer.api.leases import DynamoDBLeaseStore, Timing
    from tools.commands import CommandError, ExitCode
    from tools.dashboard.errors import DashboardError
    from tools.dashboard.lease_view import LeaseFeed
    from tools.dashboard.live import FileFeed, LiveDashboard, LiveServer, LogGroupFeed
    from tools.dashboard.widgets import reference_lines, widgets_for

    feed: Any
    if args.from_file:
        feed = FileFeed(Path(args.from_file))
    else:
        require_local_endpoint_up(settings)
        start = None
        if args.since_minutes is not None:
            start = int((time.time() - args.since_minutes * 60) * 1000)
        feed = LogGroupFeed(logs_client(settings), settings.metrics_log_group, start)
    leases = None
    if not args.from_file or settings.endpoint_url:
        store = DynamoDBLeaseStore(
            client_for(settings, "dynamodb"),
            settings.leases_table_name,
            workers_table_name=settings.workers_table_name,
        )
        leases = LeaseFeed(store, Timing.of(settings.worker), settings.leases_table_name)
    dashboard = LiveDashboard(
        title=f"{settings.application_name} ({settings.env})",
        feed=feed,
        widgets=widgets_for(settings),
        references=reference_lines(settings),
        bucket_seconds=settings.metrics.flush_interval_seconds,
        leases=leases,
        start_millis=args.start_millis,
    )
    try:
        server = LiveServer(dashboard, port=args.port)
    except DashboardError as exc:
        raise CommandError(str(exc), ExitCode.UNAVAILABLE) from exc
    # SIGTERM stops it as Ctrl-C does: KeyboardInterrupt, raised in the main thread wherever it is,
    # and caught around all of the serving (a signal while the server starts or stops exits 0 too).
    # A handler that set an Event the main thread waits on could find that thread holding the
    # Event's lock (it does, entering the wait) and wait for it forever (docs/leases.md, Graceful
    # stop). The main thread sleeps a second at a time rather than in signal.pause(), which a signal
    # that lands just before it is entered would leave blocked until the next one.
    try:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with server:
            print(f"live dashboard: {server.url} (reading {feed.description}; Ctrl-C stops)", flush=True)
            while True:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from consumer.api.aws import logs_client
    from tools.commands import CommandError
    from tools.dashboard.errors import DashboardError
    from tools.dashboard.readback import points_of_all, read_jsonl, read_log_group
    from tools.dashboard.render import render
    from tools.dashboard.widgets import reference_lines, widgets_for

    settings = settings_from(args)
    if args.serve:
        return _serve(args, settings)
    try:
        if args.from_file:
            documents = read_jsonl(args.from_file)
            source = args.from_file
        else:
            require_local_endpoint_up(settings)
            start = None
            if args.since_minutes is not None:
                import time

                start = int((time.time() - args.since_minutes * 60) * 1000)
            documents = read_log_group(logs_client(settings), settings.metrics_log_group, start)
            source = f"log group {settings.metrics_log_group}"
        rendered = render(
            points_of_all(documents),
            args.out,
            bucket_seconds=settings.metrics.flush_interval_seconds,
            references=reference_lines(settings),
            widgets=widgets_for(settings),
            title=f"{settings.application_name} ({settings.env}) - from {source}",
            start_millis=args.start_millis,
        )
    except DashboardError as exc:
        raise CommandError(str(exc)) from exc
    workers = len(rendered.workers)
    print(f"wrote {rendered.png} and {rendered.html} ({workers} workers, {len(documents)} documents)")
    return 0
