"""Health judged from both tables: the real watchdog (its judge, its probe of the leases and workers
tables, the heartbeat files its workers write) over a fleet whose tables fail one at a time, both at
once, or not at all while this instance's own workers fail.

Only the DynamoDB client (:class:`Tables`, a fake that answers Scan as DynamoDB does and refuses a
table on demand) and Auto Scaling (which records ``SetInstanceHealth``) stand in. Time is passed in:
every step of the watchdog, the heartbeat files and the probe read the same simulated clock.

A heartbeat row keeps being written by its own loop while every leases-table round fails, so a
probe that counted peers as fine by their heartbeat alone saw "my workers fail while the others are
fine" on every instance when only the leases table failed, and each instance marked itself
Unhealthy (measured: the whole fleet at 243-245 s at the product's 120 s limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from consumer.leases.items import ROUND_OK_ATTRIBUTE as WORKER_SIDE
from deploy.health import HealthJudge
from deploy.plan import Layout
from deploy.watchdog import ROUND_OK_ATTRIBUTE, Watchdog, WorkersTableProbe
from tests.unit.deploy.test_instance_health import Recording, plan, record

LEASES, WORKERS = "app-dev", "app-dev-workers"
ME, PEERS = "ip-10-0-0-1", ("ip-10-0-0-2", "ip-10-0-0-3")
START = 1_800_000_000.0  # the outage begins (wall seconds)


class Tables:
    """DynamoDB's Scan as the probe calls it: the leases table holds one lease, the workers table the
    peers' heartbeat rows; a table named in ``failing`` answers with that error code."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.failing: dict[str, str] = {}
        self.scans: list[str] = []

    def scan(self, **request: Any) -> dict[str, Any]:
        table = request["TableName"]
        self.scans.append(table)
        if table in self.failing:
            code = self.failing[table]
            raise ClientError({"Error": {"Code": code, "Message": f"{table}: {code}"}}, "Scan")
        if table == LEASES:
            return {
                "Items": [{"leaseKey": {"S": "shardId-1"}, "leaseCounter": {"N": "4"}}][: request["Limit"]]
            }
        return {"Items": list(self.rows)}


def peer_rows(now: float, *, beat_age: float, round_age: float | None) -> list[dict[str, Any]]:
    """Two workers on each peer host, as the worker writes its row (wall milliseconds)."""
    rows = []
    for host in PEERS:
        for unit in (1, 2):
            row = {
                "workerId": {"S": f"{host}-{unit}@{host}:{unit}:abc"},
                "heartbeatCounter": {"N": "7"},
                "heartbeatAt": {"N": str(int((now - beat_age) * 1000))},
                "leaseCount": {"N": "3"},
            }
            if round_age is not None:
                row[ROUND_OK_ATTRIBUTE] = {"N": str(int((now - round_age) * 1000))}
            rows.append(row)
    return rows


def run_fleet(tmp_path: Path, failing: str) -> Recording:
    """Three age limits of polls (every 5 s) from the start of ``failing``:

    * ``leases``: the leases table refuses everyone: every worker's rounds fail, while the heartbeat
      loops go on writing their rows;
    * ``workers``: the workers table refuses everyone (heartbeats and rounds fail);
    * ``both``: both tables refuse;
    * ``mine``: both tables answer and the other instances' rounds succeed; only this instance's
      workers fail (its own network, a wedged process that still writes its file).
    """
    layout, p = Layout(tmp_path), plan(workers_table=WORKERS, leases_table=LEASES)
    limit = p.heartbeat_max_age_seconds
    tables, group = Tables(), Recording()
    clock = [START]
    table_errors = {
        "leases": {LEASES: "ProvisionedThroughputExceededException"},
        "workers": {WORKERS: "InternalServerError"},
        "both": {LEASES: "InternalServerError", WORKERS: "ProvisionedThroughputExceededException"},
        "mine": {},
    }
    tables.failing = table_errors[failing]
    probe = WorkersTableProbe(
        tables,
        WORKERS,
        ME,
        p.peer_horizon_seconds,
        round_horizon_seconds=limit,
        leases_table=LEASES,
        clock=lambda: clock[0],
    )
    watchdog = Watchdog(
        p,
        layout,
        group,
        "i-0mine",
        HealthJudge(p, started=START - 3600, grace_seconds=600),
        lifecycle_state=lambda: "InService",
        restarts=lambda: 0,
        stop=lambda: None,
        peers=probe,
    )
    watchdog.replacement_in_progress = lambda: None  # type: ignore[method-assign]
    last_good = START - 2  # every worker's last round whose reads succeeded
    while clock[0] < START + 3 * limit:
        now = clock[0]
        for unit in ("1", "2"):
            record(layout, unit, now - 1, last_good, "LeaseStoreUnavailableError: the tables refuse")
        peers_round_age = 3.0 if failing == "mine" else now - last_good
        tables.rows = peer_rows(now, beat_age=1.0, round_age=peers_round_age)
        assert watchdog.step(now)
        clock[0] += 5
    return group


@pytest.mark.parametrize("failing", ["leases", "workers", "both"])
def test_either_table_failing_for_the_whole_fleet_replaces_no_instance(tmp_path: Path, failing: str) -> None:
    group = run_fleet(tmp_path, failing)
    assert [c for c in group.calls if c[0] == "set_instance_health"] == []


def test_an_instance_whose_own_workers_fail_while_the_others_take_leases_is_marked(tmp_path: Path) -> None:
    group = run_fleet(tmp_path, "mine")
    assert group.calls == [
        (
            "set_instance_health",
            {"InstanceId": "i-0mine", "HealthStatus": "Unhealthy", "ShouldRespectGracePeriod": False},
        )
    ]


def test_a_peer_is_fine_only_with_a_recent_heartbeat_and_a_recent_good_round() -> None:
    tables = Tables()
    limit = 120
    probe = WorkersTableProbe(
        tables, WORKERS, ME, 10.5, round_horizon_seconds=limit, leases_table=LEASES, clock=lambda: START
    )
    tables.rows = peer_rows(START, beat_age=1.0, round_age=5.0)
    assert probe().fresh_peers == 4
    tables.rows = peer_rows(START, beat_age=1.0, round_age=limit + 1)  # rounds fail, beats go on
    assert probe().fresh_peers == 0 and probe().readable
    tables.rows = peer_rows(START, beat_age=11.0, round_age=5.0)  # dead
    assert probe().fresh_peers == 0
    tables.rows = peer_rows(START, beat_age=1.0, round_age=None)  # no good round yet, or an older release
    assert probe().fresh_peers == 0
    mine = peer_rows(START, beat_age=1.0, round_age=5.0)[0]
    mine["workerId"] = {"S": f"{ME}-1@{ME}:1:abc"}
    tables.rows = [mine]
    assert probe().fresh_peers == 0
    # The leases table refusing the probe is a dependency failing, named.
    tables.failing = {LEASES: "ProvisionedThroughputExceededException"}
    view = probe()
    assert not view.readable and view.error is not None and view.error.startswith(f"leases table {LEASES}")


def test_the_watchdog_reads_the_attribute_the_worker_writes() -> None:
    assert ROUND_OK_ATTRIBUTE == WORKER_SIDE
