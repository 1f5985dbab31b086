"""The AWS clients of an environment, built in one place from its settings (the only place boto3 is
configured for the worker and for the tools that read what the fleet writes).

The leases-table client gets its own timeouts (:func:`lease_client_timeouts`) because a lease write
that hangs is worse than one that fails: it must end within one failover period. The logs client
gets short ones: a log or metrics shipper waiting a minute on CloudWatch Logs helps nobody.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from consumer.runtime.processors import ProcessingClients
from ground.settings import Settings


def user_agent() -> str:
    """The User-Agent every client of the worker sends: this product, botocore and Python, fixed.

    Given as ``Config(user_agent=...)``, botocore sends it as it is instead of assembling its own
    from about twenty parts on every request: that assembly is a large share of the CPU of an empty
    GetRecords call, which an idle shard makes every few seconds for its whole life.
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


def lease_client_timeouts(budget_millis: int) -> dict[str, Any]:
    """Timeouts for the leases-table client: every attempt, with its retries, ends within one failover
    period. botocore's defaults (60 s to connect, 60 s to read) would let a heartbeat hang past the
    fence and a create planned long ago land long after it was decided (consumer.lifecycle.shard_sync
    relies on this bound)."""
    seconds = budget_millis / 1000
    return {
        "connect_timeout": max(0.2, seconds / 10),
        "read_timeout": max(0.5, seconds / 5),
        "retries": {"max_attempts": 3, "mode": "standard"},
    }


def client_for(settings: Settings, service: str, config: Any = None, session: Any = None) -> Any:
    """A boto3 client of ``service`` for this environment: its region, and its endpoint (the
    emulator's when local). Creating one makes no call.

    Clients made from one ``session`` (a boto3 Session of the environment's region) share what
    botocore reads from its data files: the endpoints and partitions, each service's model. Without
    one, the client gets a session of its own, which reads them again. Sessions are not thread-safe:
    make a session's clients in one thread (the clients themselves are)."""
    import boto3

    if session is None:
        session = boto3.session.Session(region_name=settings.region)
    return session.client(service, endpoint_url=settings.endpoint_url, config=config)


def logs_client(settings: Settings, session: Any = None) -> Any:
    """A CloudWatch Logs client for shipping logs and metrics, and for reading them back."""
    from botocore.config import Config

    config = Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 2, "mode": "standard"})
    return client_for(settings, "logs", config, session)


@dataclass
class AwsClients:
    """Every client one worker process uses."""

    dynamodb: Any
    streams: Any
    leases: Any = None  # the leases and workers tables' client; ``dynamodb`` when None
    s3: Any = None
    sqs: Any = None
    logs: Any = None
    # DescribeStream's client: botocore's retries off, so that every call goes through the fleet's
    # timetable (consumer.streams.pacing) and a throttle is waited out there; ``streams`` when None.
    describe: Any = None
    kinesis: Any = None  # Kinesis Data Streams, for a stream whose source.kind is kinesis

    @classmethod
    def from_settings(cls, settings: Settings) -> AwsClients:
        """Every client from one session: botocore's data files are read once per process, not once
        per client (eight clients each reading them cost a worker some 0.5 CPU s and 170 000 more
        objects on its heap at every start)."""
        import boto3
        from botocore.config import Config

        session = boto3.session.Session(region_name=settings.region)
        config = stream_client_config()
        lease_config = Config(
            max_pool_connections=16,
            user_agent=user_agent(),
            **lease_client_timeouts(settings.worker.lease_call_budget_millis),
        )
        return cls(
            dynamodb=client_for(settings, "dynamodb", config, session),
            streams=client_for(settings, "dynamodbstreams", config, session),
            leases=client_for(settings, "dynamodb", lease_config, session),
            s3=client_for(settings, "s3", session=session),
            sqs=client_for(settings, "sqs", session=session),
            logs=logs_client(settings, session),
            describe=client_for(
                settings,
                "dynamodbstreams",
                config.merge(Config(retries={"max_attempts": 1, "mode": "standard"})),
                session,
            ),
            kinesis=client_for(settings, "kinesis", config, session),
        )

    def processing(self) -> ProcessingClients:
        """The clients the processor's sinks and dead letters use (S3, SQS, the table's DynamoDB)."""
        return ProcessingClients(s3=self.s3, sqs=self.sqs, dynamodb=self.dynamodb)
