"""The fleet stack's operations as CloudFormation runs them on the group the template declares.

* **create**: the group starts at its ``DesiredCapacity`` (:meth:`Stack.starting_size`: the template's
  figure, the answer of its ``Custom::FleetSize`` resource -- the real handler of
  infra/fleet_size_handler.py, asking the model's groups --, or the minimum without one); the stack
  completes once the creation policy's count of SUCCESS signals (``ResourceSignal.Count``) arrived
  within its timeout; a FAILURE signal, or the timeout, fails it.
* **update that replaces the group** (``AutoScalingReplacingUpdate``, what a deploy of new code
  is): the custom resource asked again (the group changed), then a new group beside the old one, at
  that size, under the same creation policy;
  once it completes, the group's references (the scaling policies and alarms) name the new group,
  its ``Custom::FleetSizeCarried`` resource (the same real handler) sets it to the size the old one
  reached meanwhile, and the old one is deleted (its instances leave through the lifecycle hook). If the new group
  fails, the rollback deletes it and keeps the old one, waiting for no signal.
* **replacement** of the whole fleet stack (delete, then create: docs/deploy.md calls it
  replaceable): every group deleted, the stack's alarms, topic and schedule created anew.

A signal for a group no stack operation waits on is refused by CloudFormation: the model drops it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulation.fleet_ops.group import Group, Member
from simulation.fleet_ops.templates import Templates


def _duration(iso: str) -> float:
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", iso)
    if match is None:
        raise NotImplementedError(f"duration {iso}")
    hours, minutes, seconds = (int(x or 0) for x in match.groups())
    return hours * 3600.0 + minutes * 60 + seconds


@dataclass
class Operation:
    kind: str  # "create", "update" or "replace"
    group: Group
    started: float
    deadline: float
    needed: int
    version: int
    successes: set[str] = field(default_factory=set)
    outcome: str | None = None  # "complete" or "failed: ..."
    ended: float | None = None


@dataclass
class Stack:
    templates: Templates
    new_group: Callable[[str, int], Group]  # name, code version -> a group (launching nothing yet)
    on_created: Callable[[float], None]  # the stack's own resources (alarms, topic, schedule) exist anew
    # The stack's create (or re-create) completed: what depends on the group is created.
    on_group_created: Callable[[float], None] = lambda now: None
    groups: list[Group] = field(default_factory=list)
    current: Group | None = None  # the group the template's references name
    operation: Operation | None = None
    operations: list[Operation] = field(default_factory=list)
    version: int = 0
    _names: int = 0

    def __post_init__(self) -> None:
        _, group = self.templates.one("AWS::AutoScaling::AutoScalingGroup")
        policy = group.get("CreationPolicy", {}).get("ResourceSignal", {})
        self.signals_needed = int(policy.get("Count", 0))
        self.signal_timeout = _duration(policy.get("Timeout", "PT5M"))

    def _start(self, kind: str, now: float, version: int) -> Operation:
        self._names += 1
        group = self.new_group(f"orders-fleet-Group-{self._names:04d}", version)
        self.groups.append(group)
        operation = Operation(kind, group, now, now + self.signal_timeout, self.signals_needed, version)
        self.operation = operation
        self.operations.append(operation)
        group.desired = self.starting_size("Create" if kind != "update" else "Update")
        group.tick(now)
        if operation.needed == 0:
            self._complete(now)
        return operation

    def starting_size(self, request: str) -> int:
        """The new group's DesiredCapacity, as CloudFormation resolves it before creating the group."""
        logical, group = self.templates.one("AWS::AutoScaling::AutoScalingGroup")
        props = group["Properties"]
        desired = props.get("DesiredCapacity")
        if desired is None:
            return int(props["MinSize"])
        if isinstance(desired, dict) and "Fn::GetAtt" in desired:
            resource = self.templates.resources[desired["Fn::GetAtt"][0]]
            if resource["Type"] != "Custom::FleetSize":
                raise NotImplementedError(f"DesiredCapacity from {resource['Type']}")
            from infra.fleet_size_handler import answer

            event = {"RequestType": request, "ResourceProperties": resource["Properties"]}
            return int(answer(event, _GroupsByTag(self, logical))["Size"])
        return int(desired)

    def create(self, now: float) -> Operation:
        self.on_created(now)
        return self._start("create", now, self.version)

    def deploy(self, now: float) -> Operation | None:
        """A new launch template version: the group is replaced (refused while another runs)."""
        if self.operation is not None:
            return None
        self.version += 1
        return self._start("update", now, self.version)

    def replace(self, now: float) -> Operation | None:
        if self.operation is not None:
            return None
        for group in self.groups:
            if not group.deleting:
                group.delete(now)
        self.current = None
        return self.create(now)

    def signal(self, member: Member, status: str, now: float) -> bool:
        operation = self.operation
        if operation is None or member.group != operation.group.name:
            return False  # nothing waits on it: CloudFormation refuses the signal
        if status == "FAILURE":
            self._fail(now, f"FAILURE signal from {member.instance_id}")
        else:
            operation.successes.add(member.instance_id)
            if len(operation.successes) >= operation.needed:
                self._complete(now)
        return True

    def tick(self, now: float) -> None:
        operation = self.operation
        if operation is not None and now >= operation.deadline:
            self._fail(now, f"{len(operation.successes)} of {operation.needed} signals within the timeout")

    def _complete(self, now: float) -> None:
        operation = self.operation
        assert operation is not None
        operation.outcome, operation.ended = "complete", now
        if operation.kind == "create":
            self.on_group_created(now)
        old, self.current = self.current, operation.group
        if old is not None and operation.kind == "update":
            self._carry(operation.group, now)
            old.delete(now)
        self.operation = None

    def _carry(self, group: Group, now: float) -> None:
        """The ``Custom::FleetSizeCarried`` resource's update, which depends on the scaling policies and
        alarms: CloudFormation runs it once they name the new group, before the old one is deleted."""
        carried = [r for r in self.templates.resources.values() if r["Type"] == "Custom::FleetSizeCarried"]
        if not carried:
            return
        from infra.fleet_size_handler import answer

        logical, _ = self.templates.one("AWS::AutoScaling::AutoScalingGroup")
        properties = {**carried[0]["Properties"], "GroupName": group.name}
        answer({"RequestType": "Update", "ResourceProperties": properties}, _GroupsByTag(self, logical, now))

    def _fail(self, now: float, why: str) -> None:
        operation = self.operation
        assert operation is not None
        operation.outcome, operation.ended = f"failed: {why}", now
        operation.group.delete(now)
        if operation.kind == "update":
            self.version -= 1
        self.operation = None

    def completed_at(self, kind: str = "create") -> float | None:
        for operation in self.operations:
            if operation.kind == kind and operation.outcome == "complete":
                return operation.ended
        return None


class _GroupsByTag:
    """``describe_auto_scaling_groups`` as the custom resource's function calls it (by the tags
    CloudFormation puts on a stack's groups): the model's groups that are not being deleted."""

    def __init__(self, stack: Stack, logical_id: str, now: float = 0.0) -> None:
        self._stack = stack
        self._logical_id = logical_id
        self._now = now

    def describe_auto_scaling_groups(self, *, Filters: list[dict[str, Any]], **_: Any) -> dict[str, Any]:  # noqa: N803
        wanted = {f["Name"]: f["Values"] for f in Filters}
        if wanted.get("tag:aws:cloudformation:logical-id") != [self._logical_id]:
            return {"AutoScalingGroups": []}
        return {
            "AutoScalingGroups": [
                {"AutoScalingGroupName": g.name, "DesiredCapacity": g.desired}
                for g in self._stack.groups
                if not g.deleting
            ]
        }

    def set_desired_capacity(self, **request: Any) -> None:
        """As the carried resource's function calls it (it always passes HonorCooldown=False)."""
        name, size = request["AutoScalingGroupName"], int(request["DesiredCapacity"])
        (group,) = [g for g in self._stack.groups if g.name == name and not g.deleting]
        group.desired = size
        group.tick(self._now)
