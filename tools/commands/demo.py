"""``consumer demo``: run the whole system locally and print a verdict (``make demo``)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from tools.commands import CommandError, ExitCode, add_command, add_env_arguments, settings_from
from tools.demo.chaos import SCHEDULES

if TYPE_CHECKING:
    from ground.settings import Settings
    from tools.demo.run import DemoOutcome


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "demo",
        "run the whole system locally (load, workers, kill, Spark) and judge it",
        "Run the whole system on this machine (what `make demo` does): the emulator, a seeded write "
        "load, worker processes that share the stream while one joins, a shard splits and a lease "
        "holder is killed, then Spark builds the table's current state and verifies it, and the "
        "dashboard is drawn. Ends with a verdict: nothing lost, nothing reordered (exit 0) or not (1).",
    )
    add_env_arguments(parser)
    parser.add_argument(
        "--workers", type=int, default=3, help="worker processes to start (one more joins later)"
    )
    parser.add_argument(
        "--chaos",
        type=int,
        metavar="SEED",
        nargs="?",
        const=1,
        help="chaos mode: random SIGKILL/SIGSTOP/restarts, stream and table faults, a slow processor "
        "(seeded; default seed 1)",
    )
    parser.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default=None,
        help="chaos schedule (with --chaos): mixed (default: every kind of disruption), dense-pause "
        "(many overlapping SIGSTOP/SIGCONT around the failover time), slow-table (leases tables slow, "
        "ambiguous, stale and throttled for long stretches)",
    )
    parser.add_argument(
        "--skip-spark",
        action="store_true",
        help="leave out the Spark steps (bootstrap, snapshot, verify; about two minutes): the verdict "
        "still judges the change log against every write; for repeated chaos runs",
    )
    parser.add_argument(
        "--source",
        choices=("dynamodb", "kinesis"),
        default="dynamodb",
        help="what the fleet reads: the table's DynamoDB stream (default), or a Kinesis data stream "
        "on the emulator (a load with partition keys, some records KPL-aggregated; a split and a merge "
        "mid-run; the verdict from what the workers recorded; no Spark steps)",
    )
    parser.add_argument("--workdir", default="var/demo", help="where the demo keeps its oracle and logs")
    parser.add_argument(
        "--dashboard-port",
        type=int,
        default=0,
        help="port of the live dashboard on 127.0.0.1 (default 0: any free port; the demo prints its "
        "address)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Spark's own warnings and log4j banners (hidden by default; errors always show)",
    )
    parser.set_defaults(handler=_demo)


def _step(console: Console, title: str, command: list[str]) -> tuple[int, str]:
    console.rule(title)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    output = (result.stdout + result.stderr).strip()
    # Not wrapped at the console's width: a step's line (a long change-log path, say) stays one line,
    # as the step printed it, for whoever reads or compares the output (docs/demo.md's capture).
    console.print(output[-4000:], markup=False, highlight=False, soft_wrap=True)
    return result.returncode, output


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM (a CI job's timeout, ``kill``) stops the demo as Ctrl-C does: its workers, frozen ones
    included, and the emulator are stopped on the way out rather than left running."""
    raise KeyboardInterrupt


def _demo(args: argparse.Namespace) -> int:
    from tools.demo.kinesis_run import KinesisDemo, kinesis_overrides
    from tools.demo.run import Demo, DemoError, start_local_aws, stop_process

    if args.source == "kinesis":  # before the settings are read; the workers inherit them too
        os.environ.update(kinesis_overrides())
        args.skip_spark = True
    settings = settings_from(args)
    if args.schedule is not None and args.chaos is None:
        raise CommandError("--schedule chooses a chaos schedule: give --chaos SEED too", ExitCode.USAGE)
    config_dir, workdir = _prepare(args, settings)
    if not settings.endpoint_url:
        raise CommandError(
            f"env {settings.env} has no endpoint_url: the demo runs only against a local endpoint",
            ExitCode.USAGE,
        )
    console = Console()
    console.rule("dynamodb-stream-fleet demo")
    console.print(
        f"local AWS endpoint {settings.endpoint_url}: the emulator (moto for DynamoDB, S3, Logs, CloudWatch; "
        f"a DynamoDB Streams engine with {settings.emulator.partitions} partitions, rollover every "
        f"{settings.emulator.rollover_seconds:g} s, a split on cue)"
    )
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        server = start_local_aws(settings.env, config_dir, settings.endpoint_url, workdir / "local-aws.log")
    except DemoError as exc:
        raise CommandError(str(exc), ExitCode.UNAVAILABLE) from None
    live = None
    try:
        live = live_dashboard(settings, args.dashboard_port)
        console.print(
            f"live dashboard: {live.url} (panels and leases, until the demo ends)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        if args.source == "kinesis":
            outcome = KinesisDemo(
                settings,
                config_dir,
                workdir,
                console,
                chaos_seed=args.chaos,
                schedule=args.schedule or "mixed",
                live=live.dashboard,
            ).run(workers=args.workers)
        else:
            outcome = Demo(
                settings,
                config_dir,
                workdir,
                console,
                chaos_seed=args.chaos,
                schedule=args.schedule or "mixed",
                bootstrap=not args.skip_spark,
                live=live.dashboard,
            ).run(workers=args.workers)
        verify_code, dash_code = _after_the_fleet(
            console, args, settings, config_dir=config_dir, workdir=workdir, outcome=outcome
        )
    except DemoError as exc:
        console.print(f"[red]demo failed: {exc}")
        return ExitCode.FAILED
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: every process the demo started has been stopped")
        return ExitCode.INTERRUPTED
    finally:
        if live is not None:
            live.stop()
        stop_process(server)

    judged_ok = _report(console, outcome, verify_code)
    spark_ok = args.skip_spark or verify_code == 0
    ok = judged_ok and spark_ok and dash_code == 0
    console.print(
        "[green]VERDICT: nothing lost, nothing reordered" if ok else "[red]VERDICT: FAILED (see above)"
    )
    return ExitCode.OK if ok else ExitCode.FAILED


def _prepare(args: argparse.Namespace, settings: Settings) -> tuple[Path, Path]:
    """What the demo starts from: credentials for the local endpoint and empty work directories
    (every table's change log, the pipeline's local outputs). Returns the config and work directories."""
    from tools.demo.run import prepare_workdir

    # The local endpoint accepts any credentials; a machine with none configured still runs the demo
    # (the worker processes inherit these).
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", settings.region)
    config_dir = Path(args.config_dir or "config")
    workdir = Path(args.workdir)
    for view in settings.per_stream():  # every table's change log starts empty
        prepare_workdir(workdir, Path(str(view.processing.options.get("destination", "var/changelog"))))
    for uri in (settings.pipeline.snapshot_uri, settings.pipeline.stats_uri):
        if "://" not in uri:
            prepare_workdir(Path(uri), Path(uri))
    return config_dir, workdir


def _after_the_fleet(
    console: Console,
    args: argparse.Namespace,
    settings: Settings,
    *,
    config_dir: Path,
    workdir: Path,
    outcome: DemoOutcome,
) -> tuple[int | None, int]:
    """The steps once the fleet has stopped: Spark builds the table's current state and verifies it
    (unless ``--skip-spark``: its exit code is then None), and the dashboard is drawn."""
    cli = [sys.executable, "-m", "tools.cli"]
    env = ["--env", settings.env, "--config-dir", str(config_dir)]
    spark = ["-v"] if args.verbose else []
    verify_code: int | None = None
    if not args.skip_spark:
        # One Spark session for both jobs: `snapshot --verify` verifies what it just committed.
        verify_code, _ = _step(
            console,
            "Spark: change log -> current state of the table, then verified against a scan of it",
            [*cli, "pipeline", "snapshot", "--verify", *env, *spark],
        )
    # The dashboard's time axis is the demo's clock (t+0 when the load started), as in the events.
    dash_code, _ = _step(
        console,
        "dashboard",
        [
            *cli,
            "dashboard",
            *env,
            "--out",
            str(workdir / "dashboard.png"),
            "--start-millis",
            str(outcome.started_millis),
        ],
    )
    return verify_code, dash_code


# Positions recorded twice listed per shard under an unexplained redelivery: who recorded each copy.
COPIES_SHOWN_PER_SHARD = 10


def _report(console: Console, outcome: DemoOutcome, verify_code: int | None) -> bool:
    """The events, each table's verdict and the fleet's figures, the duplicate deliveries; True when
    every table's verdict holds and every duplicate delivery is explained."""
    events = outcome.events
    console.rule("events")
    for line in events.events:
        console.print(line, markup=False, soft_wrap=True)
    unexplained = [r for r in events.redeliveries if not r.explained]
    verdicts = outcome.verdicts or (("", outcome.verdict),)
    kinesis = outcome.source == "kinesis"
    # Kinesis: every redelivery is recorded, and a worker says each one it gets (delivery_log.py);
    # one recorded but not said has no cause attributed, so it counts as unexplained.
    unsaid = max(0, outcome.verdict.duplicates - events.duplicate_deliveries) if kinesis else 0
    for name, verdict in verdicts:
        table = Table(title=f"verdict: table {name}" if len(verdicts) > 1 else "verdict")
        table.add_column("figure")
        table.add_column("value", justify="right")
        rows: list[tuple[str, object]] = (
            [
                ("user records put (acknowledged)", verdict.written),
                ("user records delivered (distinct)", verdict.delivered),
                ("lost", verdict.lost),
                ("unexpected", verdict.unexpected),
                ("per-partition-key order violations (delivery order)", verdict.order_violations),
                ("(shard, position) recorded twice by the delivery log", verdict.duplicates),
            ]
            if kinesis
            else [
                ("changes written", verdict.written),
                ("changes delivered (distinct)", verdict.delivered),
                ("lost", verdict.lost),
                ("unexpected", verdict.unexpected),
                ("per-item order violations (delivery order)", verdict.order_violations),
                ("(shard, sequence) twice in the change log", verdict.duplicates),
            ]
        )
        if len(verdicts) == 1:  # the fleet's own figures, under the one table's
            rows[5:5] = [
                ("records delivered twice to the processor", events.duplicate_deliveries),
                ("  of which unexplained", sum(r.records for r in unexplained) + unsaid),
            ]
            rows += _fleet_rows(events, verify_code, kinesis=kinesis)
        for figure, value in rows:
            table.add_row(figure, str(value))
        console.print(table)
        if verdict.duplicates and not kinesis:
            console.print(f"change-log objects holding a copy: {', '.join(verdict.duplicate_objects[:5])}")
    if len(verdicts) > 1:  # the fleet's figures, once for every table
        fleet = Table(title="verdict: the fleet")
        fleet.add_column("figure")
        fleet.add_column("value", justify="right")
        for figure, value in [
            ("records delivered twice to the processor", events.duplicate_deliveries),
            ("  of which unexplained", sum(r.records for r in unexplained)),
            *_fleet_rows(events, verify_code),
        ]:
            fleet.add_row(figure, str(value))
        console.print(fleet)
    for redelivery in events.redeliveries:
        console.print(
            f"duplicate delivery: {redelivery.records} record(s) of shard {redelivery.shard_id} to "
            f"{redelivery.worker}: {redelivery.cause}",
            markup=False,
        )
    if unsaid:
        console.print(
            f"{unsaid} record(s) recorded twice that no worker said it got again: no cause attributed",
            markup=False,
        )
    if kinesis and (unexplained or unsaid):  # who recorded each copy, and when: the cause to look for
        from tools.demo.events import short_shard

        # The shards of the unexplained redeliveries (all of them when one was recorded but not said).
        wanted = None if unsaid else {r.shard_id for r in unexplained}
        shown: dict[str, int] = {}
        for shard, position, copies in outcome.verdict.duplicate_copies:
            if (wanted is not None and shard not in wanted) or shown.get(shard, 0) >= COPIES_SHOWN_PER_SHARD:
                continue
            shown[shard] = shown.get(shard, 0) + 1
            seen = ", ".join(f"{who} at t+{at - outcome.started_millis / 1000:.2f}s" for who, at in copies)
            console.print(
                f"recorded twice: shard {short_shard(shard)} position {position}: {seen}", markup=False
            )
    return all(verdict.ok for _, verdict in verdicts) and not unexplained and not unsaid


def live_dashboard(settings: Any, port: int) -> Any:
    """The live dashboard's server on the emulator's metrics log group and leases table, started."""
    from consumer.api.aws import client_for, logs_client
    from consumer.api.leases import DynamoDBLeaseStore, Timing
    from tools.dashboard.errors import DashboardError
    from tools.dashboard.lease_view import LeaseFeed
    from tools.dashboard.live import LiveDashboard, LiveServer, LogGroupFeed
    from tools.dashboard.widgets import reference_lines, widgets_for

    store = DynamoDBLeaseStore(
        client_for(settings, "dynamodb"),
        settings.leases_table_name,
        workers_table_name=settings.workers_table_name,
    )
    dashboard = LiveDashboard(
        title=f"{settings.application_name} ({settings.env}): consumer demo",
        feed=LogGroupFeed(logs_client(settings), settings.metrics_log_group),
        widgets=widgets_for(settings),
        references=reference_lines(settings),
        bucket_seconds=settings.metrics.flush_interval_seconds,
        leases=LeaseFeed(store, Timing.of(settings.worker), settings.leases_table_name),
    )
    try:
        return LiveServer(dashboard, port=port).start()
    except DashboardError as exc:
        raise CommandError(str(exc), ExitCode.UNAVAILABLE) from None


def _fleet_rows(events: Any, verify_code: int | None, *, kinesis: bool = False) -> list[tuple[str, object]]:
    """The verdict's figures of the fleet as a whole (not of one table)."""
    skipped = "skipped (a Kinesis stream has no change log)" if kinesis else "skipped (--skip-spark)"
    return [
        ("leases taken / taken over / lost", f"{events.taken} / {events.taken_over} / {events.lost}"),
        ("shards ended", events.shards_ended),
        ("snapshot verify exit code", skipped if verify_code is None else verify_code),
    ]
