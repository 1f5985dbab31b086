"""Adaptive polling: an idle shard backs off, records reset it, a shard that is behind catches up,
and no read of a shard follows the previous one sooner than the settings allow."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consumer.lifecycle.polling import next_read_delay
from ground.settings import WorkerSettings
from tests.unit.lifecycle.fakes import RecordingProcessor, record
from tests.unit.lifecycle.test_shard_consumer import Rig

DEFAULTS = WorkerSettings()


def _delay(settings: WorkerSettings = DEFAULTS, **kwargs: int | bool) -> int:
    values: dict[str, int | bool] = {
        "records": 0,
        "full": False,
        "behind_millis": 0,
        "empty_polls": 1,
        "since_read_started": 0,
    }
    values.update(kwargs)
    return next_read_delay(settings, **values)  # type: ignore[arg-type]


def test_empty_polls_in_a_row_double_from_the_idle_time_to_the_maximum() -> None:
    delays = [_delay(empty_polls=n) for n in range(1, 8)]
    assert delays == [1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]


def test_records_bring_the_idle_time_back_and_a_full_batch_reads_again_at_once() -> None:
    assert _delay(records=3, empty_polls=0) == 1000
    assert _delay(records=1000, full=True, empty_polls=0) == 0


def test_a_batch_far_behind_the_tip_is_followed_by_a_catch_up_read_no_sooner_than_the_minimum() -> None:
    assert _delay(records=40, behind_millis=60_000, empty_polls=0, since_read_started=30) == 170
    assert _delay(records=40, behind_millis=60_000, empty_polls=0, since_read_started=500) == 0
    assert _delay(records=40, behind_millis=9_999, empty_polls=0) == 1000  # below the threshold
    off = WorkerSettings(catch_up_behind_millis=0)
    assert _delay(off, records=40, behind_millis=10**9, empty_polls=0) == 1000


@given(
    idle=st.integers(0, 20_000),
    longest=st.integers(0, 60_000),
    minimum=st.integers(0, 1_000),
    records=st.integers(0, 1000),
    behind=st.integers(0, 10**8),
    empty=st.integers(0, 200),
    since=st.integers(0, 5_000),
)
def test_the_delay_stays_within_the_settings(
    idle: int, longest: int, minimum: int, records: int, behind: int, empty: int, since: int
) -> None:
    settings = WorkerSettings(
        idle_time_between_reads_millis=idle,
        max_idle_time_between_reads_millis=longest,
        min_time_between_reads_millis=minimum,
    )
    full = records == settings.max_records
    delay = _delay(
        settings,
        records=records,
        full=full,
        behind_millis=behind,
        empty_polls=0 if records else max(empty, 1),
        since_read_started=since,
    )
    assert 0 <= delay <= max(idle, longest)
    if not full:
        # no read other than after a full batch starts sooner than the minimum after the last one
        assert since + delay >= min(minimum, idle) or delay >= min(minimum, idle)
    if records == 0:
        assert delay >= idle or delay == max(idle, longest)
        longer = _delay(settings, empty_polls=max(empty, 1) + 1)
        assert longer >= delay  # never polls faster for being empty longer


def test_an_idle_shard_is_polled_about_every_ten_seconds_and_picks_up_a_record_at_its_next_poll() -> None:
    rig = Rig(WorkerSettings(max_records=100, failover_time_millis=10_000))
    rig.stream.add("s1", 100, 0, closed=False)
    rig.lease("s1")
    processor = RecordingProcessor()
    consumer = rig.consumer("s1", processor)
    start = rig.clock.monotonic_millis()
    while rig.clock.monotonic_millis() - start < 120_000:
        rig.step(consumer)
    polls_in_two_minutes = rig.stream.fetches
    # 1 + 2 + 4 + 8 s, then every 10 s: about 15 polls in 120 s (a fixed 1 s idle time would be 120)
    assert 12 <= polls_in_two_minutes <= 16
    rig.stream.shards["s1"].append(record("s1", 500))
    written = rig.clock.monotonic_millis()
    due = sent = 0
    while not processor.seen:
        sent = rig.clock.monotonic_millis()
        due = rig.step(consumer) or 0
    assert sent - written <= 10_000  # read at the next poll of the backed-off shard
    assert due - sent == 1000  # records reset the back-off: the next poll comes after the idle time
