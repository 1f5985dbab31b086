"""Optional resources of the Spark pipeline: the change-log bucket (stateful stack) and an EMR
Serverless application with its job role (stateless stack).

The bucket is the one ``processing.options.destination`` names when that is ``s3://...`` (so the
workers' change log and the Spark job meet in the same place); otherwise CDK names it. The job role
may read and write that bucket only.
"""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_emrserverless as emrserverless
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from consumer.settings import Settings
from infra.permissions import s3_location

EMR_RELEASE = "emr-7.5.0"


def changelog_bucket_name(settings: Settings) -> str | None:
    """The bucket of an ``s3://`` change-log destination, or None (CDK then names the bucket)."""
    destination = settings.processing.options.get("destination")
    if isinstance(destination, str) and destination.startswith("s3://"):
        return s3_location(destination, "processing.options.destination")[0]
    return None


class ChangeLogBucket(Construct):
    """``bucket``: where the workers' change log lands and the Spark job reads and writes."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, retain: bool) -> None:
        super().__init__(scope, construct_id)
        bucket_name = changelog_bucket_name(settings)
        self.bucket = s3.Bucket(
            self,
            "ChangeLog",
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            auto_delete_objects=False,
        )


class PipelineResources(Construct):
    """``application`` (EMR Serverless, Spark) and ``job_role``, which may use the change-log bucket
    only: ``bucket_arn`` (from the bucket's configured name, so no export joins the stacks)."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, bucket_arn: str) -> None:
        super().__init__(scope, construct_id)
        self.job_role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com"),
            description=f"{settings.application_name} {settings.env} Spark pipeline jobs",
        )
        self.job_role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                resources=[f"{bucket_arn}/*"],
            )
        )
        self.job_role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket_arn]))
        self.application = emrserverless.CfnApplication(
            self,
            "Spark",
            name=f"{settings.application_name}-{settings.env}-pipeline",
            release_label=EMR_RELEASE,
            type="SPARK",
            auto_stop_configuration=emrserverless.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=int(Duration.minutes(15).to_minutes())
            ),
            maximum_capacity=emrserverless.CfnApplication.MaximumAllowedResourcesProperty(
                cpu="16 vCPU", memory="64 GB"
            ),
        )


def bucket_arn_by_name(name: str) -> str:
    return f"arn:{Aws.PARTITION}:s3:::{name}"
