"""A Kinesis shard's reader paces itself by the shard's byte debt and backs off after refusals."""

from __future__ import annotations

import random

from consumer.streams.kinesis_pacing import READ_BYTES_PER_SECOND, ReadPace


def test_an_answer_waits_for_what_it_cost_and_at_least_a_fifth_of_a_second() -> None:
    pace = ReadPace().answered(1_000, data_bytes=0)
    assert (pace.wait_ms(1_000), pace.wait_ms(1_200)) == (200, 0)
    big = ReadPace().answered(1_000, data_bytes=10 * 1024 * 1024)  # a 10 MiB answer: 5 s of the shard's rate
    assert big.wait_ms(1_000) == 5_000
    assert ReadPace().answered(0, data_bytes=READ_BYTES_PER_SECOND // 2).wait_ms(0) == 500


def test_refusals_back_off_longer_in_a_row_and_an_answer_clears_them() -> None:
    rng = random.Random(3)
    pace = ReadPace()
    waits = []
    for _ in range(8):
        pace = pace.refused(0, rng)
        waits.append(pace.wait_ms(0))
    assert pace.refusals == 8
    assert waits[0] <= 250 and 5_000 <= waits[-1] <= 10_000  # doubling, capped at 10 s
    assert all(w >= 200 for w in waits)
    assert pace.answered(0, 0).refusals == 0
