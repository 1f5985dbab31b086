"""The workers' group keeps its size across deploys: ``DesiredCapacity`` is what it runs now.

Without a desired capacity in the template, a replacing update (infra/fleet.py) creates the new
group at MinSize and deletes the old one: a fleet the scaling alarms had grown to 6-12 instances
would be cut to 3 by every deploy, and grow back only once leases reached 2N again, hours later. A
fixed desired capacity would reset the size at every deploy instead. So the group's DesiredCapacity is the
answer of a custom resource (:mod:`infra.fleet_size_handler`, inline Lambda code) that reads, at the
deploy, the size the environment's group runs at, within the new MinSize and MaxSize.

The custom resource is asked again whenever the group's properties change (its ``Watched`` property
holds them all, DesiredCapacity and the stack-wide tags aside), so every update of the group gets a
fresh answer and never a stale one.

That answer is read when the deploy begins; the new group then boots for minutes while the scaling
alarms still act on the old one. A second custom resource (``Custom::FleetSizeCarried``, the same
function) is created or updated once the new group, the scaling policies and the alarms naming it
exist (:meth:`FleetSize.after`), and sets the new group to the size the old one reached meanwhile,
before CloudFormation deletes the old group: a scale-out during a deploy is kept, not undone with the
old group and needed again minutes later. The function may describe Auto Scaling groups (an action
that takes no resource ARN) and set the desired capacity of this stack's groups, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

HANDLER_SOURCE = Path(__file__).with_name("fleet_size_handler.py")


class FleetSize(Construct):
    """``size``: the group's DesiredCapacity token (the custom resource's ``Size``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        group: autoscaling.CfnAutoScalingGroup,
        min_size: int,
        max_size: int,
        watched: Mapping[str, Any],
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        # No log group of its own (the fleet stack holds no stateful resources) and no permission to
        # write one: the function's one outcome, and any failure's reason, is its answer to
        # CloudFormation, which the stack's events show.
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Reads the workers' group size at each deploy",
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["autoscaling:DescribeAutoScalingGroups"], resources=["*"])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["autoscaling:SetDesiredCapacity"],
                resources=["*"],
                conditions={
                    "StringEquals": {
                        "autoscaling:ResourceTag/aws:cloudformation:stack-name": stack.stack_name
                    }
                },
            )
        )
        self.function: lambda_.Function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="index.handler",
            code=lambda_.Code.from_inline(HANDLER_SOURCE.read_text()),
            timeout=Duration.seconds(60),
            role=role,
            description="The workers' group's current size, for its DesiredCapacity at a deploy",
        )
        # CDK makes the function depend on its role beside the GetAtt that already orders them:
        # cfn-lint's W3005 (redundant, harmless) is accepted on this resource only.
        function_resource = self.function.node.default_child
        assert isinstance(function_resource, lambda_.CfnFunction)
        function_resource.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
        # Which group (by the tags CloudFormation gives it) and its bounds: both resources' inputs.
        bounds = {
            "StackName": stack.stack_name,
            "GroupLogicalId": stack.resolve(group.logical_id),
            "MinSize": str(min_size),
            "MaxSize": str(max_size),
        }
        self.resource = CustomResource(
            self,
            "Size",
            service_token=self.function.function_arn,
            resource_type="Custom::FleetSize",
            properties={
                **bounds,
                # Every property of the group but its size and tags (tests/infra checks it): any
                # change of the group asks again.
                "Watched": dict(watched),
            },
        )
        self.size = self.resource.get_att_string("Size")
        self.carried = CustomResource(
            self,
            "Carried",
            service_token=self.function.function_arn,
            resource_type="Custom::FleetSizeCarried",
            properties={
                **bounds,
                "Mode": "carry",
                # The group's name changes with each replacement: a new group is carried to once.
                "GroupName": group.ref,
            },
        )

    def after(self, *scaling: Construct) -> None:
        """The carried size is set only once ``scaling`` (the policies and the alarms that act on the
        group) name the new group: no scaling action can reach the old group after it is read."""
        self.carried.node.add_dependency(*scaling)
