"""The watchdog's judgement of an instance, and what it asks of Auto Scaling: an instance is
blamed only for its own failure (a crash loop, its workers failing or stalled while others are
fine), never for one the whole fleet shares (a DynamoDB brownout), and one at a time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from deploy.health import HealthJudge, Heartbeat, Judgement, PeerView
from deploy.plan import Layout
from deploy.watchdog import Watchdog
from tests.unit.deploy.test_instance_health import Recording, plan, record

FINE = Heartbeat(1.0, 1.0, 0.0)
FAILING = Heartbeat(1.0, 500.0, 0.0, "LeaseStoreUnavailableError: InternalServerError")
STALLED = Heartbeat(500.0, 500.0, 0.0)
PEERS_FINE = PeerView(readable=True, fresh_peers=6)
NOBODY_FINE = PeerView(readable=True, fresh_peers=0)
UNREADABLE = PeerView(readable=False, error="ProvisionedThroughputExceededException")


def test_the_judge_waits_out_the_grace() -> None:
    judge = HealthJudge(plan(), started=0.0, grace_seconds=600)
    assert judge.observe(100.0, {"1": Heartbeat(None, None, None)}, 0, lambda: PEERS_FINE) == Judgement()
    assert judge.observe(700.0, {"1": FINE, "2": FINE}, 0, lambda: PEERS_FINE) == Judgement()


def test_after_an_outage_the_instances_back_last_are_not_blamed_for_it() -> None:
    """A brownout longer than the age limit ends: the other instances' workers are fine again a
    round before mine, whose last good round is then older than the limit. Not mine: blamed only
    if it lasts a whole limit more while the others stay fine."""
    judge = HealthJudge(plan(), started=0.0, grace_seconds=0)
    limit = plan().heartbeat_max_age_seconds
    back = judge.observe(1_000.0, {"1": FAILING, "2": FAILING}, 0, lambda: PEERS_FINE)
    assert back.unhealthy is None and back.why_excused == "recovering"
    assert (
        judge.observe(1_000.0 + limit / 2, {"1": FAILING, "2": FAILING}, 0, lambda: PEERS_FINE).unhealthy
        is None
    )
    assert (
        judge.observe(1_000.0 + limit / 2 + 5, {"1": FINE, "2": FINE}, 0, lambda: PEERS_FINE) == Judgement()
    )
    # Mine never come back while the others stay fine: mine.
    assert judge.observe(2_000.0, {"1": FAILING, "2": FAILING}, 0, lambda: PEERS_FINE).unhealthy is None
    verdict = judge.observe(2_000.0 + limit, {"1": FAILING, "2": FAILING}, 0, lambda: PEERS_FINE)
    assert verdict.unhealthy is not None and "on other instances are fine" in verdict.unhealthy


@pytest.mark.parametrize(
    ("beats", "view", "blamed"),
    [
        # A DynamoDB brownout: every worker's rounds fail, and the watchdog cannot read either.
        ({"1": FAILING, "2": FAILING}, UNREADABLE, False),
        # Everyone's rounds fail though the watchdog reads: the fleet shares it.
        ({"1": FAILING, "2": FAILING}, NOBODY_FINE, False),
        # Only mine fail while others are fine: mine.
        ({"1": FAILING, "2": FINE}, PEERS_FINE, True),
        # A loop that stopped while others are fine, or while the table answers: mine.
        ({"1": STALLED, "2": FINE}, PEERS_FINE, True),
        ({"1": STALLED, "2": STALLED}, NOBODY_FINE, True),
        # Stopped loops while nothing answers the watchdog either: not provably mine.
        ({"1": STALLED, "2": FAILING}, UNREADABLE, False),
    ],
)
def test_the_judge_blames_the_instance_only_for_its_own_failure(
    beats: dict[str, Heartbeat], view: PeerView, blamed: bool
) -> None:
    judge = HealthJudge(plan(), started=0.0, grace_seconds=0)
    first = judge.observe(1_000.0, beats, 0, lambda: view)
    assert first.unhealthy is None  # nothing is blamed on one look
    limit = plan().heartbeat_max_age_seconds
    judgement = judge.observe(1_000.0 + limit, beats, 0, lambda: view)  # the same a limit later
    assert (judgement.unhealthy is not None) == blamed, judgement
    assert (judgement.excused is not None) == (not blamed), judgement


def test_the_judge_asks_the_peers_only_when_a_worker_looks_unwell() -> None:
    asked: list[bool] = []
    judge = HealthJudge(plan(), started=0.0, grace_seconds=0)
    judge.observe(1_000.0, {"1": FINE, "2": FINE}, 0, lambda: asked.append(True) or PEERS_FINE)  # type: ignore[func-returns-value]
    assert asked == []


def test_the_judge_calls_a_crash_loop_even_when_each_run_reported() -> None:
    judge = HealthJudge(
        plan(crash_loop_restarts=3, crash_loop_window_seconds=300), started=0.0, grace_seconds=0
    )
    fresh = {"1": FINE, "2": FINE}
    assert judge.observe(10.0, fresh, restarts=0).unhealthy is None
    assert judge.observe(20.0, fresh, restarts=2).unhealthy is None
    verdict = judge.observe(30.0, fresh, restarts=3).unhealthy
    assert verdict is not None and "crash loop" in verdict
    # Restarts spread wider than the window are not a loop.
    slow = HealthJudge(
        plan(crash_loop_restarts=3, crash_loop_window_seconds=300), started=0.0, grace_seconds=0
    )
    for step in range(6):
        assert slow.observe(step * 400.0, fresh, restarts=step).unhealthy is None


class Group(Recording):
    """An autoscaling client whose group has the given instances (id -> (lifecycle state, health))."""

    def __init__(self, instances: dict[str, tuple[str, str]]) -> None:
        super().__init__()
        self.instances = instances

    def describe_auto_scaling_groups(self, **kwargs: Any) -> dict[str, Any]:
        return {
            "AutoScalingGroups": [
                {
                    "Instances": [
                        {"InstanceId": i, "LifecycleState": s, "HealthStatus": h}
                        for i, (s, h) in self.instances.items()
                    ]
                }
            ]
        }


def test_the_watchdog_reports_unhealthy_once_and_one_instance_at_a_time(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    client = Group({"i-0abc": ("InService", "Healthy"), "i-0def": ("Terminating", "Unhealthy")})
    watchdog = Watchdog(
        p,
        layout,
        client,
        "i-0abc",
        HealthJudge(p, started=0.0, grace_seconds=0),
        lifecycle_state=lambda: "InService",
        restarts=lambda: 0,
        stop=lambda: None,
        peers=lambda: NOBODY_FINE,  # the table answers: a worker with no heartbeat at all is mine
    )
    now = time.time()
    assert watchdog.step(now)  # the table answers, no heartbeat at all: mine once it lasts a limit
    assert watchdog.step(now + p.heartbeat_max_age_seconds)
    assert client.calls == []  # another instance is being replaced: wait
    client.instances["i-0def"] = ("InService", "Healthy")
    assert watchdog.step(now + p.heartbeat_max_age_seconds + 5)
    assert watchdog.step(now + p.heartbeat_max_age_seconds + 10)
    assert client.calls == [
        (
            "set_instance_health",
            {"InstanceId": "i-0abc", "HealthStatus": "Unhealthy", "ShouldRespectGracePeriod": False},
        )
    ]


def test_the_watchdog_leaves_a_fleet_wide_outage_alone(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    now = time.time()
    for instance in ("1", "2"):
        record(layout, instance, now - 1, now - 600, "LeaseStoreThrottledError: throttling")
    client = Group({"i-0abc": ("InService", "Healthy")})
    watchdog = Watchdog(
        p,
        layout,
        client,
        "i-0abc",
        HealthJudge(p, started=0.0, grace_seconds=0),
        lifecycle_state=lambda: "InService",
        restarts=lambda: 0,
        stop=lambda: None,
        peers=lambda: UNREADABLE,
    )
    for _ in range(3):
        assert watchdog.step(now)
    assert client.calls == []


def test_the_watchdog_hands_over_on_termination(tmp_path: Path) -> None:
    layout, p = Layout(tmp_path), plan()
    client, stopped = Recording(), []
    watchdog = Watchdog(
        p,
        layout,
        client,
        "i-0abc",
        HealthJudge(p, started=time.time(), grace_seconds=600),
        lifecycle_state=lambda: "Terminated",
        stop=lambda: stopped.append(True),
    )
    assert watchdog.step(time.time()) is False
    assert stopped == [True]
    assert client.calls == [
        (
            "complete_lifecycle_action",
            {
                "LifecycleHookName": "app-dev-release-leases",
                "AutoScalingGroupName": "app-dev-workers",
                "LifecycleActionResult": "CONTINUE",
                "InstanceId": "i-0abc",
            },
        )
    ]


def test_the_probe_counts_workers_of_other_hosts_whose_rounds_succeed_as_their_store_writes_them() -> None:
    """The worker's own store writes the rows (moto); the watchdog's probe reads both tables."""
    import boto3
    from moto import mock_aws

    from consumer.leases.coordinator import LeaseCoordinator
    from consumer.leases.dynamodb import DynamoDBLeaseStore
    from deploy.watchdog import WorkersTableProbe
    from ground.clock import FakeClock
    from ground.settings import WorkerSettings

    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        probe = WorkersTableProbe(
            client, "app-workers", "ip-10-0-0-1", 10.5, round_horizon_seconds=120, leases_table="app"
        )
        assert not probe().readable  # no tables: cannot tell
        store = DynamoDBLeaseStore(client, "app", workers_table_name="app-workers")
        store.ensure_table(WorkerSettings(lease_table_billing_mode="PAY_PER_REQUEST"))
        clock = FakeClock(start_millis=int(time.time() * 1000))
        workers = {
            host: LeaseCoordinator(store, f"{host}-1@{host}:1:abc", WorkerSettings(), clock)
            for host in ("ip-10-0-0-1", "ip-10-0-0-2", "ip-10-0-0-3")
        }
        for host, worker in workers.items():
            worker.heartbeat_once()
            if host != "ip-10-0-0-3":  # its rounds have not succeeded (yet): beating, not fine
                worker.take_round()
                worker.heartbeat_once()
        client.put_item(
            TableName="app-workers", Item={"workerId": {"S": "__app__#lineage"}, "generation": {"N": "2"}}
        )
        # ip-10-0-0-1 is this host; ip-10-0-0-2's row says its round succeeded.
        assert probe() == PeerView(readable=True, fresh_peers=1)


def test_the_hand_off_waits_for_the_agent_to_ship_the_workers_last_metrics() -> None:
    """The workers' last EMF document goes to the agent as they stop; the agent buffers logs up to
    its force_flush_interval, so the lifecycle action completes only after twice that."""
    from dataclasses import replace

    from deploy.watchdog import hand_off

    events: list[object] = []
    p = replace(plan(), agent_config={"logs": {"force_flush_interval": 7}})
    hand_off(p, stop=lambda: events.append("stopped"), sleep=events.append)
    assert events == ["stopped", 14.0]
    hand_off(replace(p, agent_config={"logs": {}}), stop=lambda: None, sleep=events.append)
    assert events[-1] == 10.0  # the agent's default, 5 s


def test_the_watchdog_main_hands_off_through_the_agent_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    import deploy.watchdog as watchdog_module

    p = plan()
    plan_file = tmp_path / "boot.json"
    plan_file.write_text(p.to_json())
    client = Recording()
    monkeypatch.setattr(boto3, "client", lambda service, **_: client)
    monkeypatch.setattr(
        watchdog_module, "metadata", lambda path: "Terminated" if "lifecycle" in path else "i-0abc"
    )
    events: list[object] = []
    monkeypatch.setattr(watchdog_module, "stop_workers", lambda: events.append("stopped"))
    monkeypatch.setattr(watchdog_module.time, "sleep", events.append)
    assert watchdog_module.main(["--plan", str(plan_file), "--root", str(tmp_path)]) == 0
    assert events == ["stopped", watchdog_module.agent_flush_seconds(p)]
    assert [c[0] for c in client.calls] == ["complete_lifecycle_action"]
