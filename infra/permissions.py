"""The instance role's grants, each limited to the one resource the worker needs.

Written as explicit statements rather than CDK's ``grant_*`` helpers because those add actions the
worker never calls (``dynamodb:BatchWriteItem``, ``BatchGetItem`` ...). The only ``*``
resource is ``cloudwatch:PutMetricData``, which IAM cannot scope to a resource; its
``cloudwatch:namespace`` condition limits it to the application's namespace instead.
"""

from __future__ import annotations

from urllib.parse import urlparse

from aws_cdk import ArnFormat, Aws, Stack
from aws_cdk import aws_iam as iam

from ground.settings import Settings
from infra.errors import InfraConfigError
from infra.source_stream import KINESIS_ENCRYPTION_CONTEXT

STREAM_ACTIONS = ["dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"]
# Exactly the calls consumer/streams/kinesis.py makes: the stream's summary (its ARN, mode, retention),
# its shards (and a finished shard's children, with a ShardFilter), an iterator, the records.
KINESIS_ACTIONS = [
    "kinesis:DescribeStreamSummary",
    "kinesis:ListShards",
    "kinesis:GetShardIterator",
    "kinesis:GetRecords",
]
# Exactly the calls consumer/leases/dynamodb.py and tables.py make (the table is created here, not by the worker).
# A lease create is a TransactWriteItems, which IAM authorises item by item: PutItem on the leases
# table, ConditionCheckItem on the workers table's lineage row.
LEASES_ACTIONS = [
    "dynamodb:ConditionCheckItem",
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Scan",
]
# consumer/processing/windows.py's DynamoDBWindowStateStore: get / put / delete versions, query a shard's.
WINDOW_STATE_ACTIONS = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query"]
LOG_ACTIONS = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]


def s3_location(uri: str, key: str) -> tuple[str, str]:
    """(bucket, prefix) of ``s3://bucket/prefix``; ``key`` names the setting for the error."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise InfraConfigError(f"{key}: expected s3://bucket/prefix, got {uri!r}")
    return parsed.netloc, parsed.path.strip("/")


def sqs_queue_arn(url: str, key: str) -> str:
    """ARN of the queue at ``https://sqs.<region>.amazonaws.com/<account>/<name>``."""
    parsed = urlparse(url)
    parts = parsed.path.strip("/").split("/")
    host = parsed.netloc.split(".")
    if parsed.scheme != "https" or len(parts) != 2 or len(host) < 3 or host[0] != "sqs":
        raise InfraConfigError(
            f"{key}: expected https://sqs.<region>.amazonaws.com/<account>/<queue>, got {url!r}"
        )
    return f"arn:{Aws.PARTITION}:sqs:{host[1]}:{parts[0]}:{parts[1]}"


def _s3_write(bucket: str, prefix: str, *, listing: bool) -> list[iam.PolicyStatement]:
    objects = f"arn:{Aws.PARTITION}:s3:::{bucket}/{prefix + '/' if prefix else ''}*"
    statements = [iam.PolicyStatement(actions=["s3:PutObject"], resources=[objects])]
    if listing:
        # The change log lists what already landed for a shard so that replays never duplicate.
        statements += [
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]),
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[f"arn:{Aws.PARTITION}:s3:::{bucket}"],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}/*" if prefix else "*"]}},
            ),
        ]
    return statements


def destination_statements(settings: Settings) -> list[iam.PolicyStatement]:
    """S3/SQS grants for the configured sink destination and dead letter only."""
    statements: list[iam.PolicyStatement] = []
    destination = settings.processing.options.get("destination")
    if isinstance(destination, str) and destination.startswith("s3://"):
        bucket, prefix = s3_location(destination, "processing.options.destination")
        statements += _s3_write(bucket, prefix, listing=True)
    dead_letter = settings.processing.dead_letter
    if dead_letter.type == "s3" and dead_letter.uri:
        bucket, prefix = s3_location(dead_letter.uri, "processing.dead_letter.uri")
        statements += _s3_write(bucket, prefix, listing=False)
    elif dead_letter.type == "sqs" and dead_letter.uri:
        queue = sqs_queue_arn(dead_letter.uri, "processing.dead_letter.uri")
        statements.append(iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[queue]))
    return statements


def dynamodb_source_statements(
    source_table_arns: list[str], stream_arns: list[str]
) -> list[iam.PolicyStatement]:
    """What reading the tables' DynamoDB streams takes."""
    return [
        # Each stream's reads on that stream only (one ARN, or one table's streams, per stream).
        iam.PolicyStatement(actions=STREAM_ACTIONS, resources=stream_arns),
        # The worker finds each stream through its table's LatestStreamArn.
        iam.PolicyStatement(actions=["dynamodb:DescribeTable"], resources=source_table_arns),
    ]


def kinesis_source_statements(stream_arn: str, *, key_arn: str | None) -> list[iam.PolicyStatement]:
    """What reading one Kinesis stream takes: its reads on its ARN and, when its records are
    encrypted with a customer-managed key, kms:Decrypt on that key for this stream's records only
    (the encryption context Kinesis passes to KMS names the stream). A stream under the
    AWS-managed key aws/kinesis needs no KMS grant."""
    statements = [iam.PolicyStatement(actions=KINESIS_ACTIONS, resources=[stream_arn])]
    if key_arn:
        statements.append(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[key_arn],
                conditions={"StringEquals": {KINESIS_ENCRYPTION_CONTEXT: stream_arn}},
            )
        )
    return statements


def worker_statements(
    stack: Stack,
    settings: Settings,
    *,
    source: list[iam.PolicyStatement],
    leases_table_arns: list[str],
    log_group_arns: list[str],
    group_name: str,
    window_state_table_arn: str | None = None,
) -> list[iam.PolicyStatement]:
    """Everything a worker instance may do, resource by resource."""
    window_state = (
        [iam.PolicyStatement(actions=WINDOW_STATE_ACTIONS, resources=[window_state_table_arn])]
        if window_state_table_arn
        else []
    )
    return [
        # Reading the source: its streams' reads (dynamodb_ or kinesis_source_statements).
        *source,
        iam.PolicyStatement(actions=LEASES_ACTIONS, resources=leases_table_arns),
        iam.PolicyStatement(
            actions=LOG_ACTIONS,
            resources=[arn for group in log_group_arns for arn in (group, f"{group}:log-stream:*")],
        ),
        iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": settings.metrics_namespace}},
        ),
        # The watchdog: the termination hand-off, and Unhealthy when the workers crash-loop or go silent.
        iam.PolicyStatement(
            actions=["autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceHealth"],
            resources=[
                stack.format_arn(
                    service="autoscaling",
                    resource="autoScalingGroup",
                    resource_name=f"*:autoScalingGroupName/{group_name}",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            ],
        ),
        # Reads that take no resource ARN: at boot, which group this instance is in (the group's
        # name is CloudFormation's); for the watchdog, whether another instance of the group is being
        # replaced (it replaces one at a time), and the host names of the group's instances (a peer
        # cut off from the tables is marked Unhealthy by the others: deploy/peers.py).
        iam.PolicyStatement(
            actions=[
                "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeAutoScalingGroups",
                "ec2:DescribeInstances",
            ],
            resources=["*"],
        ),
        # The bootstrap's creation/update signal (cloudformation:SignalResource on this stack only)
        # is granted by CDK itself with the group's ``signals`` (infra/fleet.py).
        *window_state,
        *(statement for view in settings.per_stream() for statement in destination_statements(view)),
    ]
