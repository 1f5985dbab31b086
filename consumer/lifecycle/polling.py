"""When a shard consumer reads its shard next: adaptive polling, as a pure function.

Every GetRecords call is a billed stream read and costs the worker CPU (signing, a round trip,
parsing), empty or not, so how often an idle shard is polled decides what a fleet of idle shards
costs; how fast a shard that is behind is read decides how soon it catches up. The rules:

* a **full** batch (as many records as the read asked for: ``worker.max_records``, or the most the
  shard's stream serves a call): more is waiting — read again at once;
* a batch whose records are at least ``catch_up_behind_millis`` behind the stream's tip: **catch
  up** — read again as soon as ``min_time_between_reads_millis`` has passed since the last read
  started (KCL 3's 200 ms minimum between polls, so a shard is never hammered), never later than
  the idle time;
* any other batch with records: wait ``idle_time_between_reads_millis``;
* an **empty** answer: wait ``idle_time_between_reads_millis``, doubled for each further empty
  answer in a row, up to ``max_idle_time_between_reads_millis`` (never below the idle time). The
  first records after a quiet spell reset it.

With the defaults (1 s, doubling to 10 s) a shard that stays empty is polled every 10 s after 15 s
of silence: at about 0.35–0.75 ms of CPU per empty poll that is under 0.1 ms of CPU per second of
wall time; the price is that its first record after the silence waits up to 10 s.

A child waiting on its parent (WAITING_ON_PARENT_SHARDS) checks again every half taking interval at
first, then every ``parent_shard_poll_interval_millis`` (:func:`parent_poll_wait`).
"""

from __future__ import annotations

from ground.settings import WorkerSettings

_MAX_DOUBLINGS = 20  # 2^20 x any idle time is far past any sensible maximum


def next_read_delay(
    settings: WorkerSettings,
    *,
    records: int,
    full: bool,
    behind_millis: int,
    empty_polls: int,
    since_read_started: int,
) -> int:
    """Milliseconds from now until the next GetRecords of the shard.

    ``empty_polls``: empty answers in a row, this one included (0 when this batch had records);
    ``since_read_started``: milliseconds since the read that produced this batch was sent.
    """
    idle = settings.idle_time_between_reads_millis
    if full:
        return 0
    if records > 0:
        threshold = settings.catch_up_behind_millis
        if threshold > 0 and behind_millis >= threshold:
            return min(idle, max(0, settings.min_time_between_reads_millis - since_read_started))
        return idle
    longest = max(idle, settings.max_idle_time_between_reads_millis)
    doublings = min(max(empty_polls - 1, 0), _MAX_DOUBLINGS)
    return min(longest, idle << doublings)


# A child found waiting on its parent checks again every half taking interval this many times, then
# every parent_shard_poll_interval_millis (parent_poll_wait).
QUICK_PARENT_POLLS = 5


def parent_poll_wait(polls: int, settings: WorkerSettings) -> int:
    """How long a child waits before checking its parents again, after ``polls`` checks that found one
    unfinished. A child leased before its parent ended (a listing that ran between the parent's close
    and its end) usually waits for a parent that is just finishing: checked every half taking
    interval at first, it starts within one of the parent's end, not parent_shard_poll_interval
    (KCL's 10 s) later. A parent that is far behind would keep those checks going (a consistent read
    each), so after QUICK_PARENT_POLLS the child waits the configured interval."""
    quick = max(settings.taker_interval_millis // 2, 1)
    if polls <= QUICK_PARENT_POLLS:
        return min(quick, settings.parent_shard_poll_interval_millis)
    return settings.parent_shard_poll_interval_millis
