"""Log groups, the seed-003 dashboard, its 2N scale-out alarm, and the alarms beyond the seed.

Scale-out is the seed's alarm exactly: ReturnedItemCount of the leases table's Scan (the items every
lease-taker scan returns) averaging >= multiplier x N over one 300 s period adds one instance.
Shards pile up in the leases table when the fleet cannot finish them, so a count that stays at 2N
means the fleet is falling behind.

Scale-in is ours: when the count of leases (the leases table holds leases only: heartbeats live in
the workers table) stays <= scale_in_multiplier x N for several periods, one instance is removed;
the termination lifecycle hook lets its workers release their leases first. Both thresholds come
from :func:`infra.scaling.scaling_thresholds`, which tests/infra evaluates over every fleet size.

The health alarms page through the alarm topic (``scaling.alarm_topic_arn`` or
``scaling.alarm_topic_email``; required where ``scaling.require_alarm_topic`` and outside local and
dev). The liveness alarm watches a gauge every live worker publishes at each lease-taking round
(``NumWorkers``, whether or not records flow) and treats missing data as breaching: silence there
means no worker is running. The other alarms treat it as not breaching: lag is only published
with records (an idle stream reports nothing), and counters only when their event happens.
"""

from __future__ import annotations

import jsii
from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from ground.settings import Settings
from infra.scaling import expected_partitions, scaling_thresholds
from infra.widgets import DYNAMODB_NAMESPACE, dashboard_widgets, panel

AUTOSCALING_NAMESPACE = "AWS/AutoScaling"
# A five-minute period always holds some of the lease taker's gauges while one worker runs (it
# publishes them every failover_time_millis, flushed every metrics.flush_interval_seconds).
LIVENESS_PERIOD_SECONDS = 300
# The group at its maximum for this many scaling periods: scale-out can add nothing more.
AT_MAX_PERIODS = 3


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


@jsii.implements(cloudwatch.IAlarmAction)
class _PolicyAction:
    """Alarm action that triggers a (simple) scaling policy given by ARN."""

    def __init__(self, policy_arn: str) -> None:
        self._arn = policy_arn

    def bind(self, _scope: Construct, _alarm: cloudwatch.IAlarm) -> cloudwatch.AlarmActionConfig:
        return cloudwatch.AlarmActionConfig(alarm_action_arn=self._arn)


def _insights(settings: Settings, function: str, name: str, operation: str) -> str:
    """A Metrics Insights query over every worker's EMF metric (alarms cannot use SEARCH)."""
    return (
        f'SELECT {function}({name}) FROM SCHEMA("{settings.metrics_namespace}", Operation, WorkerIdentifier) '
        f"WHERE Operation = '{operation}'"
    )


class Monitoring(Construct):
    """Dashboard, alarms and the scaling policies their actions trigger."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        group: autoscaling.AutoScalingGroup,
        group_name: str,
    ) -> None:
        super().__init__(scope, construct_id)
        scaling = settings.scaling
        period = Duration.seconds(scaling.period_seconds)
        n = expected_partitions(settings)
        prefix = f"{settings.application_name}-{settings.env}"
        thresholds = scaling_thresholds(settings)
        self.topic: sns.ITopic | None = None
        if scaling.alarm_topic_arn:
            self.topic = sns.Topic.from_topic_arn(self, "AlarmTopic", scaling.alarm_topic_arn)
        elif scaling.alarm_topic_email:
            topic = sns.Topic(self, "AlarmTopic", display_name=f"{prefix} alarms", enforce_ssl=True)
            topic.add_subscription(subscriptions.EmailSubscription(scaling.alarm_topic_email))
            self.topic = topic

        # -- the seed's alarm: leases >= multiplier x N adds exactly one instance
        self.scale_out_policy = autoscaling.CfnScalingPolicy(
            self,
            "ScaleOutPolicy",
            auto_scaling_group_name=group.auto_scaling_group_name,
            policy_type="SimpleScaling",
            adjustment_type="ChangeInCapacity",
            scaling_adjustment=1,
            cooldown=str(scaling.period_seconds),
        )
        self.returned_item_count = cloudwatch.Metric(
            namespace=DYNAMODB_NAMESPACE,
            metric_name="ReturnedItemCount",
            dimensions_map={"TableName": settings.leases_table_name, "Operation": "Scan"},
            statistic="Average",
            period=period,
        )
        self.scale_out_alarm = cloudwatch.Alarm(
            self,
            "LeasesAtTwoN",
            alarm_name=f"{prefix}-leases-at-{scaling.returned_item_count_multiplier:g}N",
            alarm_description=(
                f"Leases-table Scan ReturnedItemCount >= {scaling.returned_item_count_multiplier:g} x N "
                f"(N = {n}): the fleet is falling behind; adds one instance."
            ),
            metric=self.returned_item_count,
            threshold=thresholds.scale_out_at,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=scaling.evaluation_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.scale_out_alarm.add_alarm_action(_PolicyAction(self.scale_out_policy.attr_arn))

        # -- scale-in: leases back near N for a sustained period (the leases table holds leases only:
        # heartbeat rows live in the workers table, so the Scan count needs no correction)
        self.scale_in_policy = autoscaling.CfnScalingPolicy(
            self,
            "ScaleInPolicy",
            auto_scaling_group_name=group.auto_scaling_group_name,
            policy_type="SimpleScaling",
            adjustment_type="ChangeInCapacity",
            scaling_adjustment=-1,
            cooldown=str(scaling.period_seconds * scaling.scale_in_evaluation_periods),
        )
        leases_only = self.returned_item_count
        self.scale_in_alarm = cloudwatch.Alarm(
            self,
            "LeasesNearN",
            alarm_name=f"{prefix}-leases-near-N",
            alarm_description=(
                f"Leases <= {scaling.scale_in_multiplier:g} x N (N = {n}) for "
                f"{scaling.scale_in_evaluation_periods} periods: removes one instance, drained by the "
                "termination lifecycle hook."
            ),
            metric=leases_only,
            threshold=thresholds.scale_in_at,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=scaling.scale_in_evaluation_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.scale_in_alarm.add_alarm_action(_PolicyAction(self.scale_in_policy.attr_arn))

        # -- beyond the seed: lag, loss, capacity, dead letters, telemetry, leases-table throttling
        lag_hours = scaling.lag_alarm_millis / 3_600_000
        self.health_alarms = [
            self._insights_alarm(
                "LagNearRetention",
                f"{prefix}-lag-near-retention",
                f"MillisBehindLatest >= {lag_hours:g} h ({scaling.lag_alarm_retention_fraction:.0%} of the "
                "stream's 24 h retention): records are trimmed after 24 h.",
                _insights(settings, "MAX", "MillisBehindLatest", "ProcessTask"),
                scaling.lag_alarm_millis,
                period_seconds=LIVENESS_PERIOD_SECONDS,
            ),
            self._insights_alarm(
                "WorkersSilent",
                f"{prefix}-workers-silent",
                "No worker reported its lease-taking round for five minutes (missing data breaches): the "
                "fleet is down, crash-looping or cannot send metrics.",
                _insights(settings, "MAX", "NumWorkers", "TakeLeases"),
                1,
                period_seconds=LIVENESS_PERIOD_SECONDS,
                comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cloudwatch.TreatMissingData.BREACHING,
            ),
            self._insights_alarm(
                "RecordsLostToTrimming",
                f"{prefix}-records-lost-to-trimming",
                "Records were trimmed from the stream before they were processed: data was lost.",
                _insights(settings, "SUM", "RecordsTrimmedLost", "Fetcher"),
                1,
            ),
            self._insights_alarm(
                "CapacityShortfall",
                f"{prefix}-ready-shards-unassigned",
                "Ready shards are left unprocessed because every worker holds worker.max_leases_for_worker "
                "leases: raise it or fleet.max_size (the workers log a WARN naming how many).",
                _insights(settings, "MAX", "ReadyLeasesUnassigned", "TakeLeases"),
                1,
            ),
            self._insights_alarm(
                "LostLeases",
                f"{prefix}-leases-lost",
                "Workers lost leases at renewal (another worker took them, or renewals were too slow: "
                "throttling, long batches, clock skew); the shards were handed over mid-batch.",
                _insights(settings, "SUM", "LostLeases", "RenewAllLeases"),
                1,
            ),
            self._insights_alarm(
                "TelemetrySendFailures",
                f"{prefix}-telemetry-send-failures",
                "Workers fail to send metrics or logs to their transport (the CloudWatch agent or Logs) "
                "for two periods in a row: dashboards and alarms go blind.",
                _insights(settings, "SUM", "TelemetrySendFailures", "Telemetry"),
                1,
                period_seconds=LIVENESS_PERIOD_SECONDS,
                evaluation_periods=2,
            ),
            self._insights_alarm(
                "TelemetryDropped",
                f"{prefix}-telemetry-dropped",
                "Workers dropped metric documents or log events (queue full or send failed at shutdown).",
                _insights(settings, "SUM", "TelemetryDropped", "Telemetry"),
                1,
                period_seconds=LIVENESS_PERIOD_SECONDS,
            ),
            self._insights_alarm(
                "DeadLetters",
                f"{prefix}-dead-letters",
                "Records were sent to the dead-letter destination: inspect and replay them.",
                _insights(settings, "SUM", "RecordsSentToDeadLetter", "ProcessTask"),
                1,
            ),
            self._alarm(
                "LeasesTableThrottled",
                f"{prefix}-leases-table-throttled",
                "The leases or workers table throttles: workers lose leases. Raise its capacity.",
                cloudwatch.MathExpression(
                    expression="reads + writes + workerReads + workerWrites",
                    using_metrics={
                        "reads": self._leases_table_metric(settings.leases_table_name, "ReadThrottleEvents"),
                        "writes": self._leases_table_metric(
                            settings.leases_table_name, "WriteThrottleEvents"
                        ),
                        "workerReads": self._leases_table_metric(
                            settings.workers_table_name, "ReadThrottleEvents"
                        ),
                        "workerWrites": self._leases_table_metric(
                            settings.workers_table_name, "WriteThrottleEvents"
                        ),
                    },
                    label="leases-table throttle events",
                    period=Duration.seconds(60),
                ),
                1,
            ),
            cloudwatch.Alarm(
                self,
                "GroupAtMax",
                alarm_name=f"{prefix}-group-at-max",
                alarm_description=(
                    f"The Auto Scaling group has run {settings.fleet.max_instances} instances "
                    f"(fleet.max_instances) for {AT_MAX_PERIODS} periods: scale-out can add no more; "
                    "raise fleet.max_instances if the leases alarm stays high."
                ),
                metric=cloudwatch.Metric(
                    namespace=AUTOSCALING_NAMESPACE,
                    metric_name="GroupInServiceInstances",
                    dimensions_map={"AutoScalingGroupName": group_name},
                    statistic="Maximum",
                    period=period,
                ),
                threshold=settings.fleet.max_instances,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=AT_MAX_PERIODS,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
        ]
        for alarm in [self.scale_out_alarm, self.scale_in_alarm, *self.health_alarms]:
            if self.topic is not None:
                alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.topic))

        self.dashboard_name = prefix
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=self.dashboard_name)
        graphs: list[cloudwatch.IWidget] = [panel(spec) for spec in dashboard_widgets(settings)]
        graphs.append(
            cloudwatch.AlarmStatusWidget(
                title="Alarms",
                alarms=[self.scale_out_alarm, self.scale_in_alarm, *self.health_alarms],
                width=24,
            )
        )
        self.dashboard.add_widgets(*graphs)

    @staticmethod
    def _leases_table_metric(table: str, name: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=DYNAMODB_NAMESPACE,
            metric_name=name,
            dimensions_map={"TableName": table},
            statistic="Sum",
            period=Duration.seconds(60),
        )

    def _alarm(
        self,
        construct_id: str,
        name: str,
        description: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        *,
        evaluation_periods: int = 1,
        comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        return cloudwatch.Alarm(
            self,
            construct_id,
            alarm_name=name,
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            treat_missing_data=missing,
        )

    def _insights_alarm(
        self,
        construct_id: str,
        name: str,
        description: str,
        query: str,
        threshold: float,
        *,
        period_seconds: int = 60,
        evaluation_periods: int = 1,
        comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        expression = cloudwatch.MathExpression(
            expression=query, using_metrics={}, label=construct_id, period=Duration.seconds(period_seconds)
        )
        return self._alarm(
            construct_id,
            name,
            description,
            expression,
            threshold,
            evaluation_periods=evaluation_periods,
            comparison=comparison,
            missing=missing,
        )
