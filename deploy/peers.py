"""An instance cut off from the tables, found by its peers.

An instance whose DynamoDB traffic fails while the rest of the fleet's succeeds (a broken route, a
security group, an endpoint policy) cannot tell that from DynamoDB failing for everyone: its own
watchdog's reads fail too, so it excuses itself (:mod:`deploy.health`: a failing dependency replaces
nothing). Its leases expire and move, but the group keeps counting it, and it never recovers on its
own. The instances that still reach the tables can tell: its workers' heartbeat rows stop, while
theirs go on.

So each watchdog whose own workers are fine looks at the workers table every :data:`LOOK_SECONDS`: a
host whose newest worker row is older than the heartbeat age limit is *silent*. The watchdog
remembers each host's newest row, because the workers delete a dead worker's row after ten failover
periods, sooner than that limit at the product's timings. Only members of the group that are
``InService`` and ``Healthy`` and launched more than the boot's health deadline plus that limit ago
count (a booting instance has no rows yet; rows of instances that left the group stay behind),
matched to their rows by host name (the first label of the instance's private DNS name, which is
what ``socket.gethostname()`` gives and what worker ids carry after ``@``).

A silent member is marked Unhealthy by its peer; so is a member, past the same settling time, with
no row at all (its workers never reported, as when the instance's credentials are refused), once
this instance's own name is found among the members, which proves the names match. Only once the
peer's looks have read the table, with its own rows landing, for that limit without a break (after
an outage that silenced everyone, instances come back a few rounds apart): its own rows land when
the newest is younger than a look's interval (workers write one every third of a failover), not
merely younger than the limit, since an outage that outlasts the limit stops the looks (its workers
are then excused) before its own rows are that old. And only while the
members with a fresh row are at least as many as the silent ones: a failure that silences most of
the fleet is not one instance's, and a watchdog that reads the table is never the one cut off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LOOK_SECONDS = 30.0
FORGET_SECONDS = 86_400.0  # a host not seen for a day is forgotten (it left the group long ago)


def host_of(worker_id: str) -> str:
    """The host in a worker id ``<unit>@<host>:<pid>:<random>`` (empty when it has another shape)."""
    return worker_id.split("@", 1)[1].split(":", 1)[0].split(".", 1)[0] if "@" in worker_id else ""


def newest_beats(items: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Host -> the newest ``heartbeatAt`` (wall seconds) among the workers table's rows of its workers."""
    newest: dict[str, float] = {}
    for item in items:
        host = host_of(str(item.get("workerId", {}).get("S", "")))
        beat = item.get("heartbeatAt", {}).get("N")
        if host and beat is not None:
            newest[host] = max(newest.get(host, 0.0), int(beat) / 1000)
    return newest


@dataclass(frozen=True)
class Member:
    """An instance of the group that is InService and Healthy."""

    instance_id: str
    host: str
    launched: float  # wall seconds


@dataclass(frozen=True)
class Silent:
    member: Member
    silent_seconds: float
    fresh_hosts: int


def silent_member(
    beats: Mapping[str, float],
    members: Sequence[Member],
    *,
    own_host: str,
    now: float,
    limit: float,
    settle: float,
) -> Silent | None:
    """The member to mark Unhealthy (the longest silent), or None (module docstring for the rule)."""
    fresh = sum(1 for m in members if m.host in beats and now - beats[m.host] <= limit)
    # A member with no row at all is silent too (its workers never reported), once this instance is
    # among the members by host name: that proves the names match the rows' (else every peer
    # would look silent).
    matched = any(m.host == own_host for m in members)
    last = {m.host: beats.get(m.host, m.launched + settle) for m in members}
    silent = sorted(
        (
            m
            for m in members
            if m.host != own_host
            and (m.host in beats or matched)
            and now - last[m.host] > limit
            and now - m.launched > settle
        ),
        key=lambda m: last[m.host],
    )
    if not silent or fresh < len(silent):
        return None
    first = silent[0]
    return Silent(first, now - last[first.host], fresh)


class PeerLook:
    """One look (module docstring): the workers table's rows and the group's members; EC2 is asked
    only for the host name and launch time of a member not seen before. Any read failing: no verdict."""

    def __init__(
        self,
        *,
        dynamodb: Any,
        ec2: Any,
        autoscaling: Any,
        workers_table: str,
        group_name: str,
        own_host: str,
        limit: float,
        settle: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dynamodb, self._ec2, self._autoscaling = dynamodb, ec2, autoscaling
        self._table, self._group = workers_table, group_name
        self._own = own_host.split(".", 1)[0]
        self._limit, self._settle = limit, settle
        self._clock = clock
        # Host -> its newest heartbeat seen: the workers retire a row silent for ten failover
        # periods (under the age limit at the product's timings), so a silent host's rows are gone
        # by the time it is silent long enough to judge.
        self._seen: dict[str, float] = {}
        # Since when this watchdog's looks have read the table with its own workers' rows landing,
        # without a break: a peer is judged only after an age limit of that (after an outage that
        # silenced everyone, the instances come back a few rounds apart).
        self._fine_since = 0.0
        self._last_look: float | None = None
        self._known: dict[str, Member] = {}  # instance id -> its host and launch time (they never change)

    def __call__(self) -> Silent | None:
        from botocore.exceptions import BotoCoreError, ClientError

        now = self._clock()
        if self._last_look is None or now - self._last_look > 2 * LOOK_SECONDS:
            self._fine_since = now  # looks resumed (this instance's workers were unwell, or a read failed)
        self._last_look = now
        try:
            rows = self._rows()
            for host, at in newest_beats(rows).items():
                self._seen[host] = max(self._seen.get(host, 0.0), at)
            self._seen = {h: at for h, at in self._seen.items() if now - at < FORGET_SECONDS}
            beats = self._seen
            if now - beats.get(self._own, 0.0) > LOOK_SECONDS:
                self._fine_since = now  # my own rows are not landing: nobody's silence is judged
            if now - self._fine_since < self._limit:
                return None  # a peer must have been silent while the table took this instance's rows
            members = self._members()
        except (BotoCoreError, ClientError):
            self._last_look = None
            return None
        return silent_member(
            beats, members, own_host=self._own, now=now, limit=self._limit, settle=self._settle
        )

    def _rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        request: dict[str, Any] = {"TableName": self._table, "ConsistentRead": True}
        while True:
            page = self._dynamodb.scan(**request)
            rows += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return rows
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _members(self) -> list[Member]:
        groups = self._autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[self._group])
        ids = [
            i["InstanceId"]
            for g in groups.get("AutoScalingGroups", [])
            for i in g.get("Instances", [])
            if i.get("LifecycleState") == "InService" and i.get("HealthStatus") == "Healthy"
        ]
        unknown = [i for i in ids if i not in self._known]
        if unknown:
            answer = self._ec2.describe_instances(InstanceIds=unknown)
            for reservation in answer.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    if instance.get("PrivateDnsName"):
                        self._known[instance["InstanceId"]] = Member(
                            instance["InstanceId"],
                            str(instance["PrivateDnsName"]).split(".", 1)[0],
                            instance["LaunchTime"].timestamp(),
                        )
        self._known = {i: m for i, m in self._known.items() if i in ids}
        return [self._known[i] for i in ids if i in self._known]
