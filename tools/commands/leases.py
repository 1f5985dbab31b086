"""``consumer leases``: the leases table as a person wants to see it (readable, unlike raw items).

One row per lease (shard, owner, checkpoint, counter, parents, state), then per-worker counts with the
age of each worker's heartbeat. States: free, held, expired (owner's heartbeat too old), pending-steal
(a hand-over was requested), finished (SHARD_END), and malformed items are listed with their problem.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from consumer.api.leases import DynamoDBLeaseStore, LeaseTableMissingError, Snapshot, Timing, live_workers
from ground.settings import Settings
from tools.commands import (
    CommandError,
    ExitCode,
    add_command,
    add_env_arguments,
    require_local_endpoint_up,
    settings_from,
)
from tools.dashboard.lease_view import lease_state


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "leases",
        "show the leases table: who holds which shard, checkpoints",
        "Read the environment's leases and workers tables and show one row per lease (shard, owner, "
        "checkpoint, counter, parents, state: free, held, expired, pending-steal, finished), then each "
        "worker with its lease count and the age of its heartbeat.",
    )
    add_env_arguments(parser)
    parser.add_argument("--all", action="store_true", help="include finished (SHARD_END) leases")
    parser.set_defaults(handler=_show)


def render(snapshot: Snapshot, now_wall: int, timing: Timing, *, show_finished: bool) -> list[Table]:
    live = live_workers(snapshot, now_wall, timing)
    leases = Table(title=leases_title(snapshot, show_finished=show_finished))
    for column in ("shard", "owner", "checkpoint", "counter", "parents", "state"):
        leases.add_column(column, overflow="fold")
    for lease in sorted(snapshot.leases.values(), key=lambda item: item.shard_id):
        if lease.finished and not show_finished:
            continue
        leases.add_row(
            lease.shard_id,
            lease.owner or "-",
            str(lease.checkpoint),
            str(lease.counter),
            ", ".join(sorted(lease.parent_shard_ids)) or "-",
            lease_state(lease, snapshot, live),
        )
    for bad in snapshot.malformed:
        leases.add_row(bad.key, "?", "?", "?", "?", f"malformed: {bad.problem}")

    held = Counter(lease.owner for lease in snapshot.leases.values() if lease.owner and not lease.finished)
    workers = Table(title="workers")
    for column in ("worker", "leases", "heartbeat age", "alive"):
        workers.add_column(column)
    for worker in sorted(set(held) | set(snapshot.heartbeats)):
        beat = snapshot.heartbeats.get(worker)
        age = f"{(now_wall - beat.at_wall_millis) / 1000:.1f} s" if beat else "no heartbeat row (KCL?)"
        workers.add_row(worker, str(held.get(worker, 0)), age, "yes" if worker in live else "no")
    return [leases, workers]


def leases_title(snapshot: Snapshot, *, show_finished: bool) -> str:
    """The table's title counts the rows under it, and says what is left out and how to see it."""
    finished = sum(1 for lease in snapshot.leases.values() if lease.finished)
    malformed = len(snapshot.malformed)
    shown = len(snapshot.leases) - (0 if show_finished else finished) + malformed
    parts = [f"leases ({shown} shown"]
    if finished:
        parts.append(f"{finished} finished" + ("" if show_finished else ", hidden: --all shows them"))
    if malformed:
        parts.append(f"{malformed} malformed")
    return "; ".join(parts) + ")"


def missing_table_fix(settings: Settings) -> str:
    """What to do when the leases table is not there: it appears with the first worker."""
    first = f"`consumer run --env {settings.env}` creates it"
    if settings.on_emulator:
        return (
            f"no worker of env {settings.env} has run on this emulator yet: {first} (on a restarted "
            f"emulator, after `consumer local up --env {settings.env}`)"
        )
    return f"no worker of env {settings.env} has started in {settings.region} yet: {first}"


def _show(args: argparse.Namespace) -> int:
    from consumer.api.aws import client_for

    settings = settings_from(args)
    require_local_endpoint_up(settings)
    client = client_for(settings, "dynamodb")
    try:
        snapshot = DynamoDBLeaseStore(
            client, settings.leases_table_name, workers_table_name=settings.workers_table_name
        ).scan()
    except LeaseTableMissingError:
        where = settings.endpoint_url or settings.region
        raise CommandError(
            f"leases table {settings.leases_table_name} does not exist at {where}: {missing_table_fix(settings)}",
            ExitCode.UNAVAILABLE,
        ) from None
    timing = Timing.of(settings.worker)
    console = Console(width=200)
    for table in render(snapshot, time.time_ns() // 1_000_000, timing, show_finished=args.all):
        console.print(table)
    return 0
