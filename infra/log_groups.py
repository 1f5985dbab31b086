"""The workers' log groups (in the data stack): lease worker, application, and the agent's EMF
metrics, each with the environment's retention, retained where the environment keeps its data."""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs
from constructs import Construct

from ground.settings import Settings


def log_group_arn(scope: Construct, name: str) -> str:
    """The ARN of log group ``name`` in the stack of ``scope`` (its account, region, partition)."""
    return Stack.of(scope).format_arn(
        service="logs", resource="log-group", resource_name=name, arn_format=ArnFormat.COLON_RESOURCE_NAME
    )


class LogGroups(Construct):
    """The lease-worker and application log groups (and the agent's EMF group), with retention."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, retain: bool) -> None:
        super().__init__(scope, construct_id)
        self.names = (settings.worker_log_group, settings.application_log_group, settings.metrics_log_group)
        self.arns: list[str] = []
        for logical, name in zip(("LeaseWorker", "Application", "Metrics"), self.names, strict=True):
            group = logs.CfnLogGroup(
                self, logical, log_group_name=name, retention_in_days=settings.logs.retention_days
            )
            group.apply_removal_policy(RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY)
            self.arns.append(log_group_arn(self, name))
