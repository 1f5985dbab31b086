"""Kinesis' throughput limits, per shard and per stream, as the service enforces them.

* GetRecords: ``reads_per_shard_per_second`` calls (5) per shard, and 2 MiB/s of data per shard. The
  byte limit is a *debt*: a call is served while the shard's balance is not negative, and what it
  returns is then charged in full, so one call that reads 10 MiB leaves the shard refusing calls for
  about five seconds (AWS: "subsequent calls made within the next 5 seconds throw
  ProvisionedThroughputExceededException").
* GetShardIterator: 5 calls per second per shard.
* PutRecord(s): 1 000 records and 1 MiB per second per shard; a write over either is refused
  (ProvisionedThroughputExceededException), one record at a time for PutRecords.
* ListShards: 1 000 calls per second per stream (LimitExceededException).

Every rate is read from the live fault settings at each call, so a test or the bench can lift or
tighten them while clients run. Buckets hold one second's worth (at least one call). Pure: time
comes in as ``now`` (monotonic ms); the engine holds the lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.faults import FaultSettings, RateLimits

ITERATORS_PER_SHARD_PER_SECOND = 5.0


@dataclass
class ByteDebt:
    """A per-shard read budget: refills at ``rate`` bytes/s up to one second's worth; may go negative."""

    rate: float
    balance: float
    updated_ms: int

    def refill(self, now_ms: int) -> None:
        elapsed = max(0, now_ms - self.updated_ms) / 1000
        self.balance = min(self.rate, self.balance + elapsed * self.rate)
        self.updated_ms = now_ms


class KinesisLimits:
    def __init__(self) -> None:
        self._calls = RateLimits()
        self._debts: dict[str, ByteDebt] = {}

    def get_records_allowed(self, shard_key: str, faults: FaultSettings, now_ms: int) -> str | None:
        """None when a GetRecords call on the shard may go ahead, else why not."""
        debt = self._debt(shard_key, faults, now_ms)
        if debt.balance < 0:
            return (
                f"Rate exceeded for shard {_shard(shard_key)}: read throughput of "
                f"{faults.kinesis_read_bytes_per_second:.0f} bytes/s exceeded (in debt by {-debt.balance:.0f} bytes)"
            )
        if not self._calls.allow(f"get|{shard_key}", faults.reads_per_shard_per_second, now_ms):
            return (
                f"Rate exceeded for shard {_shard(shard_key)}: more than "
                f"{faults.reads_per_shard_per_second:g} GetRecords calls per second"
            )
        return None

    def charge_read(self, shard_key: str, faults: FaultSettings, now_ms: int, size: int) -> None:
        self._debt(shard_key, faults, now_ms).balance -= size

    def iterator_allowed(self, shard_key: str, now_ms: int) -> bool:
        return self._calls.allow(f"iterator|{shard_key}", ITERATORS_PER_SHARD_PER_SECOND, now_ms)

    def write_allowed(self, shard_key: str, faults: FaultSettings, now_ms: int, size: int) -> bool:
        """One record of ``size`` bytes onto the shard, within both write limits (charged if so)."""
        records = self._calls.bucket(f"write|{shard_key}", faults.kinesis_write_records_per_second, now_ms)
        volume = self._calls.bucket(f"bytes|{shard_key}", faults.kinesis_write_bytes_per_second, now_ms)
        if records.tokens < 1 or volume.tokens < size:
            return False
        records.tokens -= 1
        volume.tokens -= size
        return True

    def list_shards_allowed(self, stream: str, faults: FaultSettings, now_ms: int) -> bool:
        return self._calls.allow(f"list|{stream}", faults.list_shards_per_second, now_ms)

    def _debt(self, shard_key: str, faults: FaultSettings, now_ms: int) -> ByteDebt:
        rate = faults.kinesis_read_bytes_per_second
        debt = self._debts.get(shard_key)
        if debt is None or debt.rate != rate:
            debt = self._debts[shard_key] = ByteDebt(rate, rate, now_ms)
        debt.refill(now_ms)
        return debt


def _shard(shard_key: str) -> str:
    return shard_key.rpartition("|")[2]
