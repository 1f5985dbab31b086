"""The AWS clients a worker uses, built once from the settings (the only place boto3 is configured).

The leases-table client gets its own timeouts (:func:`lease_client_timeouts`) because a lease write
that hangs is worse than one that fails: it must end within one failover period.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from consumer.processing.factory import ProcessingClients
from consumer.settings import Settings


def user_agent() -> str:
    """The User-Agent every client of the worker sends: this product, botocore and Python, fixed.

    Given as ``Config(user_agent=...)``, botocore sends it as it is instead of assembling its own
    from about twenty parts on every request: measured, that assembly was a third of the CPU of an
    empty GetRecords call, which an idle shard makes every few seconds for its whole life.
    """
    import platform

    import botocore

    from consumer import __version__

    return f"dynamodb-stream-consumer/{__version__} botocore/{botocore.__version__} Python/{platform.python_version()}"


def stream_client_config() -> Any:
    """The botocore Config of the DynamoDB and DynamoDB Streams clients."""
    from botocore.config import Config

    return Config(
        retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=64, user_agent=user_agent()
    )


def lease_client_timeouts(failover_time_millis: int) -> dict[str, Any]:
    """Timeouts for the leases-table client: every attempt, with its retries, ends within one failover
    period. botocore's defaults (60 s to connect, 60 s to read) would let a heartbeat hang past the
    fence and a create planned long ago land long after it was decided (consumer.lifecycle.shard_sync
    relies on this bound)."""
    seconds = failover_time_millis / 1000
    return {
        "connect_timeout": max(0.2, seconds / 10),
        "read_timeout": max(0.5, seconds / 5),
        "retries": {"max_attempts": 3, "mode": "standard"},
    }


@dataclass
class AwsClients:
    dynamodb: Any
    streams: Any
    leases: Any = None  # the leases and workers tables' client; ``dynamodb`` when None
    # DescribeStream's client: botocore's retries off, so that every call goes through the fleet's
    # timetable (consumer.streams.pacing) and a throttle is waited out there; ``streams`` when None.
    describe: Any = None

    @classmethod
    def from_settings(cls, settings: Settings) -> AwsClients:
        import boto3
        from botocore.config import Config

        config = stream_client_config()
        lease_config = Config(
            max_pool_connections=16,
            user_agent=user_agent(),
            **lease_client_timeouts(settings.worker.failover_time_millis),
        )
        session = boto3.session.Session(region_name=settings.region)
        return cls(
            dynamodb=session.client("dynamodb", endpoint_url=settings.endpoint_url, config=config),
            streams=session.client("dynamodbstreams", endpoint_url=settings.endpoint_url, config=config),
            leases=session.client("dynamodb", endpoint_url=settings.endpoint_url, config=lease_config),
            describe=session.client(
                "dynamodbstreams",
                endpoint_url=settings.endpoint_url,
                config=config.merge(Config(retries={"max_attempts": 1, "mode": "standard"})),
            ),
        )


def processing_clients(settings: Settings, clients: AwsClients) -> ProcessingClients:
    """The clients the processor's sinks and dead letters use (S3, SQS, the table's DynamoDB)."""
    import boto3

    aws = {"region_name": settings.region, "endpoint_url": settings.endpoint_url}
    return ProcessingClients(
        s3=boto3.client("s3", **aws), sqs=boto3.client("sqs", **aws), dynamodb=clients.dynamodb
    )
