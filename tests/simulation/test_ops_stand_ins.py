"""The fleet model's stand-ins held to the real code they stand in for.

* the heartbeat files in memory answer as the real files do: the real ``HeartbeatFile`` writing, the
  real ``deploy.health.heartbeats`` reading, at the same simulated times;
* a worker's period metrics are the values the real ``MetricsRecorder`` puts in its EMF documents;
* the watchdog the model builds is the one ``deploy.watchdog.main`` builds (same judge, same probe,
  same settings);
* the boot outcomes come from the real scripts: a boot that goes through signals SUCCESS and starts
  every unit; a step that fails signals FAILURE (or, before the instance knows its id, nothing).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from consumer.telemetry.health import HeartbeatFile
from consumer.telemetry.metric_names import spec_for
from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.transports import InMemoryTransport
from deploy import watchdog as watchdog_module
from deploy.health import heartbeats
from deploy.plan import BootPlan, Layout
from simulation.fleet_ops.boot_outcomes import BOOTSTRAP_STEPS, USER_DATA_STEPS
from simulation.fleet_ops.heartbeat_files import HeartbeatState
from simulation.fleet_ops.instance import build_watchdog
from simulation.fleet_ops.period_metrics import PeriodMetrics
from simulation.histories import sim_settings

PLAN = BootPlan(
    env="prod",
    region="eu-west-1",
    worker_processes=2,
    stop_timeout_seconds=105,
    agent_config={},
    stack_name="orders-stream-consumer-prod",
    signal_resource="FleetGroupASG",
    group_name="orders-fleet-Group-0001",
    lifecycle_hook_name="orders-stream-consumer-prod-release-leases",
    workers_table="orders-stream-consumer-prod-workers",
)


class _Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def wall_millis(self) -> int:
        return int(self.t * 1000)

    def monotonic_millis(self) -> int:
        return int(self.t * 1000)


@pytest.mark.parametrize("seed", range(5))
def test_the_heartbeat_files_in_memory_read_as_the_real_files_do(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    layout = Layout(tmp_path)
    layout.health_dir.mkdir(parents=True)
    clock = _Clock()
    real = {unit: HeartbeatFile(layout.heartbeat(unit), clock) for unit in ("1", "2")}
    mine = {unit: HeartbeatState() for unit in ("1", "2")}
    for _ in range(40):
        clock.t += rng.uniform(0.1, 90.0)
        unit = rng.choice(("1", "2"))
        ok = rng.choice((None, True, False))
        error = rng.choice((None, "LeaseStoreUnavailableError: InternalServerError (HTTP 500)"))
        real[unit].record(ok, error)
        os.utime(layout.heartbeat(unit), (clock.t, clock.t))  # the file's mtime is the write's time
        mine[unit].record(clock.t, ok, error)
        now = clock.t + rng.uniform(0.0, 300.0)
        expected = heartbeats(PLAN, layout, now)
        got = {u: state.read(now) for u, state in mine.items() if state.written is not None}
        for u, beat in expected.items():
            if u not in got:
                assert beat.attempt_age is None
                continue
            assert beat.error == got[u].error
            assert beat.attempt_age == pytest.approx(got[u].attempt_age, abs=1e-3)
            assert (beat.ok_age is None) == (got[u].ok_age is None)
            if beat.ok_age is not None:
                assert beat.ok_age == pytest.approx(got[u].ok_age, abs=2e-3)


def test_period_metrics_are_what_the_real_recorder_ships() -> None:
    settings = sim_settings({})
    transport = InMemoryTransport()
    clock = _Clock()
    real = MetricsRecorder(settings, "w1@host:1:abc", transport, clock, sample_process=False)
    mine = PeriodMetrics("w1@host:1:abc")
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("gauge", ("TakeLeases", "NumWorkers", 4, "Count")),
        ("gauge", ("TakeLeases", "NumWorkers", 5, "Count")),
        ("count", ("ProcessTask", "RecordsProcessed", 120)),
        ("count", ("ProcessTask", "RecordsProcessed", 30)),
        ("gauge", ("ProcessTask", "MillisBehindLatest", 900, "Milliseconds")),
        ("gauge", ("ProcessTask", "MillisBehindLatest", 400, "Milliseconds")),
        ("count", ("LeaseTable", "LeaseTableScans", 1)),
        ("count", ("RenewAllLeases", "LostLeases", 2)),
        ("gauge", ("ShardSyncTask", "OpenShards", 44, "Count")),
    ]
    if spec_for("StalledShards") is not None:  # a shard-named metric, where the catalogue has one
        calls.append(("count", ("ProcessTask", "StalledShards", 1, "Count", "shardId-0004")))
    for method, arguments in calls:
        getattr(real, method)(*arguments)
        getattr(mine, method)(*arguments)
    real.flush()
    real.stop()
    shipped: dict[tuple[frozenset[tuple[str, str]], str], float] = {}
    for document in transport.documents:
        body = document
        for directive in body["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                for metric in directive["Metrics"]:
                    name = metric["Name"]
                    value = body[name]
                    dims = frozenset((d, body[d]) for d in dimension_set)
                    shipped[(dims, name)] = sum(value) if isinstance(value, list) else value
    flushed = {(frozenset(d.items()), name): value for d, name, value in mine.flush()}
    assert flushed == {key: shipped[key] for key in flushed}
    assert {key for key in shipped if key[1] in {n for _, n in flushed}} == set(flushed)


def test_the_model_builds_the_watchdog_main_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    plan_file = tmp_path / "boot.json"
    plan_file.write_text(PLAN.to_json())
    clients = {"autoscaling": object(), "dynamodb": object(), "ec2": object()}
    monkeypatch.setattr(boto3, "client", lambda service, **_: clients[service])
    monkeypatch.setattr(watchdog_module, "metadata", lambda path: "i-0sim")
    monkeypatch.setattr(watchdog_module.socket, "gethostname", lambda: "ip-10-0-1-2")
    built: list[Any] = []

    def captured(self: Any, now: float) -> bool:
        built.append(self)
        return False

    monkeypatch.setattr(watchdog_module.Watchdog, "step", captured)
    assert watchdog_module.main(["--plan", str(plan_file), "--root", str(tmp_path)]) == 0
    (real,) = built
    mine = build_watchdog(
        PLAN,
        Layout(tmp_path),
        autoscaling=clients["autoscaling"],
        dynamodb=clients["dynamodb"],
        ec2=clients["ec2"],
        instance_id="i-0sim",
        host="ip-10-0-1-2",
        started=real.judge.started,
        restarts=lambda: 0,
        lifecycle_state=lambda: "InService",
        stop=lambda: None,
        clock=time.time,
    )
    assert (mine.plan, mine.layout, mine.instance_id, mine.autoscaling) == (
        real.plan,
        real.layout,
        real.instance_id,
        real.autoscaling,
    )
    assert (mine.judge.plan, mine.judge.grace_seconds) == (real.judge.plan, real.judge.grace_seconds)
    assert type(mine.peers) is type(real.peers)
    assert vars(mine.peers) == vars(real.peers)
    assert type(mine.peer_look) is type(real.peer_look)
    assert vars(mine.peer_look) == vars(real.peer_look)


def test_the_boot_outcomes_come_from_the_real_scripts() -> None:
    from simulation.fleet_ops.environment import environment

    table = environment().outcomes
    assert table[None].signals == ("SUCCESS",) and table[None].watchdog and table[None].workers
    for step in BOOTSTRAP_STEPS:
        assert table[step].signals == ("FAILURE",), step
    assert table["workers"].watchdog and table["workers"].workers
    for step in USER_DATA_STEPS:
        assert not table[step].watchdog and table[step].status != 0, step
