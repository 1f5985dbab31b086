"""Which stream the fleet reads: the table's DynamoDB stream (the default) or a Kinesis data stream.

Without ``source:`` an environment reads the stream of its ``table:``, exactly as before. A Kinesis
data stream is named by its name or its ARN::

    source:
      kind: kinesis
      stream_name: orders-events        # or stream_arn: arn:aws:kinesis:eu-west-1:123456789012:stream/orders-events
      shard_count: 4                    # the open shards expected: N for sizing (an on-demand stream starts with 4)
      create: false                     # CDK: true creates the stream (encrypted with aws/kinesis)
      retention_hours: 24               # 24..8760: what the stream keeps (the lag alarm pages at a quarter)

The leases keep the Java KCL's Kinesis form (the shard id as the key, the checkpoint's sub-sequence
number beside it), so a KCL application's table is taken up where it stopped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from ground.settings.base import SettingsModel

# The ARN of a Kinesis data stream (partitions aws, aws-cn, aws-us-gov, ...); the name as the API allows.
_STREAM_ARN = re.compile(r"^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{12}:stream/([A-Za-z0-9_.-]{1,128})$")
# A KMS key's ARN (not an alias: IAM grants kms:Decrypt on the key itself).
KMS_KEY_ARN_PATTERN = r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]{1,128}$"
# DynamoDB Streams keeps a record 24 h; Kinesis 24 h by default and up to 365 days (8760 h).
DYNAMODB_STREAM_RETENTION_HOURS = 24
RETENTION_HOURS_RANGE = (24, 8760)
# The keys that describe a Kinesis stream only: refused (off their defaults) with kind: dynamodb,
# where they would do nothing.
_KINESIS_ONLY = ("create", "stream_mode", "retention_hours", "kms_key_arn")
STREAM_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
# The most records one GetRecords call may ask for (its Limit): DynamoDB Streams' and Kinesis'.
DYNAMODB_MAX_RECORDS = 1000
KINESIS_MAX_RECORDS = 10_000


KINESIS_WITH_STREAMS = (
    "source.kind: kinesis reads one Kinesis stream and streams: lists the streams: to serve a "
    "Kinesis stream beside tables' streams, give that entry of streams: its own source: "
    "(docs/settings.md#several-streams), and drop the top-level source:"
)


class SourceSettings(SettingsModel):
    """Which stream is read: table:'s DynamoDB stream (the default) or a Kinesis data stream."""

    kind: Literal["dynamodb", "kinesis"] = Field(
        "dynamodb",
        description=(
            "dynamodb: the stream of table: (DynamoDB Streams); kinesis: the Kinesis data stream "
            "named by source.stream_name or source.stream_arn."
        ),
    )
    stream_name: str | None = Field(
        None, pattern=STREAM_NAME_PATTERN, description="kinesis: the data stream's name (in region:)."
    )
    stream_arn: str | None = Field(
        None,
        description="kinesis: the data stream's ARN (instead of, or agreeing with, stream_name).",
    )
    shard_count: int = Field(
        4,
        ge=1,
        le=10_000,
        description=(
            "kinesis: the open shards expected, N for sizing the fleet and for the emulator's stream "
            "(an on-demand stream starts with 4)."
        ),
    )

    create: bool = Field(
        False,
        description=(
            "kinesis, CDK: create the stream (named by stream_name, or the name in stream_arn), "
            "encrypted with the AWS-managed key aws/kinesis, or kms_key_arn. By default the stack "
            "imports it and never creates, replaces or deletes it."
        ),
    )
    stream_mode: Literal["PROVISIONED", "ON_DEMAND"] = Field(
        "PROVISIONED",
        description=(
            "kinesis, created stream: PROVISIONED with shard_count shards, or ON_DEMAND (AWS sizes the "
            "shards; shard_count is then only the N expected)."
        ),
    )
    retention_hours: int = Field(
        RETENTION_HOURS_RANGE[0],
        ge=RETENTION_HOURS_RANGE[0],
        le=RETENTION_HOURS_RANGE[1],
        description=(
            "kinesis: how long the stream keeps a record, 24..8760 h: set on a created stream; for an "
            "imported one, what it has (the lag alarm pages at scaling.lag_alarm_retention_fraction of it)."
        ),
    )
    kms_key_arn: str | None = Field(
        None,
        pattern=KMS_KEY_ARN_PATTERN,
        description=(
            "kinesis: the customer-managed KMS key the stream is (or, created, will be) encrypted with; "
            "the workers get kms:Decrypt on it for this stream's records. Empty: the AWS-managed key "
            "aws/kinesis (or no encryption), which needs no grant."
        ),
    )
    peak_records_per_second: float = Field(
        100.0,
        gt=0,
        description="kinesis: expected peak records written per second (consumer plan sizes from it).",
    )
    average_record_kb: float = Field(
        1.0, gt=0, le=1024, description="kinesis: average record size in KB (a record holds at most 1 MB)."
    )
    other_consumers: int = Field(
        0,
        ge=0,
        description=(
            "kinesis: other applications polling the stream with GetRecords (not enhanced fan-out): they "
            "share each shard's 5 reads/s and 2 MB/s with this fleet (consumer plan)."
        ),
    )

    @model_validator(mode="after")
    def _names_its_stream(self) -> SourceSettings:
        named = [key for key in ("stream_name", "stream_arn") if getattr(self, key) is not None]
        if self.kind == "dynamodb":
            # Compared with the defaults, not model_fields_set: a dumped and re-validated model sets all.
            kinesis_only = [
                key for key in _KINESIS_ONLY if getattr(self, key) != type(self).model_fields[key].default
            ]
            if kinesis_only and not named:
                raise ValueError(
                    f"{', '.join(kinesis_only)} describe a Kinesis stream but kind is dynamodb: set "
                    f"kind: kinesis (with stream_name), or drop {', '.join(kinesis_only)}"
                )
            if named:
                raise ValueError(
                    f"{' and '.join(named)} name a Kinesis stream but kind is dynamodb (the stream of "
                    "table:): set kind: kinesis to read that stream, or drop "
                    f"{' and '.join(named)}"
                )
            return self
        if not named:
            raise ValueError(
                "kind: kinesis needs the stream: set stream_name (e.g. orders-events) or stream_arn "
                "(arn:aws:kinesis:<region>:<account>:stream/<name>)"
            )
        if self.stream_arn is not None:
            match = _STREAM_ARN.match(self.stream_arn)
            if match is None:
                raise ValueError(
                    f"stream_arn {self.stream_arn!r} is not a Kinesis data stream's ARN "
                    "(arn:aws:kinesis:<region>:<12-digit account>:stream/<name>)"
                )
            if self.stream_name is not None and match.group(1) != self.stream_name:
                raise ValueError(
                    f"stream_arn names stream {match.group(1)!r} but stream_name is "
                    f"{self.stream_name!r}: give one of them, or make them agree"
                )
        if self.stream_mode == "ON_DEMAND" and not self.create:
            raise ValueError(
                "stream_mode describes the stream the stack creates: set create: true, or drop stream_mode "
                "(an imported stream keeps the mode it has)"
            )
        return self

    @property
    def is_kinesis(self) -> bool:
        return self.kind == "kinesis"

    @property
    def kinesis_stream(self) -> str:
        """What DescribeStreamSummary is asked for: the ARN when given, else the name."""
        stream = self.stream_arn or self.stream_name
        if not self.is_kinesis or stream is None:
            raise ValueError("source.kind is not kinesis: there is no Kinesis stream to name")
        return stream

    @property
    def max_records_per_read(self) -> int:
        """The most records one GetRecords of this source returns: 1000 on DynamoDB Streams, 10 000 on
        Kinesis (the Java KCL's maxRecords default)."""
        return KINESIS_MAX_RECORDS if self.is_kinesis else DYNAMODB_MAX_RECORDS

    @property
    def stream_retention_hours(self) -> int:
        """How long the source keeps a record: a DynamoDB stream 24 h, a Kinesis stream retention_hours."""
        return self.retention_hours if self.is_kinesis else DYNAMODB_STREAM_RETENTION_HOURS

    @property
    def kinesis_stream_name(self) -> str:
        """The stream's name: stream_name, or the name in stream_arn."""
        if self.stream_name is not None:
            return self.stream_name
        match = _STREAM_ARN.match(self.kinesis_stream)
        assert match is not None  # stream_arn is checked by the validator
        return match.group(1)


def refuse_records_over_limits(wanted: int | None, sources: Sequence[SourceSettings], several: bool) -> None:
    """Refuse a worker.max_records (``wanted``) above what one of ``sources`` (each stream's, in the
    order of ``streams:`` when ``several``, else the one of table:) serves a GetRecords call.
    Raised as an error of worker.max_records itself, so the loader names the file or variable that
    set it."""
    over = [
        i for i, source in enumerate(sources) if wanted is not None and wanted > source.max_records_per_read
    ]
    if not over:
        return
    readers = (
        "the stream of table: is read (source.kind: dynamodb)"
        if not several
        else f"{' and '.join(f'streams.{i}' for i in over)} read{'s' if len(over) == 1 else ''} a table's stream"
    )
    problem = PydanticCustomError(
        "value_error",
        "DynamoDB Streams serves at most {most} records a GetRecords call, and {readers}: use 1..{most}, "
        "or leave it unset (each stream is then read its most: {dynamodb} a call from a table, {kinesis} "
        "from Kinesis)",
        {
            "readers": readers,
            "most": min(sources[i].max_records_per_read for i in over),
            "dynamodb": DYNAMODB_MAX_RECORDS,
            "kinesis": KINESIS_MAX_RECORDS,
        },
    )
    details = InitErrorDetails(type=problem, loc=("worker", "max_records"), input=wanted)
    raise ValidationError.from_exception_data("Settings", [details])
