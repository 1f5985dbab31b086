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


def _describe_table(dynamodb: Any, name: str) -> dict[str, Any]:
    try:
        description: dict[str, Any] = dynamodb.describe_table(TableName=name)["Table"]
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            raise StreamConfigError(
                f"table {name} does not exist: check table.name, region and endpoint_url"
            ) from exc
        if _code(exc) in ("AccessDeniedException", "UnrecognizedClientException"):
            raise _denied("dynamodb:DescribeTable", name, exc) from exc
        if _transient(exc):
            raise StreamTargetUnavailableError(f"cannot describe table {name} yet: {exc}") from exc
        raise StreamConfigError(f"cannot describe table {name}: {exc}") from exc
    except BotoCoreError as exc:
        raise StreamConfigError(f"cannot reach DynamoDB to describe {name}: {exc}") from exc
    return description


def _checked_view(arn: str, view: str, table: TableSettings) -> str:
    if view != table.stream_view_type:
        raise StreamConfigError(
            f"stream {arn} has view type {view} but table.stream_view_type is {table.stream_view_type}: "
            "the processor would not get the images it expects. Change the setting, or recreate the stream "
            "with the right view type (a stream's view type cannot be changed in place)"
        )
    return view


def resolve_stream(dynamodb: Any, streams: Any, table: TableSettings) -> StreamTarget:
    """The table's stream, checked from DescribeTable alone (its LatestStreamArn and StreamSpecification).

    DescribeStream is an account-wide budget of about 10 calls per second (consumer.streams.pacing):
    a hundred workers restarting together must not each spend a call on it just to start. Only a
    configured ``existing_stream_arn`` that is not the table's latest stream is described itself.
    """
    arn = table.existing_stream_arn
    description: dict[str, Any] | None = None
    try:
        description = _describe_table(dynamodb, table.name if arn is None else table.source_table_name)
    except StreamConfigError:
        if arn is None:
            raise
    if description is not None and (arn is None or arn == description.get("LatestStreamArn")):
        spec = description.get("StreamSpecification") or {}
        latest = description.get("LatestStreamArn")
        if not spec.get("StreamEnabled") or not latest:
            raise StreamConfigError(
                f"table {table.name} has no stream enabled: enable it with `aws dynamodb update-table "
                f"--table-name {table.name} --stream-specification StreamEnabled=true,"
                f"StreamViewType={table.stream_view_type}` (or deploy the CDK stack, which does)"
            )
        view = _checked_view(str(latest), str(spec.get("StreamViewType", "")), table)
        return StreamTarget(table.name, str(latest), view)
    assert arn is not None
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
    return StreamTarget(table.name, arn, _checked_view(arn, str(stream.get("StreamViewType", "")), table))
