"""The size a deploy gives the workers' group: in the templates, the group's DesiredCapacity is the
answer of a custom resource that watches every other property of the group; its Lambda code
(infra/fleet_size_handler.py) answers what the environment's group runs at now, within the new
bounds, the minimum on a first deploy, and always answers CloudFormation (a fake Auto Scaling client,
a recorded response)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.fleet_size_handler import answer, handler, starting_size
from tests.infra.conftest import ENVIRONMENTS, Synthesized, resources_of

pytestmark = pytest.mark.infra


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_group_keeps_its_size_across_deploys(env: str, synthesized: dict[str, Synthesized]) -> None:
    """No configured size (a deploy would reset the alarms' one), and not MinSize either (a replacing
    update cut a scaled-out fleet to its minimum): the size the group runs at, read at the deploy by
    the custom resource that watches every other property of the group (infra/fleet_size.py)."""
    synth = synthesized[env]
    resources = synth.raw["Resources"]
    ((group_id, group),) = [
        (k, r["Properties"])
        for k, r in resources.items()
        if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"
    ]
    ((size_id, size),) = [
        (k, r["Properties"]) for k, r in resources.items() if r["Type"] == "Custom::FleetSize"
    ]
    assert group["DesiredCapacity"] == {"Fn::GetAtt": [size_id, "Size"]}
    assert size["Watched"] == {k: v for k, v in group.items() if k not in ("DesiredCapacity", "Tags")}
    assert (size["MinSize"], size["MaxSize"], size["GroupLogicalId"]) == (
        group["MinSize"],
        group["MaxSize"],
        group_id,
    )
    # Its function may read groups, nothing else.
    function = resources[size["ServiceToken"]["Fn::GetAtt"][0]]["Properties"]
    role = function["Role"]["Fn::GetAtt"][0]
    statements = [
        s
        for p in resources_of(synth.raw, "AWS::IAM::Policy")
        if {"Ref": role} in p["Roles"]
        for s in p["PolicyDocument"]["Statement"]
    ]
    assert [(s["Action"], s["Resource"]) for s in statements] == [
        ("autoscaling:DescribeAutoScalingGroups", "*")
    ]
    assert not resources[role]["Properties"].get("ManagedPolicyArns")


class AutoScaling:
    """describe_auto_scaling_groups with tag filters, one group a page (to follow NextToken)."""

    def __init__(self, groups: list[dict[str, Any]], fail: Exception | None = None) -> None:
        self.groups = groups
        self.fail = fail
        self.requests: list[dict[str, Any]] = []

    def describe_auto_scaling_groups(self, **request: Any) -> dict[str, Any]:
        if self.fail is not None:
            raise self.fail
        self.requests.append(request)
        wanted = {f["Name"].removeprefix("tag:"): f["Values"] for f in request["Filters"]}
        found = [g for g in self.groups if all(g["Tags"].get(k) in v for k, v in wanted.items())]
        start = int(request.get("NextToken", 0))
        page: dict[str, Any] = {"AutoScalingGroups": found[start : start + 1]}
        if start + 1 < len(found):
            page["NextToken"] = str(start + 1)
        return page


def group(desired: int, stack: str = "app-prod", logical: str = "FleetGroupASG") -> dict[str, Any]:
    tags = {"aws:cloudformation:stack-name": stack, "aws:cloudformation:logical-id": logical}
    return {"DesiredCapacity": desired, "Tags": tags}


def event(kind: str, minimum: int = 3, maximum: int = 12) -> dict[str, Any]:
    return {
        "RequestType": kind,
        "ResourceProperties": {
            "StackName": "app-prod",
            "GroupLogicalId": "FleetGroupASG",
            "MinSize": str(minimum),
            "MaxSize": str(maximum),
        },
    }


def test_a_deploy_keeps_the_size_the_alarms_gave_the_group() -> None:
    client = AutoScaling([group(9), group(5, stack="app-dev"), group(7, logical="OtherASG")])
    assert answer(event("Update"), client) == {"Size": "9"}


@pytest.mark.parametrize(
    ("groups", "minimum", "maximum", "size"),
    [
        ([], 3, 12, 3),  # a first deploy: no group yet
        ([9], 3, 12, 9),
        ([9], 3, 6, 6),  # max_instances lowered below the size
        ([2], 3, 12, 3),  # min_instances raised above it
        ([4, 9], 3, 12, 9),  # a replacement under way: the larger
    ],
)
def test_the_size_is_the_groups_within_the_new_bounds(
    groups: list[int], minimum: int, maximum: int, size: int
) -> None:
    client = AutoScaling([group(d) for d in groups])
    assert answer(event("Create", minimum, maximum), client) == {"Size": str(size)}
    assert starting_size([{"DesiredCapacity": d} for d in groups], minimum, maximum) == size


def test_cloudformation_always_hears_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    sent: list[tuple[str, dict[str, str], str, str | None]] = []

    def respond(
        event: Any, context: Any, status: str, data: dict[str, str], physical: str, reason: str | None = None
    ) -> None:
        sent.append((status, data, physical, reason))

    monkeypatch.setattr(boto3, "client", lambda service: AutoScaling([group(8)]))
    handler(event("Update"), None, respond)
    monkeypatch.setattr(boto3, "client", lambda service: AutoScaling([], fail=RuntimeError("throttled")))
    handler(event("Update"), None, respond)
    handler(event("Delete"), None, respond)
    assert sent == [
        ("SUCCESS", {"Size": "8"}, "app-prod-fleet-size", None),
        ("FAILED", {}, "app-prod-fleet-size", "RuntimeError: throttled"),
        ("SUCCESS", {"Size": "0"}, "app-prod-fleet-size", None),
    ]


def test_the_handler_fits_in_a_templates_inline_code() -> None:
    from infra.fleet_size import HANDLER_SOURCE

    assert len(HANDLER_SOURCE.read_bytes()) < 4096  # CloudFormation's ZipFile limit
