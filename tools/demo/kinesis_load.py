"""The Kinesis demo's seeded load: records put on a data stream with partition keys and a per-key
counter ``n`` in their data, some of them KPL-aggregated (kpl_writer.py), at a steady rate.

A put is part of what must arrive only once Kinesis acknowledged it: each user record it carried is
then appended to the oracle, as the table demo's load writes it (load.py), with ``event`` ``PUT``
and ``w`` the key's counter::

    {"key": "key-042", "event": "PUT", "w": 7}

A refused put (an injected fault, a throttle, a server error) is put again with the same counters
until it is acknowledged, so a key's counters reach the stream in order and none is skipped; a put
stopped while it waits to be put again is left out of the oracle, and any other refusal (a missing
stream, a bad argument) stops the load with a :class:`~tools.demo.load.LoadError` naming the put, as
the table demo's load does. The emulator refuses
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

from botocore.exceptions import BotoCoreError, ClientError

from ground.settings import LoadSettings
from tools.demo.kpl_writer import aggregate
from tools.demo.load import REFUSED_WRITE_BACKOFF_SECONDS, LoadError, retryable

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
        self.errors: list[LoadError] = []  # why the load stopped early, for the demo to report
        self.writes = 0
        self.aggregates = 0
        self.refused = 0

    def _put(self, key: str, counters: list[int]) -> bool:
        """Put one record until Kinesis acknowledges it; False if the load was stopped first."""
        datas = [data_of(n) for n in counters]
        data = datas[0] if len(datas) == 1 else aggregate(key, datas)
        while True:
            try:
                self._client.put_record(StreamName=self._stream, PartitionKey=key, Data=data)
                return True
            except ClientError as exc:
                if not retryable(exc):
                    raise LoadError(
                        f"the stream {self._stream} refused the put of {key} (counters {counters}): {exc}"
                    ) from exc
                self.refused += 1
                if self._stop.wait(REFUSED_WRITE_BACKOFF_SECONDS):
                    return False
            except BotoCoreError as exc:  # no answer past the client's own retries (connection, timeout)
                raise LoadError(f"the put of {key} (counters {counters}) got no answer: {exc}") from exc

    def run(self, duration_seconds: float) -> int:
        """Put user records for ``duration_seconds`` (or until :meth:`stop`); returns how many.
        Raises :class:`~tools.demo.load.LoadError` when the stream refuses a put for good."""
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
                if not self._put(key, counters):
                    break
                self._next[key] = first + size
                self.aggregates += size > 1
                oracle.write(
                    "".join(json.dumps({"key": key, "event": "PUT", "w": n}) + "\n" for n in counters)
                )
                oracle.flush()
                self.writes += size
        return self.writes

    def run_reporting(self, duration_seconds: float) -> None:
        """:meth:`run` on the load's own thread: a refusal for good is kept in :attr:`errors` (the
        demo reports it once the fleet has stopped) instead of ending the thread with a traceback."""
        try:
            self.run(duration_seconds)
        except LoadError as exc:
            self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()
