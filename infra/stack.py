"""One stack per environment: composes the constructs and grants the fleet what it needs."""

from __future__ import annotations

from aws_cdk import Environment, Stack, Tags
from aws_cdk import aws_iam as iam
from constructs import Construct

from consumer.settings import Settings
from infra.fleet import WorkerFleet
from infra.leases_table import LeasesTable
from infra.monitoring import LogGroups, Monitoring
from infra.nag import apply_nag
from infra.permissions import worker_statements
from infra.pipeline_resources import PipelineResources
from infra.source_table import SourceTable
from infra.suppressions import suppress_accepted_findings

# Environments where throw-away resources are fine: no deletion protection, destroyed with the stack.
DISPOSABLE_ENVIRONMENTS = ("local", "dev")


def stack_name(settings: Settings) -> str:
    return f"{settings.application_name}-{settings.env}"


class ConsumerStack(Stack):
    """Tables, fleet, logs, dashboard, alarms (and pipeline resources) of one environment."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        source_path: str,
        asset_exclude: list[str],
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=Environment(account=settings.account, region=settings.region),
            description=f"{settings.application_name} stream consumer fleet ({settings.env})",
        )
        self.settings = settings
        protect = settings.env not in DISPOSABLE_ENVIRONMENTS
        self.source = SourceTable(self, "Source", settings=settings.table, protect=protect)
        self.leases = LeasesTable(
            self,
            "Leases",
            name=settings.leases_table_name,
            workers_name=settings.workers_table_name,
            settings=settings.worker,
            protect=protect,
            auto_scale_max_capacity=settings.scaling.lease_table_max_capacity,
            target_utilization_percent=settings.scaling.lease_table_target_utilization_percent,
        )
        self.log_groups = LogGroups(self, "Logs", settings=settings, retain=protect)
        self.fleet = WorkerFleet(
            self, "Fleet", settings=settings, source_path=source_path, asset_exclude=asset_exclude
        )
        self.worker_policy = iam.Policy(
            self,
            "WorkerPolicy",
            statements=worker_statements(
                self,
                settings,
                source_table_arn=self.source.table.table_arn,
                stream_arn=self.source.stream_arn,
                leases_table_arns=[self.leases.table.table_arn, self.leases.workers_table.table_arn],
                log_group_arns=self.log_groups.arns,
                group_name=self.fleet.group_name,
            ),
        )
        self.worker_policy.attach_to_role(self.fleet.role)
        self.monitoring = Monitoring(
            self, "Monitoring", settings=settings, group=self.fleet.group, group_name=self.fleet.group_name
        )
        self.pipeline: PipelineResources | None = None
        if settings.pipeline.emr_serverless:
            self.pipeline = PipelineResources(self, "Pipeline", settings=settings, retain=protect)
        Tags.of(self).add("application", settings.application_name)
        Tags.of(self).add("environment", settings.env)
        suppress_accepted_findings(self, settings)
        apply_nag(self)
