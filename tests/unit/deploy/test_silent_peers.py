"""A peer cut off from the tables is marked Unhealthy by the instances that still reach them
(deploy/peers.py): the real watchdog, its look at the workers table, the group and EC2's host names,
with only the clients standing in and time passed in.

The deployed fleet's model found it: an instance partitioned from DynamoDB excused itself ("a
dependency failing, not this instance") and stayed InService for as long as the partition lasted,
counted by the scaling maths with no worker processing (seeds 4 and 40 of the short form: not
replaced in 6 000 s).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deploy.health import HealthJudge
from deploy.peers import Member, newest_beats, silent_member
from deploy.plan import Layout
from deploy.watchdog import Watchdog, peer_look
from tests.unit.deploy.test_instance_health import Recording, plan, record

WORKERS = "app-dev-workers"
START = 1_800_000_000.0
LIMIT = 120.0


def rows(beats: dict[str, float]) -> list[dict[str, Any]]:
    """Two worker rows per host, the newest at ``beats[host]`` (wall seconds)."""
    return [
        {
            "workerId": {"S": f"{host}-{unit}@{host}:{unit}:abc"},
            "heartbeatAt": {"N": str(int((at - unit) * 1000))},
        }
        for host, at in beats.items()
        for unit in (0, 30)
    ]


def member(n: int, launched: float = START - 7200) -> Member:
    return Member(f"i-{n}", f"ip-10-0-0-{n}", launched)


def test_a_host_whose_every_row_is_older_than_the_limit_is_silent() -> None:
    assert newest_beats(rows({"ip-10-0-0-2": START})) == {"ip-10-0-0-2": START}
    members = [member(1), member(2), member(3)]
    beats = {"ip-10-0-0-1": START - 1, "ip-10-0-0-2": START - LIMIT - 1, "ip-10-0-0-3": START - 2}
    found = silent_member(beats, members, own_host="ip-10-0-0-1", now=START, limit=LIMIT, settle=180)
    assert found is not None and found.member == member(2) and found.fresh_hosts == 2
    # Never itself; not within the limit; not a member that launched within the settle time.
    assert silent_member(beats, members, own_host="ip-10-0-0-2", now=START, limit=LIMIT, settle=180) is None
    beats["ip-10-0-0-2"] = START - LIMIT + 1
    assert silent_member(beats, members, own_host="ip-10-0-0-1", now=START, limit=LIMIT, settle=180) is None
    beats["ip-10-0-0-2"] = START - LIMIT - 1
    young = [member(1), member(2, launched=START - 100), member(3)]
    assert silent_member(beats, young, own_host="ip-10-0-0-1", now=START, limit=LIMIT, settle=180) is None
    # Rows of a host that is no member (it left the group) are not looked at.
    assert (
        silent_member(
            beats, [member(1), member(3)], own_host="ip-10-0-0-1", now=START, limit=LIMIT, settle=180
        )
        is None
    )


def test_a_silence_most_of_the_fleet_shares_is_not_one_instance_s() -> None:
    members = [member(n) for n in (1, 2, 3, 4)]
    beats = {m.host: START - LIMIT - 10 for m in members}
    beats["ip-10-0-0-1"] = START
    assert silent_member(beats, members, own_host="ip-10-0-0-1", now=START, limit=LIMIT, settle=180) is None
    beats["ip-10-0-0-2"] = START
    found = silent_member(beats, members, own_host="ip-10-0-0-1", now=START, limit=LIMIT, settle=180)
    assert found is not None and found.fresh_hosts == 2


class Fleet(Recording):
    """The workers table, Auto Scaling's group and EC2's instances, as the watchdog's clients see them."""

    def __init__(self, beats: dict[str, float]) -> None:
        super().__init__()
        self.beats = beats
        self.states = {f"i-{n}": ("InService", "Healthy") for n in (1, 2, 3)}

    def scan(self, **request: Any) -> dict[str, Any]:
        return {"Items": rows(self.beats)}

    def describe_auto_scaling_groups(self, **request: Any) -> dict[str, Any]:
        instances = [
            {"InstanceId": i, "LifecycleState": state, "HealthStatus": health}
            for i, (state, health) in self.states.items()
        ]
        return {"AutoScalingGroups": [{"Instances": instances}]}

    def describe_instances(self, InstanceIds: list[str]) -> dict[str, Any]:  # noqa: N803
        launched = datetime.fromtimestamp(START - 7200, UTC)
        instances = [
            {
                "InstanceId": i,
                "PrivateDnsName": f"ip-10-0-0-{i[2:]}.eu-west-1.compute.internal",
                "LaunchTime": launched,
            }
            for i in InstanceIds
        ]
        return {"Reservations": [{"Instances": instances}]}


def looking_watchdog(layout: Layout, fleet: Fleet, clock: list[float]) -> Watchdog:
    """The watchdog of i-1 (host ip-10-0-0-1), its peer look on ``fleet`` at ``clock``'s time."""
    p = plan(workers_table=WORKERS)
    watchdog = Watchdog(
        p,
        layout,
        fleet,
        "i-1",
        HealthJudge(p, started=START - 3600, grace_seconds=600),
        lifecycle_state=lambda: "InService",
        restarts=lambda: 0,
        stop=lambda: None,
    )
    watchdog.peer_look = peer_look(
        p, fleet, fleet, fleet, "ip-10-0-0-1.eu-west-1.compute.internal", clock=lambda: clock[0]
    )
    return watchdog


def run(tmp_path: Path, fleet: Fleet, seconds: float, cut_off_at: float) -> float | None:
    """The watchdog of i-1 polling every 5 s, its own workers fine; i-2's rows stop at ``cut_off_at``.
    Returns when i-2 was marked Unhealthy."""
    layout, clock = Layout(tmp_path), [START]
    watchdog = looking_watchdog(layout, fleet, clock)
    while clock[0] < START + seconds:
        now = clock[0]
        for unit in ("1", "2"):
            record(layout, unit, now - 1, now - 1)
        fleet.beats.update({"ip-10-0-0-1": now - 1, "ip-10-0-0-3": now - 2})
        if now < cut_off_at:
            fleet.beats["ip-10-0-0-2"] = now - 1
        assert watchdog.step(now)
        marked = [c for c in fleet.calls if c[0] == "set_instance_health"]
        if marked:
            assert marked == [
                (
                    "set_instance_health",
                    {"InstanceId": "i-2", "HealthStatus": "Unhealthy", "ShouldRespectGracePeriod": False},
                )
            ]
            return now - cut_off_at
        clock[0] += 5
    return None


def test_the_watchdog_marks_a_peer_cut_off_from_the_tables_within_the_limit_and_a_look(
    tmp_path: Path,
) -> None:
    fleet = Fleet({})
    took = run(tmp_path, fleet, 600, cut_off_at=START + 60)
    # The last row landed a poll before the cut: silent past the limit, found at the next look.
    assert took is not None and LIMIT - 6 < took <= LIMIT + 30 + 5, took


def test_a_peer_that_keeps_beating_is_never_marked(tmp_path: Path) -> None:
    assert run(tmp_path, Fleet({}), 900, cut_off_at=START + 10_000) is None


def test_one_replacement_at_a_time(tmp_path: Path) -> None:
    fleet = Fleet({})
    fleet.states["i-3"] = ("Terminating:Wait", "Unhealthy")
    assert run(tmp_path, fleet, 600, cut_off_at=START + 60) is None


def test_a_peer_whose_rows_the_workers_retired_is_still_found(tmp_path: Path) -> None:
    """The workers delete a row silent for ten failover periods (100 s at prod's 10 s), before it is
    120 s old: the watchdog judges by the newest row it saw of each host."""

    class Retiring(Fleet):
        def scan(self, **request: Any) -> dict[str, Any]:
            newest = max(self.beats.values())
            return {"Items": rows({h: at for h, at in self.beats.items() if newest - at <= 100})}

    took = run(tmp_path, Retiring({}), 600, cut_off_at=START + 60)
    assert took is not None and LIMIT - 6 < took <= LIMIT + 30 + 5, took


def test_after_an_outage_that_silenced_everyone_the_slower_instances_are_not_marked(tmp_path: Path) -> None:
    """The tables refused everyone for 10 minutes; this instance is back first, the others a minute
    and two later: every peer's row was older than the limit when this one's looks resumed."""
    layout, clock = Layout(tmp_path), [START]
    fleet = Fleet({"ip-10-0-0-2": START - 600, "ip-10-0-0-3": START - 600})
    watchdog = looking_watchdog(layout, fleet, clock)
    while clock[0] < START + 900:
        now = clock[0]
        for unit in ("1", "2"):
            record(layout, unit, now - 1, now - 1)
        fleet.beats["ip-10-0-0-1"] = now - 1
        if now >= START + 60:
            fleet.beats["ip-10-0-0-2"] = now - 1
        if now >= START + 110:
            fleet.beats["ip-10-0-0-3"] = now - 1
        assert watchdog.step(now)
        clock[0] += 5
    assert [c for c in fleet.calls if c[0] == "set_instance_health"] == []


def test_after_a_workers_table_outage_longer_than_the_limit_no_peer_is_marked_as_it_comes_back(
    tmp_path: Path,
) -> None:
    """The deployed fleet's model, seed 1 001 326: the workers table timed out every call for 150 s.
    This instance's looks went on while its workers' rounds were younger than the limit, with its
    own rows already 100 s old, and stopped once its workers were excused; its own rows landed again
    first, and its next look marked a peer whose rows were 156 s old, 3 s after the outage ended.
    Its own rows must have landed for the whole age limit before a peer's silence is judged."""
    layout, clock = Layout(tmp_path), [START]
    fleet = Fleet({})
    watchdog = looking_watchdog(layout, fleet, clock)
    outage = (START + 60, START + 210)
    while clock[0] < START + 600:
        now = clock[0]
        down = outage[0] <= now < outage[1]
        for unit in ("1", "2"):  # the workers' rounds fail while the table does
            record(
                layout, unit, now - 1, outage[0] - 1 if down else now - 1, "Read timeout" if down else None
            )
        if not down:
            fleet.beats.update({"ip-10-0-0-1": now - 1, "ip-10-0-0-3": now - 2})
            if now < outage[0] or now >= outage[1] + 30:  # this one's come back half a minute later
                fleet.beats["ip-10-0-0-2"] = now - 1
        assert watchdog.step(now)
        clock[0] += 5
    assert [c for c in fleet.calls if c[0] == "set_instance_health"] == []


def test_a_member_whose_workers_never_reported_is_silent_once_the_names_are_known_to_match() -> None:
    """Credentials refused on one instance: its workers never wrote a row. Judged like a silent host
    from its launch plus the settling time, but only when this instance's own name is among the
    members (else a naming mismatch would make every peer look silent)."""
    members = [member(1), member(2), member(3)]
    beats = {"ip-10-0-0-1": START - 1, "ip-10-0-0-3": START - 2}
    found = silent_member(beats, members, own_host="ip-10-0-0-1", now=START, limit=LIMIT, settle=180)
    assert found is not None and found.member == member(2)
    assert silent_member(beats, members, own_host="i-0abc", now=START, limit=LIMIT, settle=180) is None
    late = [member(1), member(2, launched=START - 180 - LIMIT + 10), member(3)]
    assert silent_member(beats, late, own_host="ip-10-0-0-1", now=START, limit=LIMIT, settle=180) is None
