"""The demo's live terminal view: pure rendering of a :class:`FleetSnapshot` with rich.

Gathering the snapshot (a Scan of the leases table, DescribeStream, counting the change log) happens
in the demo's loop; this module only turns it into a picture, so it can be tested without I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ground.positions import SHARD_END


@dataclass(frozen=True)
class LeaseRow:
    shard_id: str
    owner: str | None
    checkpoint: str
    parents: tuple[str, ...]


@dataclass(frozen=True)
class FleetSnapshot:
    elapsed_seconds: float
    leases: tuple[LeaseRow, ...]
    workers: dict[str, str]  # worker process name -> state (running, killed, paused, stopped)
    writes: int
    delivered: int
    writes_per_second: float
    delivered_per_second: float
    lag_millis: int | None
    open_shards: int
    closed_shards: int
    generations: int
    events: tuple[str, ...] = field(default_factory=tuple)


def lease_rows_from_items(items: list[dict[str, dict[str, object]]]) -> tuple[LeaseRow, ...]:
    """Leases-table items (low-level attribute values) to rows; rows an older version wrote there
    (heartbeats, the first-start marker: keys starting ``__``) are skipped."""
    rows = []
    for item in items:
        key = str(item["leaseKey"]["S"])
        if key.startswith("__"):
            continue
        owner = item.get("leaseOwner", {}).get("S")
        parents = item.get("parentShardId", {}).get("SS") or ()
        assert isinstance(parents, (list, tuple))
        rows.append(
            LeaseRow(
                shard_id=key,
                owner=str(owner) if owner else None,
                checkpoint=str(item.get("checkpoint", {}).get("S", "?")),
                parents=tuple(str(p) for p in parents),
            )
        )
    return tuple(sorted(rows, key=lambda r: r.shard_id))


def _short(shard_id: str) -> str:
    return shard_id[-12:]


def render(snapshot: FleetSnapshot, *, events: bool = True) -> RenderableType:
    """The live view; ``events=False`` for the last frame, after which the demo prints every event
    once in its events block (the panel shows only the latest, and would repeat them)."""
    per_owner = Counter(row.owner or "(free)" for row in snapshot.leases if row.checkpoint != SHARD_END)
    finished = sum(1 for row in snapshot.leases if row.checkpoint == SHARD_END)

    header = Text.assemble(
        ("t+", "dim"),
        (f"{snapshot.elapsed_seconds:5.0f}s  ", "bold"),
        (f"writes {snapshot.writes} ({snapshot.writes_per_second:.0f}/s)  ", "cyan"),
        (f"delivered {snapshot.delivered} ({snapshot.delivered_per_second:.0f}/s)  ", "green"),
        (
            f"lag {snapshot.lag_millis} ms  "
            if snapshot.lag_millis is not None
            else f"backlog {max(0, snapshot.writes - snapshot.delivered)}  ",
            "yellow",
        ),
        (
            f"shards {snapshot.open_shards} open / {snapshot.closed_shards} closed, "
            f"{snapshot.generations} generations",
            "magenta",
        ),
    )

    workers = Table(title="workers", expand=True)
    workers.add_column("worker")
    workers.add_column("state")
    workers.add_column("leases", justify="right")
    owners_seen: set[str] = set()
    for name, state in sorted(snapshot.workers.items()):
        owned = sum(count for owner, count in per_owner.items() if owner.startswith(f"{name}@"))
        owners_seen.update(owner for owner in per_owner if owner.startswith(f"{name}@"))
        style = {"running": "green", "killed": "red", "paused": "yellow"}.get(state, "dim")
        workers.add_row(name, Text(state, style=style), str(owned))
    for owner, count in sorted(per_owner.items()):
        if owner not in owners_seen:
            workers.add_row(owner, Text("-", style="dim"), str(count))
    workers.add_row("(finished leases)", "", str(finished))

    leases = Table(title="leases", expand=True)
    for column in ("shard", "owner", "checkpoint", "parent"):
        leases.add_column(column, overflow="fold")
    for row in snapshot.leases[-16:]:
        owner = row.owner.split("@")[0] if row.owner else "-"
        leases.add_row(
            _short(row.shard_id), owner, row.checkpoint[-14:], ", ".join(_short(p) for p in row.parents)
        )

    if not events:
        return Group(header, workers, leases)
    latest = Text("\n".join(snapshot.events[-8:]) or "(none yet)")
    return Group(header, workers, leases, Panel(latest, title="events"))
