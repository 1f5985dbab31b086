"""The worker fleet: launch template, Auto Scaling group with its termination lifecycle hook.

Instances have no SSH key (Session Manager instead), require IMDSv2, encrypt their volumes, and run
``worker_processes_per_instance`` ``consumer run`` units (see :mod:`infra.user_data` and
``deploy/bootstrap.py``). The termination hook holds a leaving instance until its workers have
released their leases, so a scale-in or a deploy hands shards over instead of waiting for them to
expire.

A deployment cannot half-work, and its rollback cannot wedge. A launch template change replaces
the whole group (``AutoScalingReplacingUpdate``): CloudFormation creates a new group, whose
creation policy waits for one signal per instance, sent only once every worker process on it has
completed a lease-taking round; only then is the old group deleted. If the new group fails, the
rollback deletes it and keeps the old one: a rollback waits for no instance signal, so whatever
made the new instances fail (a dependency down) cannot leave the stack in UPDATE_ROLLBACK_FAILED,
as a rolling update's rollback, which boots old instances and waits for their signals, could. An
instance whose workers later crash-loop or go silent is marked Unhealthy by its watchdog and
replaced.

A replaced group needs a new name, so CloudFormation names it; an instance learns its group's name
at boot (the user data asks Auto Scaling) for the watchdog's lifecycle calls. The new group starts
at the size the old one runs at (:mod:`infra.fleet_size`), not at ``min_instances``: the old group
is deleted once ``min_instances`` of the new one's instances signalled, the others booting beside
them.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, Fn, IgnoreMode, Stack
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from ground.settings import Settings
from infra.asset import staged_asset
from infra.fleet_size import FleetSize
from infra.user_data import SIGNAL_TIMEOUT_MINUTES, BootParameters, boot_script

ROOT_VOLUME_GB = 20


# Zones of the VPC created for the fleet.
FLEET_AZS = 2
# fleet.interface_endpoints names -> the AWS services behind them.
INTERFACE_ENDPOINTS = {
    "dynamodb-streams": ec2.InterfaceVpcEndpointAwsService.DYNAMODB_STREAMS,
    "monitoring": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
    "logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
}


def wheel_architecture(instance_type: str) -> str:
    """The manylinux architecture of the instance type's processor (Graviton types: aarch64)."""
    arm = ec2.InstanceType(instance_type).architecture == ec2.InstanceArchitecture.ARM_64
    return "aarch64" if arm else "x86_64"


def machine_image(settings: Settings) -> ec2.IMachineImage:
    """The AMI pinned for this release: ``fleet.ami_id`` in the environment's region.

    Not the SSM parameter of the latest Amazon Linux, which CloudFormation re-resolves at each
    deploy (a new image AWS publishes would replace every instance), nor a CDK context look-up
    (``cached_in_context``), which needs credentials at the first synth and leaves a dummy image id
    in an offline synth. Every AWS environment must set it (:mod:`infra.per_account`);
    only the emulator's environment, synthesized for inspection and never deployed, falls back to
    the parameter.
    """
    if settings.fleet.ami_id is not None:
        return ec2.MachineImage.generic_linux({settings.region: settings.fleet.ami_id})
    return ec2.MachineImage.latest_amazon_linux2023()


def add_gateway_endpoints(vpc: ec2.Vpc) -> None:
    """Gateway endpoints for S3 and DynamoDB (free): table, leases and asset traffic skip the NAT."""
    private = [ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)]
    vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=private)
    vpc.add_gateway_endpoint(
        "DynamoDbEndpoint", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB, subnets=private
    )


def add_interface_endpoints(
    scope: Construct, vpc: ec2.Vpc, settings: Settings, workers: ec2.ISecurityGroup
) -> str | None:
    """``fleet.interface_endpoints``, reachable on 443 from the workers' security group only.

    Returns the URL the workers' stream client must use when there is a DynamoDB Streams endpoint:
    that endpoint supports no private DNS (AWS PrivateLink for DynamoDB Streams), so the regional
    ``streams.dynamodb`` name would still resolve to the public endpoint through the NAT gateway.
    """
    names = settings.fleet.interface_endpoints
    if not names:
        return None
    endpoints_group = ec2.SecurityGroup(
        scope,
        "EndpointsSecurityGroup",
        vpc=vpc,
        description="Interface endpoints: HTTPS from the consumer workers only",
        allow_all_outbound=False,
    )
    endpoints_group.add_ingress_rule(workers, ec2.Port.tcp(443), "HTTPS from the workers")
    streams_url: str | None = None
    for name in names:
        logical = "".join(part.capitalize() for part in name.split("-"))
        streams = name == "dynamodb-streams"
        endpoint = vpc.add_interface_endpoint(
            f"{logical}Endpoint",
            service=INTERFACE_ENDPOINTS[name],
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            private_dns_enabled=not streams,
            security_groups=[endpoints_group],
            open=False,
        )
        if streams:
            # DnsEntries: "<hosted zone id>:<name>", the regional name first.
            regional = Fn.select(0, endpoint.vpc_endpoint_dns_entries)
            streams_url = "https://" + Fn.select(1, Fn.split(":", regional))
    return streams_url


def fleet_vpc(scope: Construct, settings: Settings) -> tuple[ec2.IVpc | ec2.Vpc, ec2.SubnetSelection]:
    """The existing VPC by attributes (no look-up at synth), or a new two-AZ VPC with its endpoints
    and one NAT gateway (``fleet.nat_gateway_per_az``: one per zone)."""
    given = settings.fleet.vpc
    if given is not None:
        vpc = ec2.Vpc.from_vpc_attributes(
            scope,
            "Vpc",
            vpc_id=given.vpc_id,
            availability_zones=given.availability_zones,
            private_subnet_ids=given.private_subnet_ids,
        )
        subnets = [
            ec2.Subnet.from_subnet_id(scope, f"Subnet{i}", subnet_id)
            for i, subnet_id in enumerate(given.private_subnet_ids)
        ]
        return vpc, ec2.SubnetSelection(subnets=subnets)
    nat_gateways = FLEET_AZS if settings.fleet.nat_gateway_per_az else 1
    vpc = ec2.Vpc(scope, "Vpc", max_azs=FLEET_AZS, nat_gateways=nat_gateways)
    add_gateway_endpoints(vpc)
    return vpc, ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)


class WorkerFleet(Construct):
    """``group`` (the Auto Scaling group), ``role`` (the instance role the stack grants to)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        source_path: str,
        asset_exclude: list[str],
    ) -> None:
        super().__init__(scope, construct_id)
        fleet = settings.fleet
        self.lifecycle_hook_name = f"{settings.application_name}-{settings.env}-release-leases"
        vpc, subnets = fleet_vpc(self, settings)
        self.role = iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"{settings.application_name} {settings.env} worker instances",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")],
        )
        # The allow-list of what instances need, plus the wheelhouse for this instance type's
        # architecture; the exclude list (.gitignore semantics) states the same allow-list.
        self.architecture = wheel_architecture(fleet.instance_type)
        self.asset = s3_assets.Asset(
            self,
            "Source",
            path=str(staged_asset(Path(source_path), settings, self.architecture)),
            exclude=asset_exclude,
            ignore_mode=IgnoreMode.GIT,
        )
        # Exactly this asset object, not the whole CDK assets bucket.
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.asset.bucket.arn_for_objects(self.asset.s3_object_key)],
            )
        )
        security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Consumer workers: no inbound; outbound to AWS APIs and package mirrors",
            allow_all_outbound=True,
        )
        streams_endpoint_url: str | None = None
        if isinstance(vpc, ec2.Vpc):
            streams_endpoint_url = add_interface_endpoints(self, vpc, settings, security_group)
        # Filled in below, once the group (the resource the boot signals) exists.
        user_data = ec2.UserData.for_linux()
        self.launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            instance_type=ec2.InstanceType(fleet.instance_type),
            machine_image=machine_image(settings),
            role=self.role,
            user_data=user_data,
            security_group=security_group,
            require_imdsv2=True,
            http_tokens=ec2.LaunchTemplateHttpTokens.REQUIRED,
            detailed_monitoring=True,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        ROOT_VOLUME_GB, encrypted=True, volume_type=ec2.EbsDeviceVolumeType.GP3
                    ),
                )
            ],
        )
        self.group = autoscaling.AutoScalingGroup(
            self,
            "Group",
            vpc=vpc,
            vpc_subnets=subnets,
            launch_template=self.launch_template,
            # No configured desired capacity: the scaling alarms own the size, and each deploy keeps
            # the size the group runs at (DesiredCapacity from infra/fleet_size.py, set below).
            min_capacity=fleet.min_instances,
            max_capacity=fleet.max_instances,
            # GroupInServiceInstances feeds the group-at-max alarm (monitoring.py).
            group_metrics=[autoscaling.GroupMetrics.all()],
            health_checks=autoscaling.HealthChecks.ec2(),
            # Creation, and the creation of a replacement group, waits for min_instances SUCCESS
            # signals (none to wait for when the group may start empty).
            signals=autoscaling.Signals.wait_for_min_capacity(
                timeout=Duration.minutes(SIGNAL_TIMEOUT_MINUTES)
            )
            if fleet.min_instances > 0
            else None,
            # A launch template change builds a new group beside the old one (module docstring).
            update_policy=autoscaling.UpdatePolicy.replacing_update(),
        )
        self.group_name = self.group.auto_scaling_group_name
        group_resource = self.group.node.default_child
        assert isinstance(group_resource, autoscaling.CfnAutoScalingGroup)
        # Part of the group, so a replacement group has it from its first instance on.
        hook = autoscaling.CfnAutoScalingGroup.LifecycleHookSpecificationProperty(
            lifecycle_hook_name=self.lifecycle_hook_name,
            lifecycle_transition="autoscaling:EC2_INSTANCE_TERMINATING",
            heartbeat_timeout=fleet.lifecycle_hook_timeout_seconds,
            default_result="CONTINUE",
        )
        group_resource.lifecycle_hook_specification_list = [hook]
        self.signal_resource = Stack.of(self).resolve(group_resource.logical_id)
        # The size the group runs at now, read at each deploy that changes the group (the scaling
        # alarms own it; infra/fleet_size.py). Last: it watches every property set above.
        self.size = FleetSize(
            self,
            "Size",
            group=group_resource,
            min_size=fleet.min_instances,
            max_size=fleet.max_instances,
            watched={
                "HealthCheckType": group_resource.health_check_type,
                "LaunchTemplate": {
                    "LaunchTemplateId": self.launch_template.launch_template_id,
                    "Version": self.launch_template.latest_version_number,
                },
                "LifecycleHookSpecificationList": [
                    {
                        "DefaultResult": hook.default_result,
                        "HeartbeatTimeout": hook.heartbeat_timeout,
                        "LifecycleHookName": hook.lifecycle_hook_name,
                        "LifecycleTransition": hook.lifecycle_transition,
                    }
                ],
                "MaxSize": str(fleet.max_instances),
                "MetricsCollection": [{"Granularity": "1Minute"}],
                "MinSize": str(fleet.min_instances),
                "VPCZoneIdentifier": group_resource.vpc_zone_identifier,
            },
        )
        group_resource.desired_capacity = self.size.size
        user_data.add_commands(
            *boot_script(
                settings,
                BootParameters(
                    asset_url=self.asset.s3_object_url,
                    lifecycle_hook_name=self.lifecycle_hook_name,
                    stack_name=Stack.of(self).stack_name,
                    signal_resource=self.signal_resource,
                    streams_endpoint_url=streams_endpoint_url,
                ),
            )
        )
