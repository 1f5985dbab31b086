"""Telemetry: where metrics (CloudWatch EMF, OpenTelemetry) and logs (CloudWatch Logs) go, and how
much of them.

Kept together because both name CloudWatch destinations derived from the same name prefix, and
the infra creates the log groups these settings name.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from ground.settings.base import SettingsModel

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


class MetricsSettings(SettingsModel):
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
    backend: Literal["emf", "otel", "both"] = Field(
        "emf",
        description=(
            "emf: CloudWatch EMF documents to metrics.destination; otel: OpenTelemetry metrics over "
            "OTLP/HTTP to metrics.otlp_endpoint, with KCL 3.5's names (aws.kinesis.client.*); both."
        ),
    )
    otlp_endpoint: str = Field(
        "http://127.0.0.1:4318",
        description=(
            "OTLP/HTTP endpoint of an OpenTelemetry collector (metrics go to <endpoint>/v1/metrics); "
            "on the fleet, the CloudWatch agent's OTLP receiver beside the workers."
        ),
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_endpoint(cls, endpoint: str) -> str:
        parts = urlsplit(endpoint)
        try:
            parts.port  # noqa: B018 - raises for a port that is no number or out of range
        except ValueError:
            parts = parts._replace(scheme="")
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
            raise ValueError(
                "must look like http://127.0.0.1:4318 (the collector's OTLP/HTTP address, without /v1/metrics)"
            )
        return endpoint.rstrip("/")

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


class LogsSettings(SettingsModel):
    worker_log_group: str | None = Field(
        None, description="Lease-worker log group; default /<prefix>/lease-worker."
    )
    application_log_group: str | None = Field(
        None, description="Application (processor) log group; default /<prefix>/application."
    )
    retention_days: int = Field(30, description="Retention of both log groups (a CloudWatch Logs value).")
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of the worker (`consumer run --log-level` overrides it)."
    )
    console_format: Literal["auto", "text", "json"] = Field(
        "auto",
        description=(
            "How `consumer run` writes its logs to stderr: text (one readable line each), json (one "
            "JSON object per line, for a log collector), or auto: text on a terminal, json otherwise "
            "(`--log-format` overrides it). What is shipped to CloudWatch Logs is always JSON."
        ),
    )
    ship_to_cloudwatch: bool = Field(True, description="Send logs to CloudWatch Logs (watchtower).")

    @field_validator("retention_days")
    @classmethod
    def _retention_is_allowed(cls, days: int) -> int:
        if days not in LOG_RETENTION_DAYS:
            allowed = ", ".join(map(str, LOG_RETENTION_DAYS))
            raise ValueError(f"{days} is not a CloudWatch Logs retention value ({allowed})")
        return days
