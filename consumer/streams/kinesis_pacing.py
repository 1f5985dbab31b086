"""When to call GetRecords again on a Kinesis shard: within the shard's two read limits, near both.

A shard serves 5 GetRecords calls per second and 2 MiB of data per second to all its readers. The
byte limit is a debt: a call that returns more than the shard earns in a second is served, and the
calls after it are refused (ProvisionedThroughputExceededException) until the shard earned it back
-- one 10 MiB answer refuses calls for about five seconds. A reader that knows this never asks too
early: after an answer of ``b`` bytes it waits ``b / 2 MiB`` seconds (and at least a fifth of a
second), so one reader per shard reads at the shard's whole rate with no refusals. A refusal all the
same (another reader of the shard, a lower limit) backs off with jitter, longer at each refusal in a
row, and the next answer clears it.

Pure: time is passed in (``now_ms``, monotonic), the caller sleeps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

READ_BYTES_PER_SECOND: Final = 2 * 1024 * 1024
CALLS_PER_SECOND: Final = 5
_MIN_GAP_MS: Final = 1000 / CALLS_PER_SECOND
_FIRST_BACKOFF_MS: Final = 250.0
_MAX_BACKOFF_MS: Final = 10_000.0


@dataclass(frozen=True, slots=True)
class ReadPace:
    """One shard's reader: when it may call next, and how many refusals in a row it has met."""

    next_call_ms: float = 0.0
    refusals: int = 0

    def wait_ms(self, now_ms: float) -> float:
        """How long to wait before the next GetRecords (0: call now)."""
        return max(0.0, self.next_call_ms - now_ms)

    def answered(
        self, now_ms: float, data_bytes: int, bytes_per_second: float = READ_BYTES_PER_SECOND
    ) -> ReadPace:
        """After an answer of ``data_bytes`` (data and partition keys, as Kinesis counts them)."""
        earned_back = data_bytes * 1000 / bytes_per_second
        return ReadPace(now_ms + max(_MIN_GAP_MS, earned_back), 0)

    def refused(self, now_ms: float, rng: random.Random) -> ReadPace:
        """After a ProvisionedThroughputExceededException: full-jitter back-off, doubling per refusal."""
        ceiling = min(_MAX_BACKOFF_MS, _FIRST_BACKOFF_MS * 2**self.refusals)
        return ReadPace(now_ms + max(_MIN_GAP_MS, rng.uniform(ceiling / 2, ceiling)), self.refusals + 1)
