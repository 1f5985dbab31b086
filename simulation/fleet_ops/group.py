"""An Auto Scaling group as the template configures it: min, max, the desired count its simple
scaling policies move, health replacement, the termination lifecycle hook, two Availability Zones.

What the model does, after Amazon EC2 Auto Scaling's documented behaviour:

* **capacity**: below the desired count it launches (into the zone with fewest instances that is
  not lost); above it, it terminates one from the zone with most instances, the oldest there (the
  default termination policy, billing-hour rule aside);
* **health** (``HealthCheckType: EC2``): an instance is replaced when marked Unhealthy
  (``SetInstanceHealth``, from the watchdog or the boot) or when its EC2 status checks fail (a host
  without network: impaired after two to three one-minute checks); the replacement is launched as
  the termination begins;
* **instances** are InService once EC2 reports them running (no launch hook, no load balancer),
  well before their boot ends;
* **termination**: the lifecycle hook holds a leaving instance in Terminating:Wait until its
  watchdog completes the action, or the hook's heartbeat timeout passes (default result
  CONTINUE); the instance is gone about 20 s later;
* **simple scaling**: a policy's adjustment applies unless the group is in its cooldown, which
  starts when the previous scaling activity completed (its instance InService or terminated); the
  count stays within min and max.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

ZONES = ("a", "b")
EC2_SHUTDOWN = 20.0


@dataclass(eq=False)
class Member:
    instance_id: str
    zone: str
    group: str
    launched_at: float
    running_at: float = 0.0  # EC2 reports it running: InService, and its boot begins
    lifecycle: str = "Pending"
    health: str = "Healthy"
    in_service_at: float | None = None
    unhealthy_at: float | None = None
    unhealthy_by: str | None = None  # "watchdog" / "boot" (SetInstanceHealth) or "ec2" (status checks)
    terminating_at: float | None = None
    terminated_at: float | None = None
    why_terminated: str | None = None  # "health", "scale-in", "group deleted"
    hook_done_at: float | None = None

    @property
    def gone(self) -> bool:
        return self.terminated_at is not None


@dataclass
class Activity:
    at: float
    desired_from: int
    desired_to: int
    cause: str
    done_at: float | None = None


@dataclass(eq=False)
class Group:
    name: str
    minimum: int
    maximum: int
    hook_timeout: float
    rng: random.Random
    on_launch: Callable[[Member], None]
    on_terminating: Callable[[Member], None]
    on_terminated: Callable[[Member], None]
    running_after: Callable[[], float]
    desired: int = 0
    members: list[Member] = field(default_factory=list)
    cooldown_until: float = 0.0
    activity: Activity | None = None
    activities: list[Activity] = field(default_factory=list)
    lost_zones: set[str] = field(default_factory=set)
    deleting: bool = False
    activity_cooldown: float = 0.0

    def live(self) -> list[Member]:
        return [m for m in self.members if not m.gone]

    def serving(self) -> list[Member]:
        return [m for m in self.members if m.lifecycle in ("Pending", "InService")]

    def in_service(self) -> int:
        return sum(1 for m in self.members if m.lifecycle == "InService")

    # ---------------------------------------------------------------------------------- calls

    def describe(self) -> list[dict[str, str]]:
        return [
            {
                "InstanceId": m.instance_id,
                "AvailabilityZone": f"eu-west-1{m.zone}",
                "LifecycleState": m.lifecycle,
                "HealthStatus": m.health,
            }
            for m in self.live()
        ]

    def set_unhealthy(self, member: Member, now: float, by: str) -> None:
        if member.health == "Healthy" and not member.gone:
            member.health, member.unhealthy_at, member.unhealthy_by = "Unhealthy", now, by

    def complete_hook(self, member: Member, now: float) -> None:
        if member.lifecycle == "Terminating:Wait":
            member.lifecycle, member.hook_done_at = "Terminating:Proceed", now

    def scale(self, adjustment: int, cooldown: float, now: float, cause: str) -> bool:
        """A simple scaling policy's adjustment; False when the group ignored it."""
        if self.deleting or now < self.cooldown_until or self.activity is not None:
            return False
        target = max(self.minimum, min(self.maximum, self.desired + adjustment))
        if target == self.desired:
            return False
        self.activity = Activity(now, self.desired, target, cause)
        self.activities.append(self.activity)
        self.activity_cooldown = cooldown
        self.desired = target
        self.tick(now)
        return True

    # ------------------------------------------------------------------------------- the loop

    def tick(self, now: float) -> None:
        for member in self.members:
            if member.lifecycle == "Pending" and now >= member.running_at:
                member.lifecycle, member.in_service_at = "InService", now
                self._activity_done(now, member)
            elif (
                member.lifecycle == "Terminating:Wait"
                and member.terminating_at is not None
                and now >= member.terminating_at + self.hook_timeout
            ):
                member.lifecycle, member.hook_done_at = "Terminating:Proceed", now
            if (
                member.lifecycle == "Terminating:Proceed"
                and member.hook_done_at is not None
                and now >= member.hook_done_at + EC2_SHUTDOWN
            ):
                member.lifecycle, member.terminated_at = "Terminated", now
                self.on_terminated(member)
                self._activity_done(now, member)
        for member in self.serving():
            if member.health == "Unhealthy":
                self.terminate(member, now, "health")
        if self.deleting:
            for member in self.serving():
                self.terminate(member, now, "group deleted")
            return
        serving = self.serving()
        for _ in range(self.desired - len(serving)):
            self.launch(now)
        while len(self.serving()) > self.desired:
            self.terminate(self._scale_in_victim(), now, "scale-in")

    def launch(self, now: float) -> Member:
        usable = [z for z in ZONES if z not in self.lost_zones] or list(ZONES)
        counts = {z: sum(1 for m in self.serving() if m.zone == z) for z in usable}
        zone = min(usable, key=lambda z: (counts[z], self.rng.random()))
        member = Member(
            f"i-{self.rng.getrandbits(68):017x}", zone, self.name, now, now + self.running_after()
        )
        self.members.append(member)
        self.on_launch(member)
        return member

    def terminate(self, member: Member, now: float, why: str) -> None:
        if member.lifecycle not in ("Pending", "InService"):
            return
        member.lifecycle, member.terminating_at, member.why_terminated = "Terminating:Wait", now, why
        self.on_terminating(member)

    def _scale_in_victim(self) -> Member:
        serving = self.serving()
        counts = {z: sum(1 for m in serving if m.zone == z) for z in ZONES}
        zone = max(ZONES, key=lambda z: counts[z])
        return min((m for m in serving if m.zone == zone), key=lambda m: m.launched_at)

    def _activity_done(self, now: float, member: Member) -> None:
        activity = self.activity
        if activity is None:
            return
        launching = activity.desired_to > activity.desired_from
        if (launching and member.lifecycle == "InService") or (not launching and member.gone):
            activity.done_at = now
            self.cooldown_until = now + self.activity_cooldown
            self.activity = None

    def delete(self, now: float) -> None:
        self.deleting = True
        self.desired = 0
        self.tick(now)
