"""Where a shard is read from and how far it was processed: the checkpoint sentinels, in one place.

A checkpoint is either a sequence number (digits) or one of these words, as the Java KCL writes them
into the leases table: the lease store, shard sync, the lifecycle and the stream adapter all speak
the same words, so they are defined once, at the ground floor that every layer may import.
"""

from __future__ import annotations

from typing import Final, Literal

TRIM_HORIZON: Final = "TRIM_HORIZON"
"""The oldest record the stream still holds (24 h back)."""
LATEST: Final = "LATEST"
"""Just after the newest record: only what is written from now on."""
SHARD_END: Final = "SHARD_END"
"""The shard is closed and every record of it was processed: its children may start."""
AT_TIMESTAMP: Final = "AT_TIMESTAMP"
"""Written by KCL applications on Kinesis; DynamoDB Streams has no timestamp iterator."""

SENTINELS: Final = (AT_TIMESTAMP, TRIM_HORIZON, LATEST, SHARD_END)
InitialPosition = Literal["TRIM_HORIZON", "LATEST"]
