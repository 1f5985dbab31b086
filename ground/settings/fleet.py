"""The fleet as the infra (CDK) builds it: instances, network, scaling alarms and their topic.

``consumer plan`` reads the planning figures here too; the worker itself reads none of this.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ground.settings.base import SettingsModel

# DynamoDB Streams keeps records for 24 hours.
STREAM_RETENTION_HOURS = 24


class VpcAttributes(SettingsModel):
    """An existing VPC, given by attributes so that synth needs no look-up."""

    vpc_id: str
    availability_zones: list[str] = Field(min_length=1)
    private_subnet_ids: list[str] = Field(min_length=1)


class FleetSettings(SettingsModel):
    instance_type: str = Field("c7i.large", description="EC2 instance type of the workers.")
    min_instances: int = Field(1, ge=0, description="Auto Scaling group minimum.")
    desired_instances: int = Field(
        2,
        ge=0,
        description=(
            "Planning figure: the fleet's usual size (`consumer plan`). Not set on the Auto Scaling group, "
            "whose size the scaling alarms own between min_instances and max_instances."
        ),
    )
    max_instances: int = Field(4, ge=1, description="Auto Scaling group maximum.")
    worker_processes_per_instance: int = Field(2, ge=1, description="`consumer run` services per instance.")
    records_per_second_per_process: float = Field(
        5000.0,
        gt=0,
        description=(
            "Records one worker process handles per second (`consumer plan`; the scale-in alarm keeps "
            "the fleet large enough for its throughput by it)."
        ),
    )
    max_shards_per_process: int = Field(
        500, ge=1, description="Planning figure: shards one worker process holds comfortably."
    )
    vpc: VpcAttributes | None = Field(None, description="Existing VPC; a new one is created when empty.")
    nat_gateway_per_az: bool = Field(
        False,
        description=(
            "CDK, new VPC only: one NAT gateway in each zone (an AZ failure leaves the other zone's "
            "workers their egress) instead of one shared by both zones (cheaper; dev)."
        ),
    )
    interface_endpoints: list[Literal["dynamodb-streams", "monitoring", "logs"]] = Field(
        default_factory=list,
        description=(
            "CDK, new VPC only: interface endpoints (PrivateLink) for DynamoDB Streams, CloudWatch "
            "metrics and CloudWatch Logs, so that traffic skips the NAT gateway. Gateway endpoints for "
            "S3 and DynamoDB are always created."
        ),
    )
    lifecycle_hook_timeout_seconds: int = Field(
        120, ge=30, le=7200, description="Time a terminating instance gets to release its leases."
    )
    ami_id: str | None = Field(
        None,
        pattern=r"^ami-[0-9a-f]{8,17}$",
        description=(
            "CDK: the AMI the instances run in this environment's region, pinned per release; required "
            "(and no example id) for every environment deployed to AWS: docs/deploy.md#per-account-values."
        ),
    )

    @model_validator(mode="after")
    def _ordered(self) -> FleetSettings:
        if not self.min_instances <= self.desired_instances <= self.max_instances:
            raise ValueError(
                f"need min_instances <= desired_instances <= max_instances, got "
                f"{self.min_instances} / {self.desired_instances} / {self.max_instances}"
            )
        return self


class ScalingSettings(SettingsModel):
    returned_item_count_multiplier: float = Field(
        2.0, gt=0, description="Scale out when leases-table Scan ReturnedItemCount >= multiplier x N."
    )
    period_seconds: int = Field(300, description="Alarm period (60 or a multiple of 60).")
    evaluation_periods: int = Field(1, ge=1, description="Alarm evaluation periods.")
    scale_in_multiplier: float = Field(
        1.25, gt=0, description="Scale in when ReturnedItemCount <= this x N for scale_in_evaluation_periods."
    )
    scale_in_evaluation_periods: int = Field(
        6, ge=1, description="Periods of low lease count before scale-in."
    )
    scale_in_max_utilization: float = Field(
        0.7,
        gt=0,
        le=1,
        description=(
            "Scale in only while the fleet's records/s stay within this share of what one instance fewer "
            "plans for (fleet.records_per_second_per_process), so a fleet at the size its load needs "
            "never scales in."
        ),
    )
    lag_alarm_retention_fraction: float = Field(
        0.25,
        gt=0,
        le=0.5,
        description=(
            "Alarm when MillisBehindLatest reaches this fraction of the stream's 24 h retention "
            "(0.25: 6 h, leaving 18 h to act before records are trimmed)."
        ),
    )
    alarm_topic_email: str | None = Field(
        None, description="CDK: email subscribed to a new alarm topic (confirm the subscription once)."
    )
    alarm_topic_encrypted: bool = Field(
        False,
        description=(
            "CDK: encrypt the alarm topic the stack creates (alarm_topic_email) with a customer managed "
            "KMS key whose policy lets CloudWatch alarms use it (AWS's own SNS key does not)."
        ),
    )
    alarm_topic_arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$",
        description="CDK: an existing SNS topic every alarm notifies (e.g. the on-call pager's).",
    )
    require_alarm_topic: bool = Field(
        False,
        description=(
            "CDK: refuse to synthesize without alarm_topic_arn or alarm_topic_email, so the "
            "environment's alarms always page someone. Always on outside local and dev (prod)."
        ),
    )
    lease_table_max_capacity: int | None = Field(
        None,
        ge=1,
        description=(
            "CDK: the most a provisioned leases table auto-scales to, reads and writes, from "
            "worker.initial_lease_table_*_capacity. Default empty: what `consumer plan` figures the table "
            "needs with the group at fleet.max_instances, plus a rollover's burst of writes, at "
            "lease_table_target_utilization_percent."
        ),
    )
    lease_table_target_utilization_percent: int = Field(
        70, ge=20, le=90, description="CDK: target utilization of leases-table auto-scaling. Default 70."
    )

    @field_validator("period_seconds")
    @classmethod
    def _period(cls, seconds: int) -> int:
        if seconds < 60 or seconds % 60:
            raise ValueError("must be 60 or a multiple of 60")
        return seconds

    @property
    def lag_alarm_millis(self) -> float:
        """The lag alarm's threshold for a DynamoDB stream (24 h retention)."""
        return self.lag_alarm_millis_over(STREAM_RETENTION_HOURS)

    def lag_alarm_millis_over(self, retention_hours: int) -> float:
        """The lag alarm's threshold for a source keeping records ``retention_hours``
        (SourceSettings.stream_retention_hours): the configured fraction of it."""
        return self.lag_alarm_retention_fraction * retention_hours * 3_600_000

    @property
    def has_alarm_topic(self) -> bool:
        return bool(self.alarm_topic_arn or self.alarm_topic_email)

    @model_validator(mode="after")
    def _scale_in_below_scale_out(self) -> ScalingSettings:
        if self.scale_in_multiplier >= self.returned_item_count_multiplier:
            raise ValueError("scale_in_multiplier must be below returned_item_count_multiplier")
        return self
