"""DynamoDB Streams adapter of :class:`~consumer.streams.source.StreamSource`, with the fast record path.

botocore still does everything it is good at — credentials, SigV4 signing, endpoints, retries with
back-off on throttling and 500s, and parsing error responses into ``ClientError`` — but not the
parsing of successful GetRecords bodies, which dominates a stock consumer's CPU.

How the body is taken away from botocore: a handler on the client's own ``before-parse`` event for
GetRecords moves a 200 response's bytes into botocore's ``customized_response_dict`` (which botocore
merges into the parsed result) and leaves ``{}`` for the parser. Error responses are left untouched,
so botocore's retry decisions and ``ClientError`` codes are exactly as on a stock client. The handler
is registered on the injected client's event system only, never globally, and acts only inside this
adapter's own GetRecords calls: other code sharing the client still gets botocore's parsing.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any

from consumer.streams.botocore_errors import translated
from consumer.streams.errors import (
    AccessDeniedError,
    ExpiredIteratorError,
    InvalidStreamRequestError,
    ShardNotFoundError,
    StreamFormatError,
    StreamGoneError,
    StreamNotFoundError,
    StreamSourceError,
    ThrottledError,
    TransientStreamError,
    TrimmedDataError,
)
from consumer.streams.pacing import PAGE_ATTEMPTS, Pacer, backoff_millis
from consumer.streams.source import GetRecordsResult, Position, Shard, StreamDescription
from consumer.streams.wire import parse_get_records
from ground.clock import Clock, SystemClock
from ground.settings.source import DYNAMODB_MAX_RECORDS

RAW_BODY_KEY = "ConsumerStreamsRawBody"
MAX_LIMIT = DYNAMODB_MAX_RECORDS  # GetRecords' Limit, as the settings check worker.max_records against it
THROTTLING_CODES = frozenset(
    {
        "LimitExceededException",
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
    }
)
DENIED_CODES = frozenset(
    {
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "ExpiredTokenException",
    }
)
TRANSIENT_CODES = frozenset(
    {"InternalServerError", "InternalFailure", "ServiceUnavailable", "ServiceUnavailableException"}
)
_STREAM_ARN = re.compile(r"^arn:aws[\w-]*:dynamodb:[\w-]+:\d{12}:table/[\w.-]{3,255}/stream/\S+$")


# Set only around this adapter's own GetRecords calls, so other code sharing the injected client
# (a stock ``get_records`` elsewhere) keeps botocore's normal parsing. botocore parses on the
# calling thread, so a ContextVar reaches the handler.
_RAW_WANTED: ContextVar[bool] = ContextVar("consumer_streams_raw_wanted", default=False)


def _keep_raw_body(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    """before-parse handler: hand a successful GetRecords body to us, an empty object to botocore."""
    body = response_dict.get("body")
    if _RAW_WANTED.get() and response_dict.get("status_code") == 200 and isinstance(body, bytes):
        customized_response_dict[RAW_BODY_KEY] = body
        response_dict["body"] = b"{}"


def _shard(item: Mapping[str, Any]) -> Shard:
    numbers = item.get("SequenceNumberRange") or {}
    return Shard(
        shard_id=str(item["ShardId"]),
        parent_shard_id=item.get("ParentShardId") or None,
        starting_sequence_number=numbers.get("StartingSequenceNumber"),
        ending_sequence_number=numbers.get("EndingSequenceNumber"),
    )


class DynamoDBStreamSource:
    """Reads one or more streams through an injected boto3 ``dynamodbstreams`` client."""

    def __init__(
        self,
        client: Any,
        clock: Clock | None = None,
        *,
        describe_pacer: Pacer | None = None,
        rng: random.Random | None = None,
        describe_client: Any = None,
    ) -> None:
        self._client = client
        # DescribeStream through its own client when given (botocore's retries off: the pacer's
        # timetable decides when a throttled page is asked again).
        self._describe_client = describe_client or client
        self._clock: Clock = clock or SystemClock()
        # DescribeStream is an account-wide budget (consumer.streams.pacing); None: unpaced.
        self._describe_pacer = describe_pacer
        self._rng = rng or random.Random()
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(
            f"before-parse.{service}.GetRecords", _keep_raw_body, unique_id="consumer-streams-raw-body"
        )

    # ------------------------------------------------------------------------------- errors

    def _errors(
        self, action: str, resource: str, *, control_plane: bool = False
    ) -> AbstractContextManager[None]:
        """Translate botocore's errors into the port's, each saying what to do about it."""
        return translated(
            action,
            resource,
            lambda code, detail, message: _translate(
                code, detail, message, action, control_plane=control_plane
            ),
        )

    # ------------------------------------------------------------------------ control plane

    def find_stream(self, table_name: str) -> str:
        arns: list[tuple[str, str]] = []
        request: dict[str, Any] = {"TableName": table_name}
        while True:
            with self._errors("dynamodb:ListStreams", f"table {table_name}", control_plane=True):
                response = self._client.list_streams(**request)
            arns.extend(
                (str(s.get("StreamLabel", "")), str(s["StreamArn"])) for s in response.get("Streams", [])
            )
            last = response.get("LastEvaluatedStreamArn")
            if not last:
                break
            request["ExclusiveStartStreamArn"] = last
        if not arns:
            raise StreamNotFoundError(
                f"table {table_name} has no stream: enable one with `aws dynamodb update-table --table-name "
                f"{table_name} --stream-specification StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES` "
                "(or deploy the CDK stack), or check table.name and the region"
            )
        return max(arns)[1]  # labels are ISO timestamps: the newest stream is the current one

    def stream_description(self, stream_arn: str) -> StreamDescription:
        if not _STREAM_ARN.match(stream_arn):
            raise StreamNotFoundError(
                f"{stream_arn!r} is not a DynamoDB stream ARN (expected "
                "arn:aws:dynamodb:<region>:<account>:table/<table>/stream/<label>): fix table.existing_stream_arn"
            )
        shards: list[Shard] = []
        request: dict[str, Any] = {"StreamArn": stream_arn, "Limit": 100}
        while True:
            description = self._describe_page(request, stream_arn, listing=True)
            shards.extend(_shard(s) for s in description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                break
            request["ExclusiveStartShardId"] = last
        return StreamDescription(
            stream_arn=str(description.get("StreamArn", stream_arn)),
            table_name=str(description.get("TableName", "")),
            status=str(description.get("StreamStatus", "")),
            view_type=str(description.get("StreamViewType", "")),
            stream_label=str(description.get("StreamLabel", "")),
            shards=tuple(shards),
        )

    def list_shards(self, stream_arn: str) -> tuple[Shard, ...]:
        return self.stream_description(stream_arn).shards

    def child_shards(self, stream_arn: str, shard_id: str) -> tuple[Shard, ...]:
        children: list[Shard] = []
        request: dict[str, Any] = {
            "StreamArn": stream_arn,
            "ShardFilter": {"Type": "CHILD_SHARDS", "ShardId": shard_id},
        }
        while True:
            description = self._describe_page(request, f"{stream_arn} (children of {shard_id})")
            children.extend(_shard(s) for s in description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                break
            request["ExclusiveStartShardId"] = last
        # The filter is a server-side courtesy; never hand back a shard that is not a child.
        return tuple(c for c in children if c.parent_shard_id == shard_id)

    def _describe_page(
        self, request: dict[str, Any], resource: str, *, listing: bool = False
    ) -> Mapping[str, Any]:
        """One DescribeStream page, paced; a throttled or failed page is asked again (with back-off)
        rather than restarting the listing (consumer.streams.pacing)."""
        for attempt in range(PAGE_ATTEMPTS):
            if self._describe_pacer is not None:
                self._describe_pacer.acquire(listing)
            try:
                with self._errors("dynamodb:DescribeStream", resource, control_plane=True):
                    description: Mapping[str, Any] = self._describe_client.describe_stream(**request)[
                        "StreamDescription"
                    ]
                return description
            except (ThrottledError, TransientStreamError):
                if attempt + 1 == PAGE_ATTEMPTS:
                    raise
                self._clock.sleep(backoff_millis(attempt, self._rng))
        raise AssertionError("unreachable")  # pragma: no cover

    # --------------------------------------------------------------------------- data plane

    def get_iterator(self, stream_arn: str, shard_id: str, position: Position) -> str:
        request: dict[str, Any] = {
            "StreamArn": stream_arn,
            "ShardId": shard_id,
            "ShardIteratorType": position.type,
        }
        if position.sequence_number is not None:
            request["SequenceNumber"] = position.sequence_number
        with self._errors("dynamodb:GetShardIterator", f"shard {shard_id} of {stream_arn}"):
            iterator = self._client.get_shard_iterator(**request).get("ShardIterator")
        if not isinstance(iterator, str):
            raise StreamFormatError(f"GetShardIterator on shard {shard_id} returned no ShardIterator")
        return iterator

    def get_records(
        self, iterator: str, limit: int, shard_id: str, *, convert_images: bool = False
    ) -> GetRecordsResult:
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"GetRecords limit must be 1..{MAX_LIMIT} (worker.max_records), got {limit}")
        token = _RAW_WANTED.set(True)
        try:
            with self._errors("dynamodb:GetRecords", f"shard {shard_id}"):
                response = self._client.get_records(ShardIterator=iterator, Limit=limit)
        finally:
            _RAW_WANTED.reset(token)
        body = response.get(RAW_BODY_KEY)
        if not isinstance(body, bytes):
            raise StreamFormatError(
                "GetRecords returned no raw body: another before-parse handler on this client "
                "consumed it, or the client is not a dynamodbstreams client"
            )
        return parse_get_records(body, shard_id, self._clock.wall_millis(), convert_images=convert_images)


def _translate(
    code: str, detail: str, message: str, action: str, *, control_plane: bool
) -> StreamSourceError:
    if code == "ExpiredIteratorException":
        return ExpiredIteratorError(f"{detail} — get a new iterator from the last delivered position")
    if code == "TrimmedDataAccessException":
        return TrimmedDataError(
            f"{detail} — records older than the stream's 24 h retention were lost before being read "
            "(worker.on_trimmed decides whether to fail or skip to TRIM_HORIZON)"
        )
    if code in THROTTLING_CODES:
        return ThrottledError(
            f"{detail} — back off; DynamoDB Streams allows 5 reads/s per shard, 10 DescribeStream/s"
        )
    if code in DENIED_CODES:
        return AccessDeniedError(
            f"{detail} — grant {action} to the worker's IAM role (the CDK stack's instance "
            "role has it), or check the credentials the worker runs with"
        )
    if code == "ResourceNotFoundException":
        if control_plane:
            return StreamNotFoundError(
                f"{detail} — no such stream or table: check table.name / table.existing_stream_arn and the region, "
                "and that the table's stream is enabled"
            )
        if "shard" in message.lower():  # the service says which resource is missing
            return ShardNotFoundError(f"{detail} — the shard is gone (trimmed after 24 h); run a shard sync")
        return StreamGoneError(f"{detail} — the stream or its table was deleted or its stream disabled")
    if code == "ValidationException":
        if control_plane:
            return StreamNotFoundError(f"{detail} — fix the stream ARN (table.existing_stream_arn)")
        return InvalidStreamRequestError(
            f"{detail} — the request was malformed; this is a bug or a bad setting"
        )
    if code in TRANSIENT_CODES or not code or (code.isdigit() and code.startswith("5")):
        return TransientStreamError(
            f"{detail} — a service-side failure outlived botocore's retries; retry later"
        )
    return StreamSourceError(f"{detail} — unexpected error from DynamoDB Streams")
