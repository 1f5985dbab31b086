"""Records trimmed from under live workers, for the fleet run (test_fleet_on_emulator.py)."""

from __future__ import annotations

from pathlib import Path

from emulator.testing import RunningEmulator
from tests.support import wait_for
from tools.demo.fleet import LocalFleet
from tools.demo.verdict import read_changelog


def trim_under_live_workers(emu: RunningEmulator, fleet: LocalFleet, changelog: Path, table: str) -> None:
    """Freeze the workers still running (shorter than the fence), write, trim everything, thaw:
    their next read is past the oldest record left, and one of them must say so (RECORDS_TRIMMED_LOST).

    Markers are delivered first. Once the load has stopped, the open shards are empty: a worker whose
    iterator expired during the freeze asks again from TRIM_HORIZON and is rightly told nothing (CI
    on a clean clone timed out here). A marker puts each worker's position on a record of an open
    shard, which the trim takes, so a fresh iterator after it is refused as well."""
    dynamodb = emu.client("dynamodb")
    markers = {f"marker-{i}" for i in range(12)}
    for key in sorted(markers):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": key}})
    wait_for(lambda: markers <= {c.key for c in read_changelog(changelog, "pk")}, 60, "the markers' delivery")
    alive = [p.name for p in fleet.alive()]
    for name in alive:
        fleet.pause(name)
    for i in range(10):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": f"trimmed-{i}"}})
    emu.control.trim(table, older_than_seconds=0)
    for name in alive:
        fleet.resume(name)

    def reported() -> bool:
        return any(
            "RECORDS_TRIMMED_LOST" in fleet.workers[n].log_path.read_text(errors="replace") for n in alive
        )

    wait_for(reported, 60, "a worker to report the trimmed records")
