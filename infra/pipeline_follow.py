"""The pipeline's continuous mode on AWS: ``follow`` kept running on the EMR Serverless application,
and an alarm on its freshness.

* **The schedule** (EventBridge Scheduler, universal target ``emrserverless:startJobRun``) starts a
  ``follow`` job every :data:`tools.emr.request.FOLLOW_SCHEDULE_MINUTES` minutes that runs that
  long and a little more, from the archives ``consumer pipeline submit follow --release`` put at
  the release keys; its request is the one submit builds
  (:func:`tools.emr.request.scheduled_follow_request`). Jobs of an hour, not one job forever:
  EMR Serverless ends a batch job at its timeout, and a job that failed is replaced within the hour
  without anyone acting. The schedule's role may start jobs on this application and pass the job
  role, nothing else.
* **The alarm**: ``LakeFreshnessSeconds`` (which ``follow`` sends after every run,
  :mod:`pipeline.freshness`) above ``pipeline.freshness_seconds`` at its maximum for three minutes
  in a row (ALARM), or missing for three minutes once it was reported (INSUFFICIENT_DATA: the
  ``follow`` that ran stopped, or commits nothing): both notify the alarm topic. A new stack stays
  in INSUFFICIENT_DATA, without a page, until the first ``follow`` reports.
"""

from __future__ import annotations

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_emrserverless as emrserverless
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from constructs import Construct

from ground.settings import Settings
from infra.errors import InfraConfigError
from tools.emr.request import FOLLOW_SCHEDULE_MINUTES, scheduled_follow_request

START_JOB_RUN_ACTION = (
    "scheduler:::aws-sdk:emrserverless:startJobRun"  # the universal target, after arn:<partition>:
)
FRESHNESS_METRIC = "LakeFreshnessSeconds"  # pipeline/freshness.py sends it (a test keeps both equal)
FRESHNESS_PERIODS = 3


class FollowOnEmr(Construct):
    """``schedule`` (starts ``follow``), its ``role``, and ``freshness_alarm``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        application: emrserverless.CfnApplication,
        job_role: iam.IRole,
        alarm_topic: sns.ITopic | None,
    ) -> None:
        super().__init__(scope, construct_id)
        work = settings.pipeline.emr_work_location
        if work is None:
            raise InfraConfigError("pipeline.emr_work_uri: give an s3://bucket/prefix for the follow jobs")
        self.role = iam.Role(
            self,
            "ScheduleRole",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"),
            description=f"{settings.application_name} {settings.env}: starts the pipeline's follow job",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["emr-serverless:StartJobRun"], resources=[application.attr_arn])
        )
        self.role.add_to_policy(iam.PolicyStatement(actions=["iam:PassRole"], resources=[job_role.role_arn]))
        start = scheduled_follow_request(
            settings,
            application_id=application.attr_application_id,
            job_role_arn=job_role.role_arn,
            work=work,
        )
        self.schedule = scheduler.CfnSchedule(
            self,
            "Schedule",
            name=f"{settings.application_name}-{settings.env}-pipeline-follow",
            description=f"starts `consumer pipeline follow` for {FOLLOW_SCHEDULE_MINUTES} minutes, every "
            f"{FOLLOW_SCHEDULE_MINUTES} minutes",
            schedule_expression=f"rate({FOLLOW_SCHEDULE_MINUTES} minutes)",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn=f"arn:{Aws.PARTITION}:{START_JOB_RUN_ACTION}",
                role_arn=self.role.role_arn,
                # The application's id and the role's ARN are tokens: the stack writes them in.
                input=Stack.of(self).to_json_string(start),
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_event_age_in_seconds=600, maximum_retry_attempts=3
                ),
            ),
        )
        metric = cloudwatch.Metric(
            namespace=settings.metrics_namespace,
            metric_name=FRESHNESS_METRIC,
            dimensions_map={"Table": settings.table.name},
            statistic="Maximum",
            period=Duration.minutes(1),
        )
        self.freshness_alarm = cloudwatch.Alarm(
            self,
            "FreshnessAlarm",
            alarm_name=f"{settings.application_name}-{settings.env}-lake-freshness",
            alarm_description=(
                f"The snapshot table is more than {settings.pipeline.freshness_seconds} s behind the "
                "change log, or `consumer pipeline follow` is not running (no datapoints): see "
                "docs/pipeline.md, Continuous mode."
            ),
            metric=metric,
            threshold=settings.pipeline.freshness_seconds,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=FRESHNESS_PERIODS,
            datapoints_to_alarm=FRESHNESS_PERIODS,
            # Missing data is INSUFFICIENT_DATA, and that state pages too: a follow that stops
            # reporting pages within three minutes, while a new stack, whose first follow runs only
            # once `submit follow --release` uploaded it, stays in the INSUFFICIENT_DATA every alarm
            # starts in (no state change, no page) instead of paging from the first deploy.
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
        )
        if alarm_topic is not None:
            self.freshness_alarm.add_alarm_action(cloudwatch_actions.SnsAction(alarm_topic))
            self.freshness_alarm.add_insufficient_data_action(cloudwatch_actions.SnsAction(alarm_topic))
