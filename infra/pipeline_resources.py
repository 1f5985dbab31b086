"""Resources of the Spark pipeline: the change-log bucket (stateful stack) and an EMR Serverless
application with its job role (stateless stack).

The bucket exists whenever something needs it: the workers' change log goes to S3
(``processing.options.destination`` is ``s3://...``; the bucket is then the one it names), or the
pipeline runs on EMR Serverless (CDK names the bucket when the destination is not on S3). Before, it
existed only with EMR, so a dev fleet writing an s3:// change log retried forever against a bucket
nobody created.

The job role may do what the jobs do and no more: read the change log, read and write the
snapshot and stats locations and the ``emr`` work prefix (submit's archives, the job logs), scan
the source table (``verify``), and put ``follow``'s freshness metric in the application's
namespace. ``follow`` itself is scheduled by :mod:`infra.pipeline_follow`.

Bucket names are global across all accounts and regions, so a name the stack gives the bucket must
carry the environment's account and region (``{account}`` and ``{region}`` in the configured
location, which the settings loader fills in): a second adopter, or the same environment in another
region, cannot collide with it. The bucket is versioned; noncurrent versions expire, so overwritten
and deleted objects (a batch delivered again, a snapshot's replaced files) do not pile up forever.
Where the environment is disposable (dev) the bucket is emptied and removed with its stack, so
``cdk destroy`` succeeds; elsewhere (prod) it is retained.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import Aws, CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_emrserverless as emrserverless
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from ground.settings import Settings
from infra.errors import InfraConfigError
from infra.permissions import s3_location
from infra.pipeline_follow import FollowOnEmr

# One naming rule for the stack and for ``consumer pipeline submit``, which finds the app by it.
from tools.emr.request import application_name

EMR_RELEASE = "emr-7.5.0"
# Stated, not left to the service default, because submit builds the Python environment for it.
EMR_ARCHITECTURE = "X86_64"
OBJECT_READ = ["s3:GetObject"]
OBJECT_WRITE = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
# verify: a consistent scan of the source table; DescribeTable to name a missing table clearly.
TABLE_ACTIONS = ["dynamodb:DescribeTable", "dynamodb:Scan"]
# An overwritten or deleted object stays recoverable this long: time to notice a bad run.
NONCURRENT_VERSION_DAYS = 30
NAMES_SECTION = "docs/deploy.md#names-across-accounts-and-regions"
# S3's rule for a bucket name (general purpose buckets), as far as a synth can check it.
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def changelog_bucket_name(settings: Settings) -> str | None:
    """The bucket of an ``s3://`` change-log destination, or None (CDK then names the bucket)."""
    destination = settings.processing.options.get("destination")
    if isinstance(destination, str) and destination.startswith("s3://"):
        return s3_location(destination, "processing.options.destination")[0]
    return None


def require_own_bucket_names(settings: Settings) -> None:
    """A bucket the stack names must be a valid S3 name carrying the account and the region, so
    that no other account's or region's deployment of the product can hold it already."""
    name = changelog_bucket_name(settings)
    if name is None or settings.endpoint_url is not None:
        return
    key = "processing.options.destination"
    if not _BUCKET_NAME.match(name):
        raise InfraConfigError(
            f"env {settings.env}: {key}: {name!r} is not an S3 bucket name (3 to 63 lowercase "
            f"letters, digits, '-' and '.'): shorten it; {NAMES_SECTION}"
        )
    account, region = settings.account or "", settings.region
    if account not in name or region not in name:
        raise InfraConfigError(
            f"env {settings.env}: {key}: the stack creates bucket {name}, and bucket names are global "
            f"across accounts and regions: write it with {{account}} and {{region}} (e.g. "
            f"s3://{settings.name_prefix}-{{account}}-{{region}}/changes); {NAMES_SECTION}"
        )


def needs_changelog_bucket(settings: Settings) -> bool:
    """Whether the stateful stack creates the change-log bucket: the workers write there, or the
    pipeline runs on EMR (which has no other place for its data)."""
    return changelog_bucket_name(settings) is not None or settings.pipeline.emr_serverless


@dataclass(frozen=True)
class JobLocation:
    """One S3 prefix the Spark jobs use; ``writable`` ones are also written and deleted."""

    key: str  # the setting it comes from, for error messages
    bucket: str
    prefix: str
    writable: bool

    def object_arns(self) -> list[str]:
        # ``<prefix>_$folder$`` is the marker Hadoop's S3 file systems write for a directory.
        base = f"arn:{Aws.PARTITION}:s3:::{self.bucket}"
        if not self.prefix:
            return [f"{base}/*"]
        return [f"{base}/{self.prefix}/*", f"{base}/{self.prefix}_$folder$"]


def job_locations(settings: Settings) -> list[JobLocation]:
    """The prefixes of ``pipeline.*`` the jobs read (the change log) and write (everything else)."""
    pipeline = settings.pipeline
    work = pipeline.emr_work_location
    if work is None:
        raise InfraConfigError(
            "pipeline.emr_work_uri: give an s3://bucket/prefix for submit's archives and the job logs"
        )
    found = []
    for key, uri, writable in (
        ("pipeline.changelog_uri", pipeline.changelog_uri, False),
        ("pipeline.snapshot_uri", pipeline.snapshot_uri, True),
        ("pipeline.stats_uri", pipeline.stats_uri, True),
        ("pipeline.emr_work_uri", work, True),
    ):
        bucket, prefix = s3_location(uri, key)
        found.append(JobLocation(key, bucket, prefix, writable))
    return found


def job_statements(settings: Settings, *, source_table_arn: str) -> list[iam.PolicyStatement]:
    """Everything a pipeline job may do, location by location."""
    locations = job_locations(settings)
    statements = []
    for writable, actions in ((False, OBJECT_READ), (True, OBJECT_WRITE)):
        arns = [arn for loc in locations if loc.writable == writable for arn in loc.object_arns()]
        if arns:
            statements.append(iam.PolicyStatement(actions=actions, resources=sorted(set(arns))))
    for bucket in sorted({loc.bucket for loc in locations}):
        prefixes = sorted(
            {
                pattern
                for loc in locations
                if loc.bucket == bucket
                for pattern in ((loc.prefix, f"{loc.prefix}/*") if loc.prefix else ("*",))
            }
        )
        statements.append(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[f"arn:{Aws.PARTITION}:s3:::{bucket}"],
                conditions={"StringLike": {"s3:prefix": prefixes}},
            )
        )
    statements.append(iam.PolicyStatement(actions=TABLE_ACTIONS, resources=[source_table_arn]))
    statements.append(glue_statement(settings))
    if settings.pipeline.emr_follow:  # follow's LakeFreshnessSeconds (pipeline/freshness.py)
        statements.append(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": settings.metrics_namespace}},
            )
        )
    return statements


GLUE_ACTIONS = [
    "glue:GetDatabase",
    "glue:GetDatabases",
    "glue:CreateDatabase",
    "glue:GetTable",
    "glue:GetTables",
    "glue:CreateTable",
    "glue:UpdateTable",
]


def glue_statement(settings: Settings) -> iam.PolicyStatement:
    """The pipeline's Iceberg tables in the Glue Data Catalog: its own database (the namespace
    pipeline/table.py names for this application and environment) and the tables in it, nothing else.
    PyIceberg creates the database and tables on the first run and commits each run by UpdateTable."""
    from pipeline.catalog import namespace_for

    database = namespace_for(settings.application_name, settings.env)
    glue = f"arn:{Aws.PARTITION}:glue:{Aws.REGION}:{Aws.ACCOUNT_ID}"
    return iam.PolicyStatement(
        actions=GLUE_ACTIONS,
        resources=[f"{glue}:catalog", f"{glue}:database/{database}", f"{glue}:table/{database}/*"],
    )


def changelog_expiration(settings: Settings) -> list[s3.LifecycleRule]:
    """``pipeline.changelog_expiration_days``: change-log objects expire that long after they land
    (then go as noncurrent versions do); nothing else in the bucket (snapshots, stats, dead letters)."""
    days = settings.pipeline.changelog_expiration_days
    destination = settings.processing.options.get("destination")
    if days is None or not isinstance(destination, str) or not destination.startswith("s3://"):
        return []
    _, prefix = s3_location(destination, "processing.options.destination")
    return [
        s3.LifecycleRule(
            id="expire-change-log", prefix=f"{prefix}/" if prefix else None, expiration=Duration.days(days)
        )
    ]


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
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-noncurrent-versions",
                    noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS),
                    expired_object_delete_marker=True,
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
                *changelog_expiration(settings),
            ],
            # Disposable environments: emptied (every version) and removed with the stack.
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            auto_delete_objects=not retain,
        )
        if not retain:
            _accept_lint_of_the_emptying_function(Stack.of(self))


# CDK's own function that empties a bucket before the stack deletes it (one per stack).
_AUTO_DELETE_PROVIDER = "Custom::S3AutoDeleteObjectsCustomResourceProvider"


def _accept_lint_of_the_emptying_function(stack: Stack) -> None:
    """cfn-lint's W3005 on CDK's generated function (a DependsOn on its role beside a GetAtt of
    it: redundant, harmless) is accepted where it occurs, so the lint stays clean everywhere else."""
    provider = stack.node.try_find_child(_AUTO_DELETE_PROVIDER)
    handler = provider.node.try_find_child("Handler") if provider is not None else None
    if isinstance(handler, CfnResource):
        handler.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})


class PipelineResources(Construct):
    """``application`` (EMR Serverless, Spark) and ``job_role`` (:func:`job_statements`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        source_table_arn: str,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.job_role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com"),
            description=f"{settings.application_name} {settings.env} Spark pipeline jobs",
        )
        for statement in job_statements(settings, source_table_arn=source_table_arn):
            self.job_role.add_to_policy(statement)
        self.application = emrserverless.CfnApplication(
            self,
            "Spark",
            name=application_name(settings),
            release_label=EMR_RELEASE,
            architecture=EMR_ARCHITECTURE,
            type="SPARK",
            auto_stop_configuration=emrserverless.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=int(Duration.minutes(15).to_minutes())
            ),
            maximum_capacity=emrserverless.CfnApplication.MaximumAllowedResourcesProperty(
                cpu="16 vCPU", memory="64 GB"
            ),
        )
        self.follow: FollowOnEmr | None = None
        if settings.pipeline.emr_follow:
            self.follow = FollowOnEmr(
                self,
                "Follow",
                settings=settings,
                application=self.application,
                job_role=self.job_role,
                alarm_topic=alarm_topic,
            )
