"""The workers' group's size at a deploy: inline Lambda code of two custom resources (infra/fleet_size.py).

``Custom::FleetSize`` runs before the group is updated: it answers the size the environment's group
runs at now, within the new MinSize and MaxSize (MinSize on a first deploy), the group's
DesiredCapacity. ``Custom::FleetSizeCarried`` (``Mode: carry``) runs once a replacing update's new
group and the scaling alarms naming it exist, before the old group is deleted: the old group kept
scaling while the new one booted, so the new group is set to the size the old one reached.
Groups are found by the tags CloudFormation gives them (the stack's name, the group's logical id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any


def starting_size(groups: Iterable[Mapping[str, Any]], minimum: int, maximum: int) -> int:
    """The largest desired capacity of ``groups`` within the bounds; ``minimum`` when there is none."""
    sizes = [int(group["DesiredCapacity"]) for group in groups]
    return max(minimum, min(maximum, max(sizes, default=minimum)))


def groups_of(client: Any, stack_name: str, logical_id: str) -> list[Mapping[str, Any]]:
    filters = [
        {"Name": "tag:aws:cloudformation:stack-name", "Values": [stack_name]},
        {"Name": "tag:aws:cloudformation:logical-id", "Values": [logical_id]},
    ]
    found: list[Mapping[str, Any]] = []
    request: dict[str, Any] = {"Filters": filters}
    while True:
        page = client.describe_auto_scaling_groups(**request)
        found.extend(page.get("AutoScalingGroups", []))
        if not page.get("NextToken"):
            return found
        request["NextToken"] = page["NextToken"]


def answer(event: Mapping[str, Any], client: Any) -> dict[str, str]:
    """The custom resource's data (``Size``, a string as CloudFormation takes it)."""
    if event["RequestType"] == "Delete":
        return {"Size": "0"}
    props = event["ResourceProperties"]
    bounds = int(props["MinSize"]), int(props["MaxSize"])
    groups = groups_of(client, props["StackName"], props["GroupLogicalId"])
    if props.get("Mode") != "carry":
        return {"Size": str(starting_size(groups, *bounds))}
    name = props["GroupName"]
    now = [int(g["DesiredCapacity"]) for g in groups if g["AutoScalingGroupName"] == name]
    older = [g for g in groups if g["AutoScalingGroupName"] != name]
    if not older:  # no replacement under way (or the old group is gone): nothing to carry
        return {"Size": str(now[0] if now else 0)}
    size = starting_size(older, *bounds)
    if now != [size]:
        client.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=size, HonorCooldown=False)
    return {"Size": str(size)}


def handler(event: Mapping[str, Any], context: Any, respond: Callable[..., None] | None = None) -> None:
    """Lambda's entry point: always answers CloudFormation, FAILED with the reason if anything broke
    (the deploy then rolls back instead of waiting an hour for an answer)."""
    if respond is None:
        import cfnresponse  # Lambda's module for inline code (not installed here)

        respond = cfnresponse.send
    props = event["ResourceProperties"]
    physical = f"{props['StackName']}-fleet-size" + ("-carried" if props.get("Mode") == "carry" else "")
    try:
        import boto3

        data = answer(event, boto3.client("autoscaling"))
    except Exception as exc:  # CloudFormation must hear of it, whatever it is
        respond(event, context, "FAILED", {}, physical, reason=f"{type(exc).__name__}: {exc}"[:500])
        return
    respond(event, context, "SUCCESS", data, physical)
