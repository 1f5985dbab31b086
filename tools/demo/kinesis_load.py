"""The Kinesis demo's seeded load: records put on a data stream with partition keys and a per-key
counter ``n`` in their data, some of them KPL-aggregated (kpl_writer.py), at a steady rate.

A put is part of what must arrive only once Kinesis acknowledged it: each user record it carried is
then appended to the oracle, as the table demo's load writes it (load.py), with ``event`` ``PUT``
and ``w`` the key's counter::

    {"key": "key-042", "event": "PUT", "w": 7}

A refused put (an injected fault, a throttle) is put again with the same counters until it is
acknowledged, so a key's counters reach the stream in order and none is skipped. The emulator refuses
a faulted put before storing it; where a put could be stored and still refused, a retry would show in
the verdict as a record the oracle does not know twice (``unexpected``), never hidden.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

from ground.settings import LoadSettings
from tools.demo.kpl_writer import aggregate

# A share AGGREGATE_SHARE of the puts are KPL aggregates of 2 to MAX_AGGREGATE user records.
AGGREGATE_SHARE = 0.3
MAX_AGGREGATE = 4
KEYS = 60  # partition keys: few enough that every key sees many records, spread over every shard


def data_of(n: int) -> bytes:
    return json.dumps({"n": n}).encode()


class KinesisLoad:
    """Puts records on ``stream`` for a while; ``writes`` counts acknowledged user records."""

    def __init__(self, client: Any, stream: str, settings: LoadSettings, oracle_path: Path) -> None:
        self._client = client
        self._stream = stream
        self._rng = random.Random(settings.seed)
        self._rate = settings.writes_per_second
        self._keys = [f"key-{i:03d}" for i in range(min(KEYS, settings.keys))]
        self._next: dict[str, int] = {}
        self._oracle_path = oracle_path
        self._stop = threading.Event()
        self.writes = 0
        self.aggregates = 0
        self.refused = 0

    def _put(self, key: str, counters: list[int]) -> None:
        datas = [data_of(n) for n in counters]
        data = datas[0] if len(datas) == 1 else aggregate(key, datas)
        while True:
            try:
                self._client.put_record(StreamName=self._stream, PartitionKey=key, Data=data)
                return
            except Exception:  # a fault or a throttle: the same record again, so no counter is skipped
                self.refused += 1
                if self._stop.wait(0.1):
                    raise

    def run(self, duration_seconds: float) -> int:
        """Put user records for ``duration_seconds`` (or until :meth:`stop`); returns how many."""
        self._oracle_path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        with self._oracle_path.open("a", encoding="utf-8") as oracle:
            while not self._stop.is_set():
                now = time.monotonic()
                if now - start >= duration_seconds:
                    break
                due = start + self.writes / self._rate
                if due > now:
                    self._stop.wait(due - now)
                    continue
                key = self._rng.choice(self._keys)
                size = self._rng.randint(2, MAX_AGGREGATE) if self._rng.random() < AGGREGATE_SHARE else 1
                first = self._next.get(key, 1)
                counters = list(range(first, first + size))
                self._put(key, counters)
                self._next[key] = first + size
                self.aggregates += size > 1
                oracle.write(
                    "".join(json.dumps({"key": key, "event": "PUT", "w": n}) + "\n" for n in counters)
                )
                oracle.flush()
                self.writes += size
        return self.writes

    def stop(self) -> None:
        self._stop.set()
