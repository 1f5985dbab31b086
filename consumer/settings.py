"""Settings for every part of the product, read from ``config/base.yaml`` + ``config/<env>.yaml``.

One model serves the workers, the CDK stacks, the emulator and the Spark pipeline, so a key in
``config/*.yaml`` means one thing everywhere. Worker properties keep the Java KCL's names (in
snake_case) and its defaults, so a team moving from KCL can carry its tuning over unchanged.

Layering, lowest to highest precedence:

1. ``config/base.yaml``
2. ``config/<env>.yaml``
3. environment variables ``CONSUMER_<SECTION>__<KEY>=value`` (``__`` separates nesting levels,
   values are parsed as YAML scalars), e.g. ``CONSUMER_WORKER__FAILOVER_TIME_MILLIS=20000``.

Every error names the file (or variable) the offending value came from, the key path, what is
allowed, and the nearest valid key when a key is misspelt.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ENV_PREFIX = "CONSUMER_"
CONFIG_DIR_VARIABLE = "CONSUMER_CONFIG_DIR"
DEFAULT_CONFIG_DIR = Path("config")
ENVIRONMENTS = ("local", "dev", "prod")
# CloudWatch Logs accepts only these retention periods (PutRetentionPolicy).
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
# DynamoDB Streams keeps records for 24 hours.
STREAM_RETENTION_HOURS = 24
# Java's Integer.MAX_VALUE: KCL's "unbounded" for maxLeasesForWorker.
UNBOUNDED = 2_147_483_647


class _Model(BaseModel):
    """Strict base: unknown keys are errors (with a suggestion), models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


# --------------------------------------------------------------------------------------------- table


class KeyAttribute(_Model):
    name: str = Field(min_length=1, description="Attribute name.")
    type: Literal["S", "N", "B"] = Field(
        "S", description="Attribute type: S (string), N (number), B (binary)."
    )


class TableSettings(_Model):
    """The source table whose stream the fleet processes."""

    name: str = Field(min_length=3, max_length=255, description="Source table name.")
    partition_key: KeyAttribute = Field(description="Partition (hash) key.")
    sort_key: KeyAttribute | None = Field(None, description="Sort (range) key, if the table has one.")
    stream_view_type: Literal["NEW_AND_OLD_IMAGES", "NEW_IMAGE", "OLD_IMAGE", "KEYS_ONLY"] = Field(
        "NEW_AND_OLD_IMAGES", description="What each stream record carries."
    )
    billing_mode: Literal["PROVISIONED", "PAY_PER_REQUEST"] = Field(
        "PAY_PER_REQUEST", description="Source table billing mode."
    )
    read_capacity: int = Field(5, ge=1, description="Provisioned read capacity units (PROVISIONED only).")
    write_capacity: int = Field(5, ge=1, description="Provisioned write capacity units (PROVISIONED only).")
    peak_writes_per_second: float = Field(
        10.0, gt=0, description="Expected peak item writes/s: sizes the fleet and, on demand, estimates N."
    )
    peak_reads_per_second: float = Field(0.0, ge=0, description="Expected peak item reads/s (estimates N).")
    average_item_kb: float = Field(1.0, gt=0, le=400, description="Average item size in KB.")
    storage_gb: float = Field(1.0, ge=0, description="Table size in GB (10 GB per partition).")
    partitions: int | None = Field(
        None, ge=1, description="Expected partition count N; estimated from capacity and storage when empty."
    )
    point_in_time_recovery: bool = Field(True, description="Enable point-in-time recovery (CDK).")
    existing_table_name: str | None = Field(
        None, description="Import this existing table instead of creating one (CDK)."
    )
    existing_stream_arn: str | None = Field(
        None, description="Stream ARN of the imported table (required with existing_table_name)."
    )
    create: bool = Field(
        False,
        description=(
            "CDK: create the table `name` (opt-in). By default the stack imports the existing table "
            "(existing_table_name, else name) and never creates, replaces or deletes it."
        ),
    )

    @model_validator(mode="after")
    def _existing_table_has_stream(self) -> TableSettings:
        if self.existing_table_name and not self.existing_stream_arn:
            raise ValueError("existing_table_name needs existing_stream_arn (the table's stream ARN)")
        if self.create and self.existing_table_name:
            raise ValueError(
                "create: true and existing_table_name contradict each other: create a new table named "
                "table.name, or import the existing one (drop create)"
            )
        return self

    @property
    def source_table_name(self) -> str:
        """The table whose stream the fleet reads: the imported one, or ``name``."""
        return self.existing_table_name or self.name

    def write_units_per_second(self) -> float:
        """Write throughput in WCU/s: provisioned capacity, or peak writes x ceil(item KB)."""
        if self.billing_mode == "PROVISIONED":
            return float(self.write_capacity)
        return self.peak_writes_per_second * math.ceil(self.average_item_kb)

    def read_units_per_second(self) -> float:
        if self.billing_mode == "PROVISIONED":
            return float(self.read_capacity)
        return self.peak_reads_per_second * math.ceil(self.average_item_kb / 4)

    def expected_partitions(self) -> tuple[int, str]:
        """N and the formula it came from (a DynamoDB partition serves 3000 RCU, 1000 WCU, 10 GB)."""
        if self.partitions is not None:
            return self.partitions, "table.partitions (given)"
        by_throughput = math.ceil(self.read_units_per_second() / 3000 + self.write_units_per_second() / 1000)
        by_storage = math.ceil(self.storage_gb / 10)
        n = max(1, by_throughput, by_storage)
        return n, "max(ceil(RCU/3000 + WCU/1000), ceil(storage GB/10))"


# -------------------------------------------------------------------------------------------- worker


class WorkerSettings(_Model):
    """Lease-worker properties: KCL's names in snake_case, with KCL's defaults."""

    failover_time_millis: int = Field(
        10_000, ge=1_000, description="A lease not renewed for this long may be taken (failoverTimeMillis)."
    )
    epsilon_millis: int = Field(25, ge=0, description="Timer slack subtracted from intervals (KCL epsilon).")
    lease_renewal_interval_millis: int | None = Field(
        None, ge=100, description="How often a worker renews its liveness; default failover/3 - epsilon."
    )
    lease_taker_interval_millis: int | None = Field(
        None,
        ge=100,
        description="How often a worker scans the leases table to take, steal, balance; default failover/3.",
    )
    max_clock_skew_millis: int = Field(
        500, ge=0, description="Assumed bound on wall-clock skew between workers (NTP / Amazon Time Sync)."
    )
    shard_sync_interval_millis: int = Field(
        60_000, ge=1_000, description="Period of the shard sync that creates leases for new shards."
    )
    max_leases_for_worker: int = Field(UNBOUNDED, ge=1, description="Cap on leases one worker holds.")
    max_leases_to_steal_at_one_time: int = Field(1, ge=1, description="Leases stolen per taker run.")
    max_records: int = Field(1000, ge=1, le=1000, description="GetRecords Limit (DynamoDB Streams max 1000).")
    idle_time_between_reads_millis: int = Field(1000, ge=0, description="Pause between GetRecords polls.")
    parent_shard_poll_interval_millis: int = Field(
        10_000, ge=100, description="How often a child shard re-checks whether its parents finished."
    )
    call_process_records_even_for_empty_record_list: bool = Field(
        False, description="Call the processor on empty batches (needed for time-based flushing)."
    )
    cleanup_leases_upon_shard_completion: bool = Field(
        True, description="Delete finished leases once their children have progressed."
    )
    initial_position: Literal["TRIM_HORIZON", "LATEST"] = Field(
        "LATEST", description="Where shards open at first start begin; descendants always use TRIM_HORIZON."
    )
    lease_table_billing_mode: Literal["PROVISIONED", "PAY_PER_REQUEST"] = Field(
        "PROVISIONED", description="Leases table billing mode."
    )
    initial_lease_table_read_capacity: int = Field(10, ge=1, description="Leases table RCU (PROVISIONED).")
    initial_lease_table_write_capacity: int = Field(10, ge=1, description="Leases table WCU (PROVISIONED).")
    lease_table_name: str | None = Field(
        None, description="Leases table name; default the name prefix (see scope_names_by_env)."
    )
    worker_table_name: str | None = Field(
        None, description="Heartbeat (workers) table name; default <leases table>-workers."
    )
    task_backoff_time_millis: int = Field(500, ge=0, description="Back-off after a failed task.")
    on_trimmed: Literal["fail", "skip_to_trim_horizon"] = Field(
        "fail", description="What to do when data was trimmed before it was read (always logged as ERROR)."
    )
    max_worker_threads: int = Field(
        16, ge=1, le=512, description="Threads that fetch and process shards (not one per shard)."
    )

    @property
    def renewal_interval_millis(self) -> int:
        if self.lease_renewal_interval_millis is not None:
            return self.lease_renewal_interval_millis
        return self.failover_time_millis // 3 - self.epsilon_millis

    @property
    def taker_interval_millis(self) -> int:
        if self.lease_taker_interval_millis is not None:
            return self.lease_taker_interval_millis
        return self.failover_time_millis // 3

    @property
    def fence_margin_millis(self) -> int:
        """How long before anybody may take its leases a worker that cannot renew stops using them."""
        return max(self.failover_time_millis // 5, self.epsilon_millis)

    @property
    def fence_after_millis(self) -> int:
        """A worker whose last good heartbeat started this long ago is fenced (failover - margin)."""
        return self.failover_time_millis - self.fence_margin_millis

    @model_validator(mode="after")
    def _renewal_shorter_than_failover(self) -> WorkerSettings:
        # A heartbeat and one retry (a third of the interval later) must both fit before the fence;
        # otherwise a single throttled request, or the interval alone, fences the worker.
        renewal, fence = self.renewal_interval_millis, self.fence_after_millis
        if renewal + max(renewal // 3, 1) >= fence:
            longest = (fence * 3) // 4 - 1
            raise ValueError(
                f"lease_renewal_interval_millis ({renewal}) leaves no room for a retried heartbeat "
                f"before the worker fences itself at failover - failover/5 = {fence} ms: use at most "
                f"{longest} (failover/3 - epsilon is the usual choice) or raise failover_time_millis"
            )
        if self.max_clock_skew_millis >= self.failover_time_millis // 2:
            raise ValueError(
                f"max_clock_skew_millis ({self.max_clock_skew_millis}) must be under half of "
                f"failover_time_millis ({self.failover_time_millis})"
            )
        return self


# ---------------------------------------------------------------------------------- observability


class MetricsSettings(_Model):
    namespace: str | None = Field(
        None, description="CloudWatch namespace; default the name prefix (see scope_names_by_env)."
    )
    level: Literal["NONE", "SUMMARY", "DETAILED"] = Field("DETAILED", description="As KCL's metricsLevel.")
    shard_id_dimension: bool = Field(
        False, description="Add the ShardId dimension (one series per shard: costly on large streams)."
    )
    flush_interval_seconds: float = Field(60.0, gt=0, le=3600, description="How often metrics are flushed.")
    destination: Literal["agent", "logs", "stdout", "none"] = Field(
        "agent", description="agent: CloudWatch agent EMF listener; logs: PutLogEvents; stdout."
    )
    agent_endpoint: str = Field("tcp://127.0.0.1:25888", description="CloudWatch agent EMF endpoint.")
    log_group: str | None = Field(
        None,
        description=(
            "Log group of the EMF documents (destination logs, and agent: named in each document); "
            "default /<prefix>/metrics."
        ),
    )

    @field_validator("agent_endpoint")
    @classmethod
    def _agent_endpoint(cls, endpoint: str) -> str:
        parts = urlsplit(endpoint)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in ("tcp", "udp") or not parts.hostname or port is None:
            raise ValueError("must look like tcp://127.0.0.1:25888 or udp://127.0.0.1:25888")
        return endpoint


class LogsSettings(_Model):
    worker_log_group: str | None = Field(
        None, description="Lease-worker log group; default /<prefix>/lease-worker."
    )
    application_log_group: str | None = Field(
        None, description="Application (processor) log group; default /<prefix>/application."
    )
    retention_days: int = Field(30, description="Retention of both log groups (a CloudWatch Logs value).")
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of the worker."
    )
    ship_to_cloudwatch: bool = Field(True, description="Send logs to CloudWatch Logs (watchtower).")

    @field_validator("retention_days")
    @classmethod
    def _retention_is_allowed(cls, days: int) -> int:
        if days not in LOG_RETENTION_DAYS:
            allowed = ", ".join(map(str, LOG_RETENTION_DAYS))
            raise ValueError(f"{days} is not a CloudWatch Logs retention value ({allowed})")
        return days


# ---------------------------------------------------------------------------------------- fleet


class VpcAttributes(_Model):
    """An existing VPC, given by attributes so that synth needs no look-up."""

    vpc_id: str
    availability_zones: list[str] = Field(min_length=1)
    private_subnet_ids: list[str] = Field(min_length=1)


class FleetSettings(_Model):
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
        5000.0, gt=0, description="Planning figure: records one worker process handles per second."
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
            "CDK: the AMI the instances run in this environment's region, pinned per release. Empty: "
            "Amazon Linux 2023 looked up once by the CDK CLI and pinned in cdk.context.json."
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


class ScalingSettings(_Model):
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
            "CDK: auto-scale the provisioned leases table's read and write capacity between "
            "worker.initial_lease_table_*_capacity and this. Default empty: fixed capacity."
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
        """The lag alarm's threshold: the configured fraction of the stream's retention."""
        return self.lag_alarm_retention_fraction * STREAM_RETENTION_HOURS * 3_600_000

    @property
    def has_alarm_topic(self) -> bool:
        return bool(self.alarm_topic_arn or self.alarm_topic_email)

    @model_validator(mode="after")
    def _scale_in_below_scale_out(self) -> ScalingSettings:
        if self.scale_in_multiplier >= self.returned_item_count_multiplier:
            raise ValueError("scale_in_multiplier must be below returned_item_count_multiplier")
        return self


# ------------------------------------------------------------------------------------ processing


class RetrySettings(_Model):
    max_retry_attempts: int = Field(
        -1, ge=-1, description="-1 retries until an operator acts (never loses a record)."
    )
    max_record_age_seconds: int = Field(-1, ge=-1, description="-1: no age limit.")
    base_backoff_millis: int = Field(200, ge=1, description="First retry delay (exponential, with jitter).")
    max_backoff_millis: int = Field(30_000, ge=1, description="Longest retry delay.")
    bisect_on_error: bool = Field(True, description="Split a failing batch to isolate a poison record.")
    non_retryable_exceptions: list[str] = Field(
        default_factory=list, description="Exception classes (import paths) sent straight to the dead letter."
    )


class DeadLetterSettings(_Model):
    type: Literal["none", "local", "s3", "sqs"] = Field(
        "none", description="Where exhausted records go; none means retries never stop."
    )
    uri: str | None = Field(None, description="Directory, s3://bucket/prefix or SQS queue URL.")

    @model_validator(mode="after")
    def _needs_uri(self) -> DeadLetterSettings:
        if self.type != "none" and not self.uri:
            raise ValueError(f"dead_letter.type {self.type} needs dead_letter.uri")
        return self


class FilterSettings(_Model):
    event_names: list[Literal["INSERT", "MODIFY", "REMOVE"]] = Field(
        default_factory=list, description="Keep only these event names (empty: all)."
    )
    key_equals: dict[str, Any] = Field(
        default_factory=dict, description="Keep records whose keys equal these."
    )
    new_image_equals: dict[str, Any] = Field(
        default_factory=dict, description="Keep records whose new image has these attribute values."
    )


class BatchingSettings(_Model):
    max_records: int = Field(1000, ge=1, description="Flush a shard's buffer at this many records.")
    max_window_millis: int = Field(0, ge=0, le=300_000, description="Or after this long (0: every poll).")


class ProcessingSettings(_Model):
    processor: str = Field(
        "changelog",
        description="Built-in sink (changelog, dynamodb_replica) or a user processor 'package.module:Name'.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Options of this processor; a file or variable that changes processor starts from none."
        ),
    )
    import_paths: list[str] = Field(
        default_factory=lambda: ["."],
        description=(
            "Directories user processors are imported from, ahead of installed packages "
            "(relative ones: from the working directory)."
        ),
    )
    retry: RetrySettings = Field(default_factory=RetrySettings)
    dead_letter: DeadLetterSettings = Field(default_factory=DeadLetterSettings)
    filter: FilterSettings = Field(default_factory=FilterSettings)
    batching: BatchingSettings = Field(default_factory=BatchingSettings)


# -------------------------------------------------------------------------------------- emulator


class EmulatorFaults(_Model):
    error_rate: float = Field(0.0, ge=0, le=1, description="Share of stream calls answered with HTTP 500.")
    latency_millis: int = Field(0, ge=0, description="Latency added to every stream call.")
    reads_per_shard_per_second: float = Field(
        5.0, gt=0, description="GetRecords rate per shard above which LimitExceededException is returned."
    )
    describe_stream_per_second: float = Field(10.0, gt=0, description="DescribeStream calls/s allowed.")
    consistency_delay_millis: int = Field(
        0,
        ge=0,
        description=(
            "DescribeStream shows a closed shard as still open for this long after it closes (its "
            "children can be listed before the parent shows as closed). Default 0."
        ),
    )
    child_visibility_delay_millis: int = Field(
        0,
        ge=0,
        description=(
            "DescribeStream lists a new child shard only this long after it was created (a closed "
            "parent can be listed before its children). Default 0."
        ),
    )


class EmulatorSettings(_Model):
    host: str = Field("127.0.0.1", description="Bind address (loopback only).")
    port: int = Field(4599, ge=0, le=65535, description="Port; 0 picks a free one.")
    partitions: int = Field(4, ge=1, le=256, description="Partitions K per stream-enabled table.")
    rollover_seconds: float = Field(60.0, gt=0, description="Shard rollover period (AWS: about 4 h).")
    split_every_seconds: float | None = Field(None, gt=0, description="Split a random partition this often.")
    trim_after_seconds: float = Field(360.0, gt=0, description="Records older than this are trimmed (24 h).")
    iterator_expiry_seconds: float = Field(60.0, gt=0, description="Shard iterators expire after (15 min).")
    seed: int = Field(7, description="Seed for hashing, splits and faults: runs are repeatable.")
    faults: EmulatorFaults = Field(default_factory=EmulatorFaults)


# -------------------------------------------------------------------------------- load / pipeline


class LoadSettings(_Model):
    writes_per_second: float = Field(50.0, gt=0, description="Load generator write rate.")
    keys: int = Field(500, ge=1, description="Distinct item keys written.")
    put_ratio: float = Field(0.5, ge=0, le=1, description="Share of writes that are PutItem.")
    update_ratio: float = Field(0.35, ge=0, le=1, description="Share that are UpdateItem.")
    delete_ratio: float = Field(0.15, ge=0, le=1, description="Share that are DeleteItem.")
    seed: int = Field(42, description="Seed of the load generator.")
    duration_seconds: float = Field(60.0, gt=0, description="How long the demo writes.")

    @model_validator(mode="after")
    def _mix_sums_to_one(self) -> LoadSettings:
        total = self.put_ratio + self.update_ratio + self.delete_ratio
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"put_ratio + update_ratio + delete_ratio must be 1, got {total:g}")
        return self


class PipelineSettings(_Model):
    changelog_uri: str = Field("var/changelog", description="Where the changelog sink lands changes.")
    snapshot_uri: str = Field("var/snapshot", description="Where the Spark snapshot versions are written.")
    stats_uri: str = Field("var/stats", description="Where change statistics are written.")
    spark_master: str = Field("local[2]", description="Spark master for local runs.")
    tolerate_bad_lines: int = Field(0, ge=0, description="Malformed change-log lines tolerated per run.")
    emr_serverless: bool = Field(
        False,
        description=(
            "Create the EMR Serverless app and its job role (CDK); the URIs above must then be s3://."
        ),
    )
    emr_work_uri: str | None = Field(
        None,
        description=(
            "s3:// prefix where `consumer pipeline submit` uploads code and EMR writes job logs "
            "(default: emr/ in the bucket of changelog_uri)."
        ),
    )

    @property
    def emr_work_location(self) -> str | None:
        """Where submit's archives and the job logs go: ``emr_work_uri``, or ``emr`` beside the
        change log in its bucket (the job role may already read that bucket); None off S3."""
        if self.emr_work_uri:
            return self.emr_work_uri.rstrip("/")
        parts = urlsplit(self.changelog_uri)
        if parts.scheme != "s3" or not parts.netloc:
            return None
        return f"s3://{parts.netloc}/emr"


# ----------------------------------------------------------------------------------------- root


class Settings(_Model):
    """Everything one environment needs. ``env`` is filled in by the loader."""

    env: str = Field("local", description="Environment name (set by the loader).")
    application_name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]{3,200}$",
        description="Names the leases table, the metric namespace and the log groups.",
    )
    region: str = Field(
        "us-east-1", pattern=r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$", description="AWS region (e.g. eu-west-1)."
    )
    account: str | None = Field(
        None,
        pattern=r"^\d{12}$",
        description=(
            "AWS account (12 digits) the CDK stack deploys to; required by every environment without "
            "endpoint_url, so a deploy with another account's credentials is refused."
        ),
    )
    scope_names_by_env: bool = Field(
        False,
        description=(
            "Derive the leases and workers tables, log groups and metric namespace from "
            "<application_name>-<env>, so environments can share an account (names set explicitly win)."
        ),
    )
    endpoint_url: str | None = Field(None, description="Endpoint of the local emulator (local only).")
    table: TableSettings
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    logs: LogsSettings = Field(default_factory=LogsSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    processing: ProcessingSettings = Field(default_factory=ProcessingSettings)
    emulator: EmulatorSettings = Field(default_factory=EmulatorSettings)
    load: LoadSettings = Field(default_factory=LoadSettings)
    pipeline: PipelineSettings = Field(default_factory=PipelineSettings)

    @field_validator("account", mode="before")
    @classmethod
    def _account_as_text(cls, value: object) -> object:
        # YAML reads an unquoted account as a number (and drops its leading zeros).
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
            if len(text) != 12:
                raise ValueError(f'{value} is not 12 digits: quote the account, e.g. account: "012345678901"')
            return text
        return value

    @model_validator(mode="after")
    def _pipeline_on_emr_reads_s3(self) -> Settings:
        """EMR Serverless has no local disk that outlives a job: every pipeline location must be on
        S3, and the change log it reads must be the one the workers write."""
        pipeline = self.pipeline
        if not pipeline.emr_serverless:
            return self
        destination = self.processing.options.get("destination")
        bucket = None
        if isinstance(destination, str) and destination.startswith("s3://"):
            bucket = urlsplit(destination).netloc
        locations = {
            "changelog_uri": pipeline.changelog_uri,
            "snapshot_uri": pipeline.snapshot_uri,
            "stats_uri": pipeline.stats_uri,
        }
        if pipeline.emr_work_uri is not None:
            locations["emr_work_uri"] = pipeline.emr_work_uri
        problems = []
        for key, uri in locations.items():
            parts = urlsplit(uri)
            if parts.scheme != "s3" or not parts.netloc:
                example = f"s3://{bucket}/{key.removesuffix('_uri')}" if bucket else "s3://bucket/prefix"
                if key == "changelog_uri" and bucket:
                    example = str(destination)
                problems.append(
                    f"pipeline.{key} is {uri!r}: with pipeline.emr_serverless it must be an s3:// location "
                    f"(e.g. {example})"
                )
        if (
            isinstance(destination, str)
            and destination.startswith("s3://")
            and pipeline.changelog_uri.rstrip("/") != destination.rstrip("/")
            and not problems
        ):
            problems.append(
                f"pipeline.changelog_uri is {pipeline.changelog_uri!r} but the workers write "
                f"processing.options.destination {destination!r}: the jobs would read another place "
                f"(set pipeline.changelog_uri: {destination})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def name_prefix(self) -> str:
        """What derived names start with: the application name, plus ``-<env>`` when scoped."""
        if self.scope_names_by_env:
            return f"{self.application_name}-{self.env}"
        return self.application_name

    @property
    def leases_table_name(self) -> str:
        return self.worker.lease_table_name or self.name_prefix

    @property
    def workers_table_name(self) -> str:
        """Where heartbeats live, beside the leases table (which then holds leases only)."""
        return self.worker.worker_table_name or f"{self.leases_table_name}-workers"

    @property
    def metrics_namespace(self) -> str:
        return self.metrics.namespace or self.name_prefix

    @property
    def worker_log_group(self) -> str:
        return self.logs.worker_log_group or f"/{self.name_prefix}/lease-worker"

    @property
    def application_log_group(self) -> str:
        return self.logs.application_log_group or f"/{self.name_prefix}/application"

    @property
    def metrics_log_group(self) -> str:
        return self.metrics.log_group or f"/{self.name_prefix}/metrics"

    @property
    def total_worker_processes(self) -> int:
        return self.fleet.desired_instances * self.fleet.worker_processes_per_instance

    def warnings(self) -> list[str]:
        """Cross-field advice that does not make the configuration invalid."""
        found: list[str] = []
        n, _ = self.table.expected_partitions()
        capacity = self.worker.max_leases_for_worker * self.total_worker_processes
        if capacity < n:
            found.append(
                f"worker.max_leases_for_worker x worker processes = {capacity} < N = {n}: the fleet cannot "
                "hold every active shard and will fall behind (each of M workers must be able to hold N/M)"
            )
        if self.endpoint_url is None and self.env == "local":
            found.append("env local without endpoint_url talks to real AWS")
        return found


# ---------------------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Problem:
    source: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.path}: {self.message}"


class ConfigError(Exception):
    """A configuration that cannot be used; ``problems`` says where and why."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def config_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if explicit is not None:
        return Path(explicit)
    if environ.get(CONFIG_DIR_VARIABLE):
        return Path(environ[CONFIG_DIR_VARIABLE])
    return DEFAULT_CONFIG_DIR


def available_environments(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml") if p.stem != "base")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "document"
        raise ConfigError([Problem(str(path), where, f"not valid YAML: {exc}")]) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([Problem(str(path), "(top level)", "must be a mapping of settings")])
    return data


def _merge(
    target: dict[str, Any], overlay: Mapping[str, Any], source: str, origins: dict[str, str], prefix: str = ""
) -> None:
    """Deep-merge ``overlay`` into ``target``, recording which source set each leaf.

    An empty mapping replaces what was there: it is the only way to say "none of these" (for
    example ``CONSUMER_PROCESSING__OPTIONS='{}'``), and merging nothing into something would
    silently keep the lower layer's keys.
    """
    for key, value in overlay.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and not value:
            target[key] = {}
            for stale in [leaf for leaf in origins if leaf.startswith(f"{path}.")]:
                del origins[stale]
            origins[path] = source
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value, source, origins, f"{path}.")
        else:
            target[key] = dict(value) if isinstance(value, Mapping) else value
            origins[path] = source
            if isinstance(value, Mapping):
                for leaf in _leaf_paths(value, f"{path}."):
                    origins[leaf] = source


def _leaf_paths(mapping: Mapping[str, Any], prefix: str) -> Iterator[str]:
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            yield from _leaf_paths(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def _environment_overrides(environ: Mapping[str, str]) -> list[tuple[str, dict[str, Any]]]:
    overrides: list[tuple[str, dict[str, Any]]] = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name == CONFIG_DIR_VARIABLE:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if not parts:
            continue
        value: Any = yaml.safe_load(environ[name]) if environ[name] else ""
        nested: dict[str, Any] = {parts[-1]: value}
        for part in reversed(parts[:-1]):
            nested = {part: nested}
        overrides.append((f"environment variable {name}", nested))
    return overrides


def _forget_options_of_another_processor(
    merged: dict[str, Any], overlay: Mapping[str, Any], origins: dict[str, str]
) -> str | None:
    """Options belong to the processor they were written for.

    When ``overlay`` names a different ``processing.processor`` than the layers below it, the
    options those layers gave (for the processor they named) are dropped before ``overlay`` is
    merged, so ``CONSUMER_PROCESSING__PROCESSOR=mine:handle`` over ``config/local.yaml`` does not
    hand ``mine:handle`` the changelog sink's ``destination``. Returns the processor whose options
    were dropped, if any, so the caller can say so.
    """
    processing = overlay.get("processing")
    below = merged.get("processing")
    if not isinstance(processing, Mapping) or not isinstance(below, dict):
        return None
    if "processor" not in processing or processing["processor"] == below.get("processor"):
        return None
    if not below.get("options"):
        return None
    below.pop("options")
    for stale in [leaf for leaf in origins if leaf.startswith("processing.options")]:
        del origins[stale]
    return str(below.get("processor", "changelog"))


def _model_at(path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the key at ``path`` (for suggesting the nearest key)."""
    model: type[BaseModel] = Settings
    for part in path[:-1]:
        if not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nested is None:
            return None
        model = nested
    return model


def _describe(error: Mapping[str, Any]) -> tuple[str, str]:
    loc: tuple[str | int, ...] = tuple(error["loc"])
    # Validators that run on a whole model add no key of their own; drop pydantic's helper segments.
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith(("function-", "literal["))))
    path = ".".join(str(p) for p in loc) or "(top level)"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        model = _model_at(loc)
        allowed = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        message = f"unknown key{hint} (allowed here: {', '.join(allowed)})"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif "input" in error and error["type"] not in ("model_type",) and loc:
        # (A whole-file check's input is the whole configuration: its message names the keys.)
        message = f"{message} (got {error['input']!r})"
    return path, message


def _source_of(path: str, origins: Mapping[str, str], ranks: Mapping[str, int], fallback: str) -> str:
    """The file or variable that set ``path``; for a whole-section check, the highest-precedence
    source that set anything inside that section (that is the edit that broke it)."""
    below = [src for key, src in origins.items() if key.startswith(f"{path}.")]
    if below:
        return max(below, key=lambda src: ranks.get(src, -1))
    probe = path
    while probe:
        if probe in origins:
            return origins[probe]
        probe = probe.rpartition(".")[0]
    return fallback


def load_settings(
    env: str,
    directory: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Load ``base.yaml`` + ``<env>.yaml`` + environment overrides, or raise :class:`ConfigError`."""
    environ = os.environ if environ is None else environ
    folder = config_dir(directory, environ)
    env_file = folder / f"{env}.yaml"
    if not env_file.is_file():
        known = available_environments(folder) if folder.is_dir() else []
        close = difflib.get_close_matches(env, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        listing = ", ".join(known) or "none"
        raise ConfigError(
            [Problem(str(env_file), "(file)", f"no such environment file{hint} (environments: {listing})")]
        )
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    layers: list[tuple[str, Mapping[str, Any]]] = []
    base = folder / "base.yaml"
    if base.is_file():
        layers.append((str(base), _read_yaml(base)))
    layers.append((str(env_file), _read_yaml(env_file)))
    files = len(layers)
    layers.extend(_environment_overrides(environ))
    for source, overlay in layers[:files]:
        _forget_options_of_another_processor(merged, overlay, origins)
        _merge(merged, overlay, source, origins)
    # The variables are one layer as far as options go: CONSUMER_PROCESSING__OPTIONS__X sorts before
    # CONSUMER_PROCESSING__PROCESSOR, and must still count as an option of the processor it names.
    variables: dict[str, Any] = {}
    for _, overlay in layers[files:]:
        _merge(variables, overlay, "", {})
    _forget_options_of_another_processor(merged, variables, origins)
    for source, overlay in layers[files:]:
        _merge(merged, overlay, source, origins)
    merged["env"] = env
    ranks = {source: rank for rank, (source, _) in enumerate(layers)}
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            path, message = _describe(error)
            problems.append(Problem(_source_of(path, origins, ranks, str(env_file)), path, message))
        raise ConfigError(problems) from None


def loaded_sources(
    env: str, directory: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> list[str]:
    """The files and variables :func:`load_settings` reads for ``env``, lowest precedence first
    (what a command prints first, so nobody has to guess which configuration it used)."""
    environ = os.environ if environ is None else environ
    folder = config_dir(directory, environ)
    sources = [str(folder / "base.yaml")] if (folder / "base.yaml").is_file() else []
    sources.append(str(folder / f"{env}.yaml"))
    sources.extend(
        name for name in sorted(environ) if name.startswith(ENV_PREFIX) and name != CONFIG_DIR_VARIABLE
    )
    return sources


def json_schema() -> dict[str, Any]:
    """JSON schema of config/*.yaml, for editor completion (every key optional in env files)."""
    return Settings.model_json_schema()
