"""Find the source table's stream and check it is usable, before any lease is taken.

Each failure names its fix: a missing table, a table without a stream, a disabled stream, a stream
whose view type does not carry what the settings ask for, or a missing IAM permission. A transient
answer (a 5xx, a throttle) is not a setting: :func:`resolve_stream_patiently` waits it out with
back-off, so that a worker starting during an outage waits for it to end instead of exiting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ground.settings import TableSettings


class StreamConfigError(Exception):
    """The source table or its stream cannot be consumed as configured."""


class StreamTargetUnavailableError(Exception):
    """DynamoDB or DynamoDB Streams answered with a transient error (5xx, throttled): retry later."""


TRANSIENT_CODES = frozenset(
    {
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "ThrottlingException",
        "LimitExceededException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
    }
)


@dataclass(frozen=True)
class StreamTarget:
    table_name: str
    stream_arn: str
    view_type: str


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _transient(exc: ClientError) -> bool:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return _code(exc) in TRANSIENT_CODES or int(status) >= 500


def resolve_stream_patiently(
    dynamodb: Any,
    streams: Any,
    table: TableSettings,
    *,
    sleep: Callable[[float], None],
    warn: Callable[[str], None],
    should_stop: Callable[[], bool] = lambda: False,
    max_wait_seconds: float = 30.0,
) -> StreamTarget | None:
    """:func:`resolve_stream`, retrying transient answers with doubling waits (at most
    ``max_wait_seconds``); configuration errors still raise at once. None when a stop was asked for."""
    wait = 1.0
    while not should_stop():
        try:
            return resolve_stream(dynamodb, streams, table)
        except StreamTargetUnavailableError as exc:
            warn(f"{exc}; retrying in {wait:g} s")
            sleep(wait)
            wait = min(wait * 2, max_wait_seconds)
    return None


def _denied(action: str, resource: str, exc: ClientError) -> StreamConfigError:
    return StreamConfigError(
        f"permission denied for {action} on {resource}: grant it to the worker's role "
        f"(the CDK stack's instance role has it) — {exc}"
    )


def resolve_stream(dynamodb: Any, streams: Any, table: TableSettings) -> StreamTarget:
    arn = table.existing_stream_arn
    if arn is None:
        try:
            description = dynamodb.describe_table(TableName=table.name)["Table"]
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                raise StreamConfigError(
                    f"table {table.name} does not exist: check table.name, region and endpoint_url"
                ) from exc
            if _code(exc) in ("AccessDeniedException", "UnrecognizedClientException"):
                raise _denied("dynamodb:DescribeTable", table.name, exc) from exc
            if _transient(exc):
                raise StreamTargetUnavailableError(f"cannot describe table {table.name} yet: {exc}") from exc
            raise StreamConfigError(f"cannot describe table {table.name}: {exc}") from exc
        except BotoCoreError as exc:
            raise StreamConfigError(f"cannot reach DynamoDB to describe {table.name}: {exc}") from exc
        spec = description.get("StreamSpecification") or {}
        arn = description.get("LatestStreamArn")
        if not spec.get("StreamEnabled") or not arn:
            raise StreamConfigError(
                f"table {table.name} has no stream enabled: enable it with `aws dynamodb update-table "
                f"--table-name {table.name} --stream-specification StreamEnabled=true,"
                f"StreamViewType={table.stream_view_type}` (or deploy the CDK stack, which does)"
            )
    try:
        stream = streams.describe_stream(StreamArn=arn, Limit=1)["StreamDescription"]
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            raise StreamConfigError(
                f"stream {arn} does not exist: check table.existing_stream_arn, "
                "or re-enable the table's stream"
            ) from exc
        if _code(exc) in ("AccessDeniedException", "UnrecognizedClientException"):
            raise _denied("dynamodb:DescribeStream", arn, exc) from exc
        if _code(exc) == "ValidationException":
            raise StreamConfigError(f"{arn!r} is not a valid stream ARN: {exc}") from exc
        if _transient(exc):
            raise StreamTargetUnavailableError(f"cannot describe stream {arn} yet: {exc}") from exc
        raise StreamConfigError(f"cannot describe stream {arn}: {exc}") from exc
    except BotoCoreError as exc:
        raise StreamConfigError(f"cannot reach DynamoDB Streams to describe {arn}: {exc}") from exc
    status = stream.get("StreamStatus")
    if status not in ("ENABLED", "ENABLING"):
        raise StreamConfigError(f"stream {arn} is {status}: enable the table's stream again")
    view = str(stream.get("StreamViewType", ""))
    if view != table.stream_view_type:
        raise StreamConfigError(
            f"stream {arn} has view type {view} but table.stream_view_type is {table.stream_view_type}: "
            "the processor would not get the images it expects. Change the setting, or recreate the stream "
            "with the right view type (a stream's view type cannot be changed in place)"
        )
    return StreamTarget(table.name, arn, view)
