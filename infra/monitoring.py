"""The seed-003 dashboard, its 2N scale-out alarm, and the alarms beyond the seed.

The scaling alarms (infra/scaling.py has their rules and why) act on the group only: scale-out is
the seed's rule exactly (leases >= 2N for one period adds one instance), with leases read from the
leases table's Scan ReturnedItemCount whatever its pages and N as the stream has it; scale-in
removes one instance only while the fleet without it would still be fine. Neither pages anybody:
the group doing its job is not news.

The health alarms page through the alarm topic (infra/alarm_topic.py, in the data stack:
``scaling.alarm_topic_arn`` or ``scaling.alarm_topic_email``; required where
``scaling.require_alarm_topic`` and outside local and dev), and so does the group at its maximum
while leases are still at 2N. The liveness alarm watches a gauge every live worker publishes at each
lease-taking round (``NumWorkers``, whether or not records flow) and treats missing data as
breaching: silence there means no worker is running. The other alarms treat it as not breaching: lag
is only published with records (an idle stream reports nothing), and counters only when their event
happens. tests/infra follows every action to its topic, policy and key, and evaluates every alarm
over the metrics of a healthy fleet.

**Quiet at rest, on a fresh deploy and on one event; paging when it lasts.** The liveness alarm is
created only once the group is (its creation waits for the boot signals, sent once the workers took
part in a round) and needs two silent periods, so a first deploy never finds it red. What one event
does not make a problem (a lease lost to a pause, a throttled request that the retry absorbed, a
shortfall while a rollover settles, telemetry dropped at a stop, one stalled shard moved) pages
when it lasts: 3 of 5 minutes, or 2 of 3 five-minute periods. What is a problem at the first event
pages at once: records lost to trimming, records sent to the dead letter (each needs a person), lag
at a quarter of the stream's retention. docs/deploy.md states each alarm's time to page.
"""

from __future__ import annotations

import jsii
from aws_cdk import Duration
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from ground.settings import Settings
from infra.alarm_topic import alarm_name_prefix, alarm_topic_arn
from infra.kinesis_alarms import kinesis_alarms
from infra.processing_alarms import (
    STOPPED_EXPRESSION,
    STOPPED_MINUTES,
    processing_stopped,
    scaling_expression,
    stalled_shards_query,
    table_metric,
)
from infra.scaling import AT_MAX_PERIODS, scaling_rules
from infra.stream_rows import insights as _insights
from infra.stream_rows import stream_alarms, stream_row
from infra.widgets import dashboard_widgets, panel

# A five-minute period always holds some of the lease taker's gauges while one worker runs (it
# publishes them every failover_time_millis, flushed every metrics.flush_interval_seconds).
LIVENESS_PERIOD_SECONDS = 300
# What one event must not page and a lasting one must: 3 of the last 5 one-minute periods.
PERSIST_PERIODS, PERSIST_DATAPOINTS = 5, 3


@jsii.implements(cloudwatch.IAlarmAction)
class _PolicyAction:
    """Alarm action that triggers a (simple) scaling policy given by ARN."""

    def __init__(self, policy_arn: str) -> None:
        self._arn = policy_arn

    def bind(self, _scope: Construct, _alarm: cloudwatch.IAlarm) -> cloudwatch.AlarmActionConfig:
        return cloudwatch.AlarmActionConfig(alarm_action_arn=self._arn)


class Monitoring(Construct):
    """Dashboard, alarms, the scaling policies their actions trigger, and the topic that pages."""

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
        prefix = alarm_name_prefix(settings)
        rules = scaling_rules(settings, group_name)
        self.rules = rules
        # The topic lives in the data stack (infra/alarm_topic.py); here it is named by its ARN.
        arn = alarm_topic_arn(self, settings)
        self.topic: sns.ITopic | None = sns.Topic.from_topic_arn(self, "AlarmTopic", arn) if arn else None

        # -- the seed's alarm: leases >= multiplier x N adds exactly one instance
        self.scale_out_policy = self._policy("ScaleOutPolicy", group, +1, scaling.period_seconds)
        self.scale_out_alarm = self._alarm(
            "LeasesAtTwoN",
            f"{prefix}-leases-at-{scaling.returned_item_count_multiplier:g}N",
            f"Leases per open shard >= {scaling.returned_item_count_multiplier:g} (leases-table Scan "
            f"ReturnedItemCount >= {scaling.returned_item_count_multiplier:g}N, N = the open shards the "
            "sync leader lists): the fleet is falling behind; adds one instance.",
            scaling_expression(rules, rules.scale_out_expression, "leases per open shard"),
            rules.multiplier,
        )
        self.scale_out_alarm.add_alarm_action(_PolicyAction(self.scale_out_policy.attr_arn))

        # -- scale-in: one instance fewer would still be fine (infra/scaling.py), for several periods
        self.scale_in_policy = self._policy(
            "ScaleInPolicy", group, -1, scaling.period_seconds * scaling.scale_in_evaluation_periods
        )
        self.scale_in_alarm = self._alarm(
            "LeasesNearN",
            f"{prefix}-leases-near-N",
            f"For {scaling.scale_in_evaluation_periods} periods the group is above its minimum, caught up "
            f"(leases <= {scaling.scale_in_multiplier:g}N) and one instance fewer could carry the "
            f"throughput within {scaling.scale_in_max_utilization:.0%} and hold "
            f"{scaling.returned_item_count_multiplier:g}N leases: removes one "
            "instance, drained by the termination lifecycle hook.",
            scaling_expression(rules, rules.scale_in_expression, "one instance fewer would do"),
            1,
            evaluation_periods=scaling.scale_in_evaluation_periods,
        )
        self.scale_in_alarm.add_alarm_action(_PolicyAction(self.scale_in_policy.attr_arn))

        # -- beyond the seed: lag, loss, capacity, dead letters, telemetry, leases-table throttling
        lag_millis = scaling.lag_alarm_millis_over(hours := settings.source.stream_retention_hours)
        self.health_alarms = [
            self._insights_alarm(
                "LagNearRetention",
                f"{prefix}-lag-near-retention",
                f"MillisBehindLatest >= {lag_millis / 3_600_000:g} h ({scaling.lag_alarm_retention_fraction:.0%} "
                f"of the stream's {hours} h retention): records are trimmed after {hours} h.",
                _insights(settings, "MAX", "MillisBehindLatest", "ProcessTask"),
                lag_millis,
                period_seconds=LIVENESS_PERIOD_SECONDS,
            ),
            self._insights_alarm(
                "WorkersSilent",
                f"{prefix}-workers-silent",
                "No worker reported its lease-taking round for two five-minute periods in a row (missing "
                "data breaches): the fleet is down, crash-looping or cannot send metrics.",
                _insights(settings, "MAX", "NumWorkers", "TakeLeases"),
                1,
                period_seconds=LIVENESS_PERIOD_SECONDS,
                evaluation_periods=2,
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
                "Ready shards stay unprocessed after the fleet had time to join, because every worker holds "
                "worker.max_leases_for_worker leases, in 3 of 5 minutes: raise it, or fleet.max_instances "
                "(the workers log a WARN with `consumer plan`'s figures).",
                _insights(settings, "MAX", "ReadyLeasesUnassigned", "TakeLeases"),
                1,
                evaluation_periods=PERSIST_PERIODS,
                datapoints_to_alarm=PERSIST_DATAPOINTS,
            ),
            self._insights_alarm(
                "LostLeases",
                f"{prefix}-leases-lost",
                "Workers lost leases at renewal (another worker took them, or renewals were too slow: "
                "throttling, long batches, clock skew) in 3 of 5 minutes; the shards were handed over "
                "mid-batch.",
                _insights(settings, "SUM", "LostLeases", "RenewAllLeases"),
                1,
                evaluation_periods=PERSIST_PERIODS,
                datapoints_to_alarm=PERSIST_DATAPOINTS,
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
                "Workers dropped metric documents or log events (queue full, or send failed at shutdown) in "
                "2 of 3 five-minute periods: dashboards and alarms miss what they dropped.",
                _insights(settings, "SUM", "TelemetryDropped", "Telemetry"),
                1,
                period_seconds=LIVENESS_PERIOD_SECONDS,
                evaluation_periods=3,
                datapoints_to_alarm=2,
            ),
            self._insights_alarm(
                "StalledShards",
                f"{prefix}-stalled-shards",
                "A shard was found stalled (lease held, records waiting, checkpoint not moving: a "
                "processor that hangs, an iterator that stopped) and released, in 2 of 3 five-minute "
                "periods: the stall follows the shard. One contributor per shard (GROUP BY ShardId): the "
                "notification names it; the workers' ERROR line (SHARD_STALLED) has the stuck call's stack.",
                stalled_shards_query(settings),
                1,
                period_seconds=LIVENESS_PERIOD_SECONDS,
                evaluation_periods=3,
                datapoints_to_alarm=2,
            ),
            self._insights_alarm(
                "LeasesNotTaken",
                f"{prefix}-leases-not-taken",
                "Ready leases stayed free past worker.stall_timeout_millis although workers had room "
                "(LeasesNotTaken), in 3 of 5 minutes: their shards are not processed and nothing else "
                "takes them. The workers' ERROR line (LEASES_NOT_TAKEN) names them; `consumer leases` "
                "shows their parents and owners.",
                _insights(settings, "MAX", "LeasesNotTaken", "TakeLeases"),
                1,
                evaluation_periods=PERSIST_PERIODS,
                datapoints_to_alarm=PERSIST_DATAPOINTS,
            ),
            self._insights_alarm(
                "LeaseTablesFailing",
                f"{prefix}-lease-tables-failing",
                "Workers' requests to the leases or workers table failed after their retries (HTTP 5xx, "
                "timeouts, unreachable: LeaseTableErrors) in 3 of 5 minutes: rounds, heartbeats and "
                "checkpoints fail. From every host: DynamoDB is failing (see its health dashboard); from "
                "one host only: that host is cut off (its watchdog's peers replace it).",
                _insights(settings, "SUM", "LeaseTableErrors", "LeaseTable"),
                1,
                evaluation_periods=PERSIST_PERIODS,
                datapoints_to_alarm=PERSIST_DATAPOINTS,
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
                "The leases or workers table throttled requests in 3 of 5 minutes: workers fail their "
                "rounds and checkpoints, and may lose leases. Raise its capacity (or its auto scaling's "
                "maximum, scaling.lease_table_max_capacity).",
                cloudwatch.MathExpression(
                    # DynamoDB publishes a throttle metric only in minutes with throttles: an operand
                    # without data would make the sum missing (no alarm while only writes throttle).
                    expression="FILL(reads, 0) + FILL(writes, 0) + FILL(workerReads, 0) + FILL(workerWrites, 0)",
                    using_metrics={
                        "reads": table_metric(settings.leases_table_name, "ReadThrottleEvents"),
                        "writes": table_metric(settings.leases_table_name, "WriteThrottleEvents"),
                        "workerReads": table_metric(settings.workers_table_name, "ReadThrottleEvents"),
                        "workerWrites": table_metric(settings.workers_table_name, "WriteThrottleEvents"),
                    },
                    label="leases-table throttle events",
                    period=Duration.seconds(60),
                ),
                1,
                evaluation_periods=PERSIST_PERIODS,
                datapoints_to_alarm=PERSIST_DATAPOINTS,
            ),
            self._alarm(
                "GroupAtMax",
                f"{prefix}-group-at-max",
                f"The Auto Scaling group has run {settings.fleet.max_instances} instances "
                f"(fleet.max_instances) with leases still at {scaling.returned_item_count_multiplier:g}N "
                f"for {AT_MAX_PERIODS} periods: the fleet is behind and scale-out can add no more; raise "
                "fleet.max_instances (`consumer plan` sizes it).",
                scaling_expression(rules, rules.at_max_expression, "at max and behind"),
                1,
                evaluation_periods=AT_MAX_PERIODS,
            ),
            *(alarm.build(self._alarm) for alarm in kinesis_alarms(settings, prefix)),
        ]
        streams = (
            [view.table.source_table_name for view in settings.per_stream()]
            if settings.several_streams
            else []
        )
        # The fleet processing nothing while its tables are written to: once per stream.
        self.processing_alarms = [
            self._alarm(
                construct_id,
                name,
                description,
                cloudwatch.MathExpression(
                    expression=STOPPED_EXPRESSION,
                    using_metrics={"processed": processed, "writes": writes},
                    label="records written, none processed",
                    period=Duration.seconds(60),
                ),
                1,
                evaluation_periods=STOPPED_MINUTES,
            )
            for construct_id, name, description, processed, writes in processing_stopped(
                settings, prefix, streams
            )
        ]
        self.health_alarms += self.processing_alarms
        # Several streams: each stream's own lag, loss and dead-letter alarms (infra/stream_rows.py).
        self.stream_alarms = [
            self._insights_alarm(*alarm.arguments, period_seconds=alarm.period_seconds)
            for table in streams
            for alarm in stream_alarms(settings, prefix, table)
        ]
        self.health_alarms += self.stream_alarms
        # Not before the group has its boot signals: no deploy finds the liveness alarms red.
        for alarm in self.health_alarms:
            if alarm.node.id == "WorkersSilent" or alarm in self.processing_alarms:
                alarm.node.add_dependency(group)
        # Only what needs a person pages: the health alarms. The scaling alarms act on the group.
        for alarm in self.health_alarms:
            if self.topic is not None:
                alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.topic))

        # Dashboards are global to the account, not regional: the region keeps two regions' apart.
        self.dashboard_name = f"{prefix}-{settings.region}"
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=self.dashboard_name)
        graphs: list[cloudwatch.IWidget] = [panel(spec) for spec in dashboard_widgets(settings)]
        graphs.extend(stream_row(settings, table) for table in streams)
        graphs.append(
            cloudwatch.AlarmStatusWidget(
                title="Alarms",
                alarms=[self.scale_out_alarm, self.scale_in_alarm, *self.health_alarms],
                width=24,
            )
        )
        self.dashboard.add_widgets(*graphs)

    def _policy(
        self, construct_id: str, group: autoscaling.AutoScalingGroup, step: int, cooldown_seconds: int
    ) -> autoscaling.CfnScalingPolicy:
        return autoscaling.CfnScalingPolicy(
            self,
            construct_id,
            auto_scaling_group_name=group.auto_scaling_group_name,
            policy_type="SimpleScaling",
            adjustment_type="ChangeInCapacity",
            scaling_adjustment=step,
            cooldown=str(cooldown_seconds),
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
        datapoints_to_alarm: int | None = None,
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
            datapoints_to_alarm=datapoints_to_alarm,
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
        datapoints_to_alarm: int | None = None,
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
            datapoints_to_alarm=datapoints_to_alarm,
            comparison=comparison,
            missing=missing,
        )
