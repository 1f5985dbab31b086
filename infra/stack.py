"""One stack per environment: composes the constructs and grants the fleet what it needs."""

from __future__ import annotations

from aws_cdk import Environment, Fn, Stack, Tags
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
# The fleet's VPC spans this many zones (fleet.py).
FLEET_AZS = 2


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
        # Before super(): CDK may ask for availability_zones while it builds the stack.
        self.settings = settings
        super().__init__(
            scope,
            construct_id,
            env=Environment(account=settings.account, region=settings.region),
            description=f"{settings.application_name} stream consumer fleet ({settings.env})",
        )
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

    @property
    def availability_zones(self) -> list[str]:
        """Two zones chosen by CloudFormation (``Fn::GetAZs``), or those of the configured VPC.

        A stack pinned to an account would otherwise look its zones up at synth time, which needs
        credentials and a network, and the offline synth of every environment has neither.
        """
        if self.settings.fleet.vpc is not None:
            return list(self.settings.fleet.vpc.availability_zones)
        return [Fn.select(index, Fn.get_azs()) for index in range(FLEET_AZS)]
