"""Every cdk-nag finding this project accepts, with the reason, in one place for review.

Each acknowledgment names the exact finding (for IAM5, the exact wildcard resource), so a new
wildcard anywhere else still fails the synth.
"""

from __future__ import annotations

from aws_cdk import Stack
from constructs import IConstruct

from ground.settings import Settings
from infra.fleet import WorkerFleet
from infra.nag import suppress
from infra.permissions import s3_location
from infra.pipeline_resources import job_locations

_PACK = "AwsSolutions::"


def _ack(construct: IConstruct | None, rule: str, reason: str) -> None:
    if construct is not None:
        suppress(construct, f"{_PACK}{rule}", reason)


def suppress_accepted_findings(stack: Stack, settings: Settings) -> None:
    """Attach the reasons to the constructs of ``stack`` (call after the constructs exist)."""
    region = settings.region
    # How cdk-nag prints the account in an ARN: the pinned account, or the pseudo parameter.
    account = settings.account or "<AWS::AccountId>"
    fleet = stack.node.try_find_child("Fleet")
    policy = stack.node.try_find_child("WorkerPolicy")
    pipeline = stack.node.try_find_child("Pipeline")
    _ack(
        fleet,
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
        "AmazonSSMManagedInstanceCore is AWS's documented minimum for Session Manager, which replaces SSH "
        "keys on the workers.",
    )
    if settings.fleet.vpc is None:
        _ack(
            fleet,
            "AwsSolutions-VPC7",
            "The VPC created for the fleet carries only outbound calls to AWS APIs; flow logs (and their "
            "cost) are left to teams that bring their own VPC via fleet.vpc.",
        )
    _ack(
        fleet,
        "AwsSolutions-AS3",
        "Scaling is driven by this stack's own alarms, which notify the alarm topic; per-instance launch/"
        "terminate events are in the group's activity history.",
    )
    for group in (settings.worker_log_group, settings.application_log_group, settings.metrics_log_group):
        _ack(
            policy,
            f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:{region}:{account}:log-group:"
            f"{group}:log-stream:*]",
            "Log stream names are created at run time (one per worker process); the grant is limited to "
            "streams of this one log group.",
        )
    _ack(
        policy,
        "AwsSolutions-IAM5[Resource::*]",
        "Four actions that support no resource ARN: cloudwatch:PutMetricData, limited by the "
        "cloudwatch:namespace condition to the application's namespace, and three reads: "
        "DescribeAutoScalingInstances (an instance learns its group's name at boot), "
        "DescribeAutoScalingGroups (the watchdog checks no other instance is being replaced) and "
        "ec2:DescribeInstances (the watchdog finds the host of a peer cut off from the tables).",
    )
    if isinstance(fleet, WorkerFleet):
        size = fleet.size
        _ack(
            size,
            "AwsSolutions-IAM5[Resource::*]",
            "autoscaling:DescribeAutoScalingGroups supports no resource ARN; the function reads the "
            "environment's group size at a deploy, and sets the desired capacity only of groups "
            "tagged with this stack's name (a ResourceTag condition: the group's generated name is "
            "not known before it exists).",
        )
        # The grant names the group by its generated name: a Ref to its logical id.
        group = fleet.signal_resource
        _ack(
            policy,
            f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:{region}:{account}:"
            f"autoScalingGroup:*:autoScalingGroupName/<{group}>]",
            "The group's ARN contains a UUID only known after deployment; the grant names the group.",
        )
    stream = stack.node.try_find_child("SourceStream")
    if settings.source.create and settings.source.kms_key_arn:
        _ack(
            stream,
            "AwsSolutions-KDS3",
            "source.kms_key_arn names the customer-managed key this stream must be encrypted with "
            "(a compliance choice of the team, with its KMS cost per consumer and producer); without "
            "it the stream uses aws/kinesis.",
        )
    for view in settings.per_stream():  # each stream's grants (one view without streams:)
        _ack_stream_grants(policy, view, region, account)
    if pipeline is not None and policy is not None:  # the EMR job role, in the fleet's stack
        for location in job_locations(settings):
            wildcard = f"{location.prefix}/*" if location.prefix else "*"
            _ack(
                pipeline,
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{location.bucket}/{wildcard}]",
                f"Spark names its objects at run time; the grant is limited to the prefix of {location.key}.",
            )
        from pipeline.catalog import namespace_for

        database = namespace_for(settings.application_name, settings.env)
        _ack(
            pipeline,
            f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:table/{database}/*]",
            "The pipeline's Iceberg tables (snapshot, tombstones, base) are created by name at run time; "
            "the grant is limited to the pipeline's own Glue database.",
        )
        if settings.pipeline.emr_follow:
            _ack(
                pipeline,
                "AwsSolutions-IAM5[Resource::*]",
                "cloudwatch:PutMetricData (follow's LakeFreshnessSeconds) supports no resource ARN; the "
                "statement is limited by the cloudwatch:namespace condition to the application's namespace.",
            )
    if pipeline is not None and policy is None:  # the change-log bucket, in the data stack
        _ack(
            pipeline,
            "AwsSolutions-S1",
            "Server access logs need a second bucket; access to the change log is audited with CloudTrail "
            "data events where required.",
        )


def _ack_stream_grants(policy: IConstruct | None, settings: Settings, region: str, account: str) -> None:
    """One stream's accepted wildcards: its table's streams, its change log's and dead letter's
    prefixes (``settings`` is that stream's view, Settings.per_stream)."""
    table = settings.table
    if policy is not None and table.existing_stream_arn is None:
        _ack(
            policy,
            f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:dynamodb:{region}:{account}:table/"
            f"{table.source_table_name}/stream/*]",
            "The table's stream label is not known to the fleet's stack (the table is imported, or lives in "
            "the data stack) and changes when the stream is re-enabled; the grant covers the streams of "
            "this one table (read-only stream actions).",
        )
    uris = [settings.processing.options.get("destination"), settings.processing.dead_letter.uri]
    for uri in uris:
        if isinstance(uri, str) and uri.startswith("s3://"):
            bucket, prefix = s3_location(uri, "processing")
            _ack(
                policy,
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{bucket}/{prefix + '/' if prefix else ''}*]",
                "Object names are made at run time (shard id and sequence range); the grant is limited to "
                "the configured prefix.",
            )
