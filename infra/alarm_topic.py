"""The SNS topic the health alarms page through, and what lets CloudWatch publish to it.

An ``AWS::SNS::TopicPolicy`` *replaces* SNS's default policy: a policy holding only the "HTTPS only"
deny leaves no statement that allows anybody to publish, and CloudWatch's publish is then refused
("no resource-based policy allows the SNS:Publish action") -- every alarm changes state and nobody
hears of it. So the policy here has two statements: CloudWatch (``cloudwatch.amazonaws.com``) may
publish, only on behalf of this account's alarms named ``<app>-<env>-*`` in this region
(``aws:SourceAccount`` and ``aws:SourceArn``, against the confused deputy); and every publish without
TLS is refused (``aws:SecureTransport`` false).

With ``scaling.alarm_topic_encrypted`` the topic is encrypted with a key of its own, whose policy
lets CloudWatch use it (``kms:GenerateDataKey*`` and ``kms:Decrypt``) under the same conditions:
CloudWatch cannot publish to a topic encrypted with AWS's own SNS key, whose policy nobody can change.

``scaling.alarm_topic_arn`` names an existing topic instead; its policy is its owner's to set
(docs/deploy.md says which statement it needs).

**In the stateful stack.** The topic, its e-mail subscription and its key live in the data stack
(``<app>-<env>-data``), the one that is never replaced: in the fleet stack, a replacement would
take a new topic whose subscription nobody had confirmed (pages reaching nobody until someone did)
and leave its retained key behind. The topic has a name (``<app>-<env>-alarms``), and the fleet stack refers to it
by that name's ARN (:func:`alarm_topic_arn`), as it refers to the tables, so no export ties the two
stacks together.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from ground.settings import Settings

CLOUDWATCH = "cloudwatch.amazonaws.com"


def alarm_name_prefix(settings: Settings) -> str:
    """Every alarm of the environment is named ``<app>-<env>-...``."""
    return f"{settings.application_name}-{settings.env}"


def alarm_topic_name(settings: Settings) -> str:
    return f"{alarm_name_prefix(settings)}-alarms"


def alarm_topic_arn(scope: Construct, settings: Settings) -> str | None:
    """The topic the environment's alarms notify, as the fleet stack names it: the configured one,
    or the data stack's by its name (None: the environment pages nobody)."""
    scaling = settings.scaling
    if scaling.alarm_topic_arn:
        return scaling.alarm_topic_arn
    if not scaling.alarm_topic_email:
        return None
    return Stack.of(scope).format_arn(
        service="sns", resource=alarm_topic_name(settings), arn_format=ArnFormat.NO_RESOURCE_NAME
    )


def alarm_source_conditions(scope: Construct, settings: Settings) -> dict[str, dict[str, str]]:
    """CloudWatch acting for this account's alarms of this environment only."""
    stack = Stack.of(scope)
    alarms = stack.format_arn(
        service="cloudwatch",
        resource="alarm",
        resource_name=f"{alarm_name_prefix(settings)}-*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    return {"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": alarms}}


class AlarmTopic(Construct):
    """In the data stack: ``topic`` (None unless the stack creates one: ``scaling.alarm_topic_email``
    without ``scaling.alarm_topic_arn``) and ``key`` (when the topic is encrypted; retained where the
    environment retains its data)."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, retain: bool) -> None:
        super().__init__(scope, construct_id)
        scaling = settings.scaling
        self.topic: sns.Topic | None = None
        self.key: kms.Key | None = None
        if scaling.alarm_topic_arn or not scaling.alarm_topic_email:
            return
        conditions = alarm_source_conditions(self, settings)
        if scaling.alarm_topic_encrypted:
            self.key = kms.Key(
                self,
                "Key",
                description=f"{alarm_name_prefix(settings)} alarm topic",
                enable_key_rotation=True,
                removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
                pending_window=Duration.days(7),
            )
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="AllowCloudWatchAlarmsToUseTheKey",
                    principals=[iam.ServicePrincipal(CLOUDWATCH)],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],
                    conditions=conditions,
                )
            )
        topic = sns.Topic(
            self,
            "Topic",
            topic_name=alarm_topic_name(settings),
            display_name=f"{alarm_name_prefix(settings)} alarms",
            enforce_ssl=True,
            master_key=self.key,
        )
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions=conditions,
            )
        )
        topic.add_subscription(subscriptions.EmailSubscription(scaling.alarm_topic_email))
        self.topic = topic
