"""Local tools: the DynamoDB Streams emulator (and the faults it injects) and the demo's load
generator. Neither reaches AWS; both live in config/*.yaml so a local run is described in one place.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, model_validator

from ground.settings.base import SettingsModel

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def is_loopback_endpoint(endpoint_url: str | None) -> bool:
    """True for ``http://127.0.0.1:4599`` and the like: an endpoint on this machine (the emulator)."""
    if not endpoint_url:
        return False
    return (urlsplit(endpoint_url).hostname or "") in LOOPBACK_HOSTS


class EmulatorFaults(SettingsModel):
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


class EmulatorSettings(SettingsModel):
    host: str = Field("127.0.0.1", description="Bind address (loopback only).")
    port: int = Field(4599, ge=0, le=65535, description="Port; 0 picks a free one.")
    partitions: int = Field(4, ge=1, le=256, description="Partitions K per stream-enabled table.")
    rollover_seconds: float = Field(60.0, gt=0, description="Shard rollover period (AWS: about 4 h).")
    split_every_seconds: float | None = Field(None, gt=0, description="Split a random partition this often.")
    trim_after_seconds: float = Field(360.0, gt=0, description="Records older than this are trimmed (24 h).")
    iterator_expiry_seconds: float = Field(60.0, gt=0, description="Shard iterators expire after (15 min).")
    seed: int = Field(7, description="Seed for hashing, splits and faults: runs are repeatable.")
    unknown_record_fields: bool = Field(
        False,
        description=(
            "Stream records carry fields a consumer may not know: dynamodb.ApproximateCreationDateTimePrecision "
            "(sent for tables whose timestamp precision is set) and a top-level emulatorExtension object "
            "no service sends. For tests that unknown fields pass through untouched."
        ),
    )
    faults: EmulatorFaults = Field(default_factory=EmulatorFaults)


# -------------------------------------------------------------------------------- load / pipeline


class LoadSettings(SettingsModel):
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
