"""The Kinesis data stream the fleet reads (``source.kind: kinesis``): imported by default, created
only when asked (``source.create``), like the source table.

A created stream keeps its records ``source.retention_hours`` and has ``source.shard_count`` shards,
or is on demand. Its records are encrypted at rest with the AWS-managed key ``aws/kinesis`` (what
cdk-nag asks for: KDS1 wants encryption, KDS3 the managed key, a customer-managed key costing KMS
calls per consumer and producer), which needs no grant; or with the customer-managed key
``source.kms_key_arn`` where compliance asks for one, on which the workers get kms:Decrypt. It is
never deleted with the stack: its unread records are the team's data.

The fleet's stack names the stream by its ARN, built from its name in the environment's account and
region (or ``source.stream_arn``), so no CloudFormation export ties the two stacks together.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from constructs import Construct

from ground.settings import SourceSettings

# The encryption context Kinesis Data Streams passes to KMS with every call for a stream's records.
KINESIS_ENCRYPTION_CONTEXT = "kms:EncryptionContext:aws:kinesis:arn"


def kinesis_stream_arn(stack: Stack, source: SourceSettings) -> str:
    """The stream's ARN: ``source.stream_arn``, or the named stream in ``stack``'s account and region."""
    if source.stream_arn is not None and not source.create:
        return source.stream_arn
    return stack.format_arn(
        service="kinesis",
        resource="stream",
        resource_name=source.kinesis_stream_name,
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )


class KinesisSource(Construct):
    """``stream_arn`` and ``stream_name`` of the stream; ``stream`` when created here (and ``key``,
    the customer-managed key it is encrypted with, when one is configured)."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: SourceSettings) -> None:
        super().__init__(scope, construct_id)
        self.created = settings.create
        self.stream_name = settings.kinesis_stream_name
        self.stream: kinesis.Stream | None = None
        self.key: kms.IKey | None = None
        if not settings.create:
            self.stream_arn = kinesis_stream_arn(Stack.of(self), settings)
            return
        key_arn = settings.kms_key_arn
        self.key = kms.Key.from_key_arn(self, "Key", key_arn) if key_arn else None
        on_demand = settings.stream_mode == "ON_DEMAND"
        self.stream = kinesis.Stream(
            self,
            "Stream",
            stream_name=self.stream_name,
            stream_mode=kinesis.StreamMode.ON_DEMAND if on_demand else kinesis.StreamMode.PROVISIONED,
            shard_count=None if on_demand else settings.shard_count,
            retention_period=Duration.hours(settings.retention_hours),
            encryption=kinesis.StreamEncryption.KMS if self.key else kinesis.StreamEncryption.MANAGED,
            encryption_key=self.key,
            # The stream holds records not yet processed: never deleted with the stack.
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.stream_arn = self.stream.stream_arn
