"""Which stream the fleet reads: the table's DynamoDB stream (the default) or a Kinesis data stream.

Without ``source:`` an environment reads the stream of its ``table:``, exactly as before. A Kinesis
data stream is named by its name or its ARN::

    source:
      kind: kinesis
      stream_name: orders-events        # or stream_arn: arn:aws:kinesis:eu-west-1:123456789012:stream/orders-events
      shard_count: 4                    # the open shards expected: N for sizing (an on-demand stream starts with 4)

The leases keep the Java KCL's Kinesis form (the shard id as the key, the checkpoint's sub-sequence
number beside it), so a KCL application's table is taken up where it stopped.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from ground.settings.base import SettingsModel

# The ARN of a Kinesis data stream (partitions aws, aws-cn, aws-us-gov, ...); the name as the API allows.
_STREAM_ARN = re.compile(r"^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{12}:stream/([A-Za-z0-9_.-]{1,128})$")
STREAM_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"


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

    @model_validator(mode="after")
    def _names_its_stream(self) -> SourceSettings:
        named = [key for key in ("stream_name", "stream_arn") if getattr(self, key) is not None]
        if self.kind == "dynamodb":
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
