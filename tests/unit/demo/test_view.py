"""The live view renders leases per worker, states and events from a snapshot."""

from __future__ import annotations

from rich.console import Console

from tools.demo.view import FleetSnapshot, lease_rows_from_items, render


def test_render_counts_leases_per_worker() -> None:
    items = [
        {
            "leaseKey": {"S": "shardId-a"},
            "leaseOwner": {"S": "worker-1@host:1:x"},
            "checkpoint": {"S": "123"},
        },
        {
            "leaseKey": {"S": "shardId-b"},
            "leaseOwner": {"S": "worker-1@host:1:x"},
            "checkpoint": {"S": "SHARD_END"},
        },
        {
            "leaseKey": {"S": "shardId-c"},
            "checkpoint": {"S": "TRIM_HORIZON"},
            "parentShardId": {"SS": ["shardId-b"]},
        },
        {"leaseKey": {"S": "__worker__#worker-1@host:1:x"}, "workerId": {"S": "worker-1@host:1:x"}},
    ]
    rows = lease_rows_from_items(items)
    assert [r.shard_id for r in rows] == ["shardId-a", "shardId-b", "shardId-c"]
    snapshot = FleetSnapshot(
        12.0,
        rows,
        {"worker-1": "running", "worker-2": "killed"},
        100,
        90,
        8.3,
        7.5,
        None,
        1,
        1,
        2,
        ("t+5s worker-2 joined",),
    )
    console = Console(width=120, record=True)
    console.print(render(snapshot))
    text = console.export_text()
    assert "worker-2" in text and "killed" in text and "t+5s worker-2 joined" in text
    line = next(line for line in text.splitlines() if "worker-1" in line and "running" in line)
    assert line.rstrip(" │").endswith("1")  # one active lease; the finished one is counted apart
    # The last frame leaves the events out: the demo prints them all after it, once.
    last = Console(width=120, record=True)
    last.print(render(snapshot, events=False))
    frame = last.export_text()
    assert "t+5s worker-2 joined" not in frame and "worker-2" in frame
