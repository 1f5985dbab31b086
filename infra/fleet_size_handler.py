"""The size a deploy gives the workers' group: what the group runs now (a Lambda-backed custom resource).

Run by AWS Lambda as the inline code of :mod:`infra.fleet_size` (Python and boto3 only; Lambda
provides ``cfnresponse`` for inline code). At each deploy that changes the group, before the group
is updated, it reads the desired capacity of the environment's group as it runs now (Auto Scaling
names it, so it is found by the tags CloudFormation gives it: the stack's name and the group's
logical id) and answers that size, kept within the new MinSize and MaxSize. The group's
DesiredCapacity is that answer, so a deploy keeps the size the scaling alarms gave the fleet: a
replacing update starts the new group at the old one's size instead of at MinSize, and an update in
place does not reset it. A first deploy finds no group and answers MinSize.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any


def starting_size(groups: Iterable[Mapping[str, Any]], minimum: int, maximum: int) -> int:
    """The largest desired capacity of the groups found (one, or two while a replacement is under
    way), within ``minimum`` and ``maximum``; ``minimum`` when there is none."""
    sizes = [int(group["DesiredCapacity"]) for group in groups]
    return max(minimum, min(maximum, max(sizes, default=minimum)))


def groups_of(client: Any, stack_name: str, logical_id: str) -> list[Mapping[str, Any]]:
    """The stack's groups of that logical id, by the tags CloudFormation puts on them."""
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
    """The data the custom resource returns for ``event`` (``Size``, a string as CloudFormation takes it)."""
    if event["RequestType"] == "Delete":
        return {"Size": "0"}
    properties = event["ResourceProperties"]
    groups = groups_of(client, properties["StackName"], properties["GroupLogicalId"])
    size = starting_size(groups, int(properties["MinSize"]), int(properties["MaxSize"]))
    return {"Size": str(size)}


def handler(event: Mapping[str, Any], context: Any, respond: Callable[..., None] | None = None) -> None:
    """Lambda's entry point: always answers CloudFormation, FAILED with the reason if anything broke
    (the deploy then rolls back instead of waiting an hour for an answer)."""
    if respond is None:
        import cfnresponse  # Lambda's module for inline code (not installed here)

        respond = cfnresponse.send
    physical = f"{event['ResourceProperties']['StackName']}-fleet-size"
    try:
        import boto3

        data = answer(event, boto3.client("autoscaling"))
    except Exception as exc:  # CloudFormation must hear of it, whatever it is
        respond(event, context, "FAILED", {}, physical, reason=f"{type(exc).__name__}: {exc}"[:500])
        return
    respond(event, context, "SUCCESS", data, physical)
