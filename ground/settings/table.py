"""The source table: its keys, stream view and the capacity figures that estimate its partitions.

The infra (CDK) imports or creates the table from these keys, the emulator creates it locally, and
``consumer plan`` sizes the fleet from the expected partition count N they give.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from ground.settings.base import SettingsModel


class KeyAttribute(SettingsModel):
    name: str = Field(min_length=1, description="Attribute name.")
    type: Literal["S", "N", "B"] = Field(
        "S", description="Attribute type: S (string), N (number), B (binary)."
    )


class TableSettings(SettingsModel):
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
