"""Two stacks per environment: the stateful one (tables, log groups, the pipeline's bucket, the alarm
topic) and the stateless one (fleet, grants, monitoring), which depends on it.

The stateless stack ``<app>-<env>`` can be replaced, rolled back or deleted freely; the stateful
stack ``<app>-<env>-data`` holds what must survive that. The stateless stack refers to the stateful
resources by their configured names (ARNs built from the names), not through CloudFormation
exports, so neither stack is locked by an export the other imports.
"""

from __future__ import annotations

import re

from aws_cdk import ArnFormat, CfnOutput, Environment, Fn, Stack, Tags
from aws_cdk import aws_iam as iam
from constructs import Construct

from ground.settings import Settings
from infra.alarm_topic import AlarmTopic
from infra.fleet import FLEET_AZS, WorkerFleet
from infra.leases_table import LeasesTable, capacity_bounds
from infra.log_groups import LogGroups, log_group_arn
from infra.monitoring import Monitoring
from infra.nag import apply_nag
from infra.per_account import DISPOSABLE_ENVIRONMENTS
from infra.permissions import dynamodb_source_statements, kinesis_source_statements, worker_statements
from infra.pipeline_resources import ChangeLogBucket, PipelineResources, needs_changelog_bucket
from infra.source_stream import KinesisSource, kinesis_stream_arn
from infra.source_table import SourceTable, imported_streams_arn
from infra.suppressions import suppress_accepted_findings
from infra.window_state_table import WindowStateTable


def stack_name(settings: Settings) -> str:
    """The stateless stack (fleet, monitoring): the name ``cdk deploy`` users know."""
    return f"{settings.application_name}-{settings.env}"


def data_stack_name(settings: Settings) -> str:
    """The stateful stack (tables, log groups, the change-log bucket)."""
    return f"{stack_name(settings)}-data"


def _outputs(stack: Stack, outputs: dict[str, tuple[str, str]]) -> None:
    """What a user needs after a deploy (``cdk deploy --outputs-file``, the console's Outputs)."""
    for output_id, (value, description) in outputs.items():
        CfnOutput(stack, output_id, value=value, description=description)


def _finish(stack: Stack, settings: Settings) -> None:
    Tags.of(stack).add("application", settings.application_name)
    Tags.of(stack).add("environment", settings.env)
    suppress_accepted_findings(stack, settings)
    apply_nag(stack)


def source_id(index: int, table_name: str) -> str:
    """The construct id of a stream's source table: ``Source`` for the first (the single-table
    form's), ``Source<table name>`` for the others (their order in streams: may change)."""
    return "Source" if index == 0 else f"Source{re.sub(r'[^A-Za-z0-9]', '', table_name)}"


class StatefulStack(Stack):
    """Source table (created or imported), leases and workers tables, log groups, pipeline bucket, and
    the alarm topic with its subscription and key."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings) -> None:
        self.settings = settings
        protect = settings.env not in DISPOSABLE_ENVIRONMENTS
        super().__init__(
            scope,
            construct_id,
            env=Environment(account=settings.account, region=settings.region),
            description=f"{settings.application_name} stream consumer data ({settings.env})",
            # A stack holding an environment's tables is not deleted by one mistaken command.
            termination_protection=protect,
        )
        # One source table per stream; the first keeps the single-table id (its logical id, so
        # moving an environment from table: to streams: leaves its table where it was). A Kinesis
        # source reads no table: table: (every environment inherits base.yaml's) is created only when
        # the environment asks for it (table.create), and imported never (nothing would use it).
        kinesis_source = settings.source.is_kinesis
        self.sources = [
            SourceTable(
                self, source_id(index, view.table.source_table_name), settings=view.table, protect=protect
            )
            for index, view in enumerate(settings.per_stream())
            if not kinesis_source or view.table.create
        ]
        self.stream: KinesisSource | None = (
            KinesisSource(self, "SourceStream", settings=settings.source) if kinesis_source else None
        )
        self.leases = LeasesTable(
            self,
            "Leases",
            name=settings.leases_table_name,
            workers_name=settings.workers_table_name,
            settings=settings.worker,
            protect=protect,
            bounds=capacity_bounds(settings),
            target_utilization_percent=settings.scaling.lease_table_target_utilization_percent,
        )
        self.window_state: WindowStateTable | None = None
        if any(view.processing.tumbling_window_seconds > 0 for view in settings.per_stream()):
            self.window_state = WindowStateTable(
                self,
                "WindowState",
                name=settings.window_state_table_name,
                settings=settings.worker,
                protect=protect,
            )
        self.log_groups = LogGroups(self, "Logs", settings=settings, retain=protect)
        # Never replaced with the fleet: a new topic would need its subscription confirmed again.
        self.alarm_topic = AlarmTopic(self, "Alarms", settings=settings, retain=protect)
        self.changelog: ChangeLogBucket | None = None
        if needs_changelog_bucket(settings):  # the workers write an s3:// change log, or EMR runs
            self.changelog = ChangeLogBucket(self, "Pipeline", settings=settings, retain=protect)
        outputs: dict[str, tuple[str, str]] = {}
        if self.stream is not None:
            outputs["SourceStreamName"] = (self.stream.stream_name, "The Kinesis stream the fleet reads.")
            outputs["StreamArn"] = (self.stream.stream_arn, "The stream the workers read.")
        if self.sources and self.stream is not None:
            outputs["SourceTableName"] = (self.sources[0].table.table_name, "table: (created; not read).")
        elif self.sources:
            first = self.sources[0]
            outputs["SourceTableName"] = (first.table.table_name, "The table whose stream the fleet reads.")
            outputs["SourceTableArn"] = (first.table.table_arn, "ARN of that table.")
            outputs["StreamArn"] = (
                first.stream_arn,
                "The stream the workers read (a pattern when imported).",
            )
        outputs.update(
            {
                "LeasesTableName": (self.leases.table.table_name, "The leases table (one row per shard)."),
                "LeasesTableArn": (self.leases.table.table_arn, "ARN of the leases table."),
                "WorkersTableName": (self.leases.workers_table.table_name, "The workers' heartbeat table."),
            }
        )
        for index, source in enumerate(self.sources[1:], start=1):
            outputs[f"SourceTableName{index}"] = (source.table.table_name, f"streams.{index}'s table.")
            outputs[f"StreamArn{index}"] = (source.stream_arn, f"streams.{index}'s stream.")
        if self.window_state is not None:
            outputs["WindowStateTableName"] = (
                self.window_state.table.table_name,
                "Tumbling windows' state, saved with each checkpoint.",
            )
        if self.changelog is not None:
            outputs["ChangeLogBucketName"] = (self.changelog.bucket.bucket_name, "The change-log bucket.")
        _outputs(self, outputs)
        _finish(self, settings)


class ConsumerStack(Stack):
    """Fleet, the instance role's grants, dashboard, alarms and scaling policies of one environment."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        data: StatefulStack,
        source_path: str,
        asset_exclude: list[str],
    ) -> None:
        # Before super(): CDK may ask for availability_zones while it builds the stack.
        self.settings = settings
        super().__init__(
            scope,
            construct_id,
            env=Environment(account=settings.account, region=settings.region),
            description=f"{settings.application_name} stream consumer fleet ({settings.env})",
            termination_protection=settings.env not in DISPOSABLE_ENVIRONMENTS,
        )
        self.data = data
        self.add_stack_dependency(data, "the workers use its tables and log groups")
        self.fleet = WorkerFleet(
            self, "Fleet", settings=settings, source_path=source_path, asset_exclude=asset_exclude
        )
        table = settings.table
        self.worker_policy = iam.Policy(
            self,
            "WorkerPolicy",
            statements=worker_statements(
                self,
                settings,
                source=self._source_statements(settings),
                leases_table_arns=[
                    self._table_arn(settings.leases_table_name),
                    self._table_arn(settings.workers_table_name),
                ],
                log_group_arns=[log_group_arn(self, name) for name in data.log_groups.names],
                group_name=self.fleet.group_name,
                window_state_table_arn=self._table_arn(settings.window_state_table_name)
                if any(view.processing.tumbling_window_seconds > 0 for view in settings.per_stream())
                else None,
            ),
        )
        self.worker_policy.attach_to_role(self.fleet.role)
        self.monitoring = Monitoring(
            self, "Monitoring", settings=settings, group=self.fleet.group, group_name=self.fleet.group_name
        )
        monitoring = self.monitoring
        self.fleet.size.after(
            monitoring.scale_out_policy,
            monitoring.scale_in_policy,
            monitoring.scale_out_alarm,
            monitoring.scale_in_alarm,
        )
        self.pipeline: PipelineResources | None = None
        if settings.pipeline.emr_serverless:
            # Grants by the configured names (the pipeline's URIs are s3:// then), so no export.
            self.pipeline = PipelineResources(
                self,
                "Pipeline",
                settings=settings,
                source_table_arn=self._table_arn(table.source_table_name),
                alarm_topic=self.monitoring.topic,
            )
        region = settings.region
        dashboard = self.monitoring.dashboard_name  # the name given (the attribute is a token)
        outputs: dict[str, tuple[str, str]] = {
            "AutoScalingGroupName": (self.fleet.group_name, "The workers' Auto Scaling group."),
            "DashboardName": (dashboard, "The CloudWatch dashboard."),
            "DashboardUrl": (
                f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
                f"#dashboards:name={dashboard}",
                "The dashboard in the CloudWatch console.",
            ),
            "MetricsNamespace": (settings.metrics_namespace, "The workers' CloudWatch namespace."),
        }
        if self.monitoring.topic is not None:
            outputs["AlarmTopicArn"] = (self.monitoring.topic.topic_arn, "The topic every alarm notifies.")
        if self.pipeline is not None:
            outputs["EmrApplicationId"] = (
                self.pipeline.application.attr_application_id,
                "The EMR Serverless application of the Spark pipeline.",
            )
            outputs["EmrJobRoleArn"] = (
                self.pipeline.job_role.role_arn,
                "The role the pipeline's jobs run as (consumer pipeline submit passes it).",
            )
        _outputs(self, outputs)
        _finish(self, settings)

    def _source_statements(self, settings: Settings) -> list[iam.PolicyStatement]:
        """The grants of the source: each table's stream, or the one Kinesis stream."""
        if settings.source.is_kinesis:
            source = settings.source
            return kinesis_source_statements(kinesis_stream_arn(self, source), key_arn=source.kms_key_arn)
        tables = [view.table for view in settings.per_stream()]
        return dynamodb_source_statements(
            [self._table_arn(t.source_table_name) for t in tables],
            # The stream's label is only known in the account (and changes when the stream is
            # re-enabled): any stream of each table, unless its ARN is configured.
            [t.existing_stream_arn or imported_streams_arn(self, t.source_table_name) for t in tables],
        )

    def _table_arn(self, name: str) -> str:
        return self.format_arn(
            service="dynamodb", resource="table", resource_name=name, arn_format=ArnFormat.SLASH_RESOURCE_NAME
        )

    @property
    def availability_zones(self) -> list[str]:
        """Two zones chosen by CloudFormation (``Fn::GetAZs``), or those of the configured VPC.

        A stack pinned to an account would otherwise look its zones up at synth time, which needs
        credentials and a network, and the offline synth of every environment has neither.
        """
        if self.settings.fleet.vpc is not None:
            return list(self.settings.fleet.vpc.availability_zones)
        return [Fn.select(index, Fn.get_azs()) for index in range(FLEET_AZS)]
