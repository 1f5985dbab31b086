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
    assert [(s["Action"], s["Resource"], s.get("Condition")) for s in statements] == [
        ("autoscaling:DescribeAutoScalingGroups", "*", None),
        (
            "autoscaling:SetDesiredCapacity",
            "*",
            {
                "StringEquals": {
                    "autoscaling:ResourceTag/aws:cloudformation:stack-name": list(synth.stacks)[-1]
                }
            },
        ),
    ]
    assert not resources[role]["Properties"].get("ManagedPolicyArns")


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_new_group_is_carried_to_the_old_ones_size_once_scaling_names_it(
    env: str, synthesized: dict[str, Synthesized]
) -> None:
    """The size read when a deploy begins goes stale while the new group boots (the alarms still scale
    the old one): a second resource of the same function, updated with each new group, after the
    scaling policies and their alarms name it, before the old group is deleted."""
    resources = synthesized[env].raw["Resources"]
    ((group_id, group),) = [
        (k, r["Properties"])
        for k, r in resources.items()
        if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"
    ]
    (size,) = [r for r in resources.values() if r["Type"] == "Custom::FleetSize"]
    (carried,) = [r for r in resources.values() if r["Type"] == "Custom::FleetSizeCarried"]
    props = carried["Properties"]
    assert props["ServiceToken"] == size["Properties"]["ServiceToken"]
    assert (props["Mode"], props["GroupName"], props["GroupLogicalId"]) == (
        "carry",
        {"Ref": group_id},
        group_id,
    )
    assert (props["MinSize"], props["MaxSize"]) == (group["MinSize"], group["MaxSize"])
    scaling = {
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::AutoScaling::ScalingPolicy"
        or (
            r["Type"] == "AWS::CloudWatch::Alarm"
            and any(
                "Fn::GetAtt" in a
                and resources[a["Fn::GetAtt"][0]]["Type"] == "AWS::AutoScaling::ScalingPolicy"
                for a in r["Properties"].get("AlarmActions", [])
                if isinstance(a, dict)
            )
        )
    }
    assert len(scaling) == 4  # scale out, scale in: each policy and its alarm
    assert scaling <= set(carried.get("DependsOn", []))


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


def carry(name: str = "new", minimum: int = 3, maximum: int = 12) -> dict[str, Any]:
    request = event("Update", minimum, maximum)
    request["ResourceProperties"].update({"Mode": "carry", "GroupName": name})
    return request


class Carrying(AutoScaling):
    def __init__(self, groups: list[dict[str, Any]]) -> None:
        super().__init__(groups)
        self.set: list[dict[str, Any]] = []

    def set_desired_capacity(self, **request: Any) -> None:
        self.set.append(request)


def named(name: str, desired: int, **tags: str) -> dict[str, Any]:
    return {**group(desired, **tags), "AutoScalingGroupName": name}


@pytest.mark.parametrize(
    ("old", "new", "maximum", "size"),
    [
        (6, 5, 12, 6),  # the old group scaled out while the new one booted
        (4, 5, 12, 4),  # ... or in
        (14, 10, 12, 12),  # within the new bounds
    ],
)
def test_the_new_group_takes_the_size_the_old_one_reached(
    old: int, new: int, maximum: int, size: int
) -> None:
    client = Carrying([named("old", old), named("new", new), named("dev", 9, stack="app-dev")])
    assert answer(carry(maximum=maximum), client) == {"Size": str(size)}
    assert client.set == [{"AutoScalingGroupName": "new", "DesiredCapacity": size, "HonorCooldown": False}]


@pytest.mark.parametrize("groups", [[("new", 5)], [("old", 5), ("new", 5)], []])
def test_nothing_is_set_without_an_old_group_or_a_difference(groups: list[tuple[str, int]]) -> None:
    """An update in place (no replacement), a size already right, or a group not listed yet."""
    client = Carrying([named(n, d) for n, d in groups])
    assert answer(carry(), client) == {"Size": "5" if groups else "0"}
    assert client.set == []


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
    handler(carry(), None, respond)
    assert sent == [
        ("SUCCESS", {"Size": "8"}, "app-prod-fleet-size", None),
        ("FAILED", {}, "app-prod-fleet-size", "RuntimeError: throttled"),
        ("SUCCESS", {"Size": "0"}, "app-prod-fleet-size", None),
        ("FAILED", {}, "app-prod-fleet-size-carried", "RuntimeError: throttled"),
    ]


def test_the_handler_fits_in_a_templates_inline_code() -> None:
    from infra.fleet_size import HANDLER_SOURCE

    assert len(HANDLER_SOURCE.read_bytes()) < 4096  # CloudFormation's ZipFile limit
