"""Pacing DescribeStream: the account's budget is about 10 calls per second, for everyone.

Every process of the fleet, every other consumer of the account's streams and every operator's
``aws dynamodbstreams describe-stream`` share that budget, and one listing of a busy table's stream
is hundreds of pages (100 shards each, and a day of closed shards stays listed). So a process sends
its DescribeStream calls through a :class:`CallPacer` (a token bucket: ``rate`` calls per second on
average, a burst of ``burst``), and a page refused for throttling is waited for and asked again with
jittered exponential back-off (:func:`backoff_millis`), never restarting the listing from its first
page (which would spend the budget again on pages already read).
"""

from __future__ import annotations

import random
import threading
from typing import Final

from ground.clock import Clock

# One process's average: the fleet's one lister (consumer.leases.decisions.sync_leader) pages at this
# rate, which leaves most of the account's ~10/s to children lookups at shard ends and to others.
DESCRIBE_STREAM_CALLS_PER_SECOND: Final = 2.0
DESCRIBE_STREAM_BURST: Final = 3
# A throttled or failed page is asked again this many times before the listing gives up (and is
# retried as a whole at the next sync).
PAGE_ATTEMPTS: Final = 6
_FIRST_BACKOFF_MILLIS: Final = 250
_MAX_BACKOFF_MILLIS: Final = 8_000


class CallPacer:
    """At most ``rate`` calls per second on average, ``burst`` at once, for every thread of a process."""

    def __init__(self, rate: float, clock: Clock, burst: int = 1) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a pacer needs a positive rate and burst (got {rate}, {burst})")
        self._interval = 1000.0 / rate
        self._burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock.monotonic_millis()

    def acquire(self) -> None:
        """Wait (on the clock) until a call may go out, and count it."""
        while True:
            with self._lock:
                now = self._clock.monotonic_millis()
                self._tokens = min(float(self._burst), self._tokens + (now - self._at) / self._interval)
                self._at = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                wait = (1 - self._tokens) * self._interval
            self._clock.sleep(wait)


def backoff_millis(attempt: int, rng: random.Random) -> float:
    """How long to wait before asking a refused page again: exponential with full jitter."""
    ceiling = min(_MAX_BACKOFF_MILLIS, _FIRST_BACKOFF_MILLIS * 2**attempt)
    return rng.uniform(ceiling / 2, ceiling)
