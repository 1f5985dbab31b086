"""The Kinesis demo's pure parts and its processor: the KPL writer against the product's reader, the
delivery log's record of every delivery and its word on a redelivery, the verdict read from it, and
the resharder's choice of adjacent shards."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from consumer.processing import Batch, HandlerStoppedError
from consumer.records.kinesis_record import KinesisRecord
from consumer.records.kinesis_stream_record import KinesisStreamRecord
from consumer.records.kpl import deaggregate
from consumer.records.stream_record import ShardInfo
from ground.positions import ordinal
from tools.commands.demo import _report
from tools.demo.delivery_log import HIGH_WATER, DeliveryLog
from tools.demo.events import FleetEvents
from tools.demo.kinesis_run import read_deliveries
from tools.demo.kpl_writer import aggregate
from tools.demo.reshard import adjacent_pairs
from tools.demo.run import DemoOutcome
from tools.demo.verdict import Delivered, judge

SHARD = "shardId-000000000003"


def test_an_aggregate_reads_back_as_its_user_records_in_order() -> None:
    read = deaggregate(aggregate("key-007", [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}']), "key-007")
    assert read.outcome == "aggregated"
    assert [(u.partition_key, u.sub_sequence_number, u.data) for u in read.records] == [
        ("key-007", 0, b'{"n": 1}'),
        ("key-007", 1, b'{"n": 2}'),
        ("key-007", 2, b'{"n": 3}'),
    ]


def batch(*records: tuple[str, int, str, int]) -> Batch:
    return Batch(
        ShardInfo(SHARD),
        tuple(
            KinesisStreamRecord(KinesisRecord(SHARD, seq, sub, key, json.dumps({"n": n}).encode(), 1.7e9))
            for seq, sub, key, n in records
        ),
    )


def test_the_delivery_log_records_every_delivery_and_says_a_redelivery(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = batch(("100", 0, "a", 1), ("100", 1, "a", 2), ("200", 0, "b", 1))
    DeliveryLog(str(tmp_path)).handle(first)
    with caplog.at_level(logging.INFO, logger="tools.demo.delivery_log"):
        # The next owner starts again inside the aggregate (checkpoint at sub-sequence 0).
        DeliveryLog(str(tmp_path)).handle(batch(("100", 1, "a", 2), ("200", 0, "b", 1), ("300", 0, "a", 3)))
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"delivery log: 2 record(s) of shard {SHARD} delivered before"]
    delivered = read_deliveries(tmp_path)
    assert [(d.key, d.w) for d in delivered] == [("a", 1), ("a", 2), ("b", 1), ("a", 2), ("b", 1), ("a", 3)]
    verdict = judge([("a", "PUT", 1), ("a", "PUT", 2), ("a", "PUT", 3), ("b", "PUT", 1)], delivered)
    assert (verdict.lost, verdict.order_violations, verdict.duplicates, verdict.delivered) == (0, 0, 2, 4)
    # The redelivery, said in the worker's log, is judged as the changelog sink's "already landed" is.
    events = FleetEvents(fate={"worker-1": "SIGKILL"})
    events.feed(json.dumps({"message": f"worker worker-2@vm:1:ab took lease {SHARD} from worker-1@vm:9:cd",
                            "worker_id": "worker-2@vm:1:ab"}))  # fmt: skip
    events.feed(json.dumps({"message": said[0], "worker_id": "worker-2@vm:1:ab"}))
    [redelivery] = events.redeliveries
    assert redelivery.records == 2 and redelivery.explained and "SIGKILL" in redelivery.cause


def test_the_delivery_log_records_nothing_for_a_worker_whose_lease_is_gone(tmp_path: Path) -> None:
    """A worker frozen while it read a batch wakes up fenced: recording the batch then would land it
    after the next owner took the shard (the CI run of ef891aa: 7 records of a shard redelivered by
    the owner after next, blamed on the owner in between, which had stopped gracefully). Nothing is
    recorded, the mark stays where it was, and the next owner's delivery is not a redelivery."""
    fenced = batch(("100", 0, "a", 1), ("200", 0, "b", 1))
    with pytest.raises(HandlerStoppedError, match="stopping before recording 2 records"):
        DeliveryLog(str(tmp_path)).handle(replace(fenced, lease_held=lambda: False))
    assert read_deliveries(tmp_path) == []
    assert (tmp_path / HIGH_WATER / SHARD).read_text() == ""
    DeliveryLog(str(tmp_path)).handle(fenced)  # the next owner: recorded once, nothing said twice
    assert [(d.key, d.w) for d in read_deliveries(tmp_path)] == [("a", 1), ("b", 1)]


def test_a_lease_lost_while_the_mark_was_raised_puts_the_mark_back_and_records_nothing(
    tmp_path: Path,
) -> None:
    DeliveryLog(str(tmp_path)).handle(batch(("100", 0, "a", 1)))
    answers = iter([True, False])  # held at the first check, gone by the second
    with pytest.raises(HandlerStoppedError):
        DeliveryLog(str(tmp_path)).handle(
            replace(batch(("200", 0, "b", 1), ("300", 0, "a", 2)), lease_held=lambda: next(answers))
        )
    assert [(d.key, d.w) for d in read_deliveries(tmp_path)] == [("a", 1)]
    assert (tmp_path / HIGH_WATER / SHARD).read_text() == str(ordinal("100"))


def test_a_stopping_worker_that_holds_its_lease_records_the_batch_in_flight(tmp_path: Path) -> None:
    """A graceful stop: should_stop() is true, lease_held() too; the batch lands and is checkpointed."""
    DeliveryLog(str(tmp_path)).handle(replace(batch(("100", 0, "a", 1)), should_stop=lambda: True))
    assert [(d.key, d.w) for d in read_deliveries(tmp_path)] == [("a", 1)]


def test_the_verdict_sees_a_key_delivered_out_of_order_and_a_record_lost(tmp_path: Path) -> None:
    DeliveryLog(str(tmp_path)).handle(batch(("100", 0, "a", 2), ("200", 0, "a", 1)))
    verdict = judge([("a", "PUT", 1), ("a", "PUT", 2), ("a", "PUT", 3)], read_deliveries(tmp_path))
    assert (verdict.lost, verdict.order_violations) == (1, 1) and not verdict.ok


def test_a_line_being_written_is_not_read_yet(tmp_path: Path) -> None:
    DeliveryLog(str(tmp_path)).handle(batch(("100", 0, "a", 1)))
    (tmp_path / "99.jsonl").write_text('{"shard": "s", "posi')
    assert len(read_deliveries(tmp_path)) == 1


def shard(shard_id: str, low: int, high: int, closed: bool = False) -> dict[str, object]:
    sequence = {"StartingSequenceNumber": "1", **({"EndingSequenceNumber": "9"} if closed else {})}
    return {
        "ShardId": shard_id,
        "HashKeyRange": {"StartingHashKey": str(low), "EndingHashKey": str(high)},
        "SequenceNumberRange": sequence,
    }


def test_only_open_shards_whose_ranges_touch_are_merged() -> None:
    shards = [shard("s0", 0, 99, closed=True), shard("s2", 50, 99), shard("s1", 0, 49), shard("s3", 100, 199)]
    assert [(a["ShardId"], b["ShardId"]) for a, b in adjacent_pairs(shards)] == [("s1", "s2"), ("s2", "s3")]
    assert adjacent_pairs([shard("s1", 0, 49), shard("s3", 100, 199)]) == []


def test_an_unexplained_redelivery_names_who_recorded_each_copy_and_when(tmp_path: Path) -> None:
    """The report of a run whose redelivery the judge could not explain shows, for each position
    recorded twice, every recorder and when: the cause to look for when the workers' logs are gone
    (a CI run keeps only the demo's output)."""
    first = Delivered("a", "PUT", 1, SHARD, "100", "worker-4", landed_at=1_000.5)
    again = Delivered("a", "PUT", 1, SHARD, "100", "worker-6", landed_at=1_003.25)
    verdict = judge([("a", "PUT", 1)], [again, first])
    events = FleetEvents(fate={"worker-2": "SIGTERM"})
    events.feed(json.dumps({"message": f"worker worker-2@vm:1:ab released lease {SHARD} to worker-6@vm:3:ef",
                            "worker_id": "worker-2@vm:1:ab"}))  # fmt: skip
    events.feed(json.dumps({"message": f"delivery log: 1 record(s) of shard {SHARD} delivered before",
                            "worker_id": "worker-6@vm:3:ef"}))  # fmt: skip
    console = Console(record=True, width=200)
    outcome = DemoOutcome(verdict, events, (), 1_000_000, ((SHARD, verdict),), source="kinesis")
    assert not _report(console, outcome, None)
    assert "recorded twice: shard 000000000003 position 100: worker-4 at t+0.50s, worker-6 at t+3.25s" in (
        console.export_text()
    )


def test_the_copies_listed_are_those_of_the_unexplained_shard_and_none_when_all_are_explained() -> None:
    other = "shardId-000000000000"
    delivered = [
        *(
            Delivered("k", "PUT", n, other, str(n), f"worker-{w}", landed_at=1_000.0 + w)
            for n in range(12)
            for w in (1, 2)
        ),
        Delivered("a", "PUT", 1, SHARD, "100", "worker-4", landed_at=1_000.5),
        Delivered("a", "PUT", 1, SHARD, "100", "worker-6", landed_at=1_003.25),
    ]
    verdict = judge([("a", "PUT", 1), *(("k", "PUT", n) for n in range(12))], delivered)
    unexplained = FleetEvents(fate={"worker-2": "SIGTERM", "worker-1": "SIGKILL"})
    unexplained.feed(json.dumps({"message": f"worker worker-2@vm:1:ab released lease {SHARD} to worker-6@vm:3:ef",
                                 "worker_id": "worker-2@vm:1:ab"}))  # fmt: skip
    unexplained.feed(json.dumps({"message": f"delivery log: 1 record(s) of shard {SHARD} delivered before",
                                 "worker_id": "worker-6@vm:3:ef"}))  # fmt: skip
    unexplained.feed(json.dumps({"message": f"worker worker-2@vm:1:ab took lease {other} from worker-1@vm:9:cd",
                                 "worker_id": "worker-2@vm:1:ab"}))  # fmt: skip
    unexplained.feed(json.dumps({"message": f"delivery log: 12 record(s) of shard {other} delivered before",
                                 "worker_id": "worker-2@vm:1:ab"}))  # fmt: skip
    console = Console(record=True, width=200)
    assert not _report(console, DemoOutcome(verdict, unexplained, (), 1_000_000, source="kinesis"), None)
    listed = [line for line in console.export_text().splitlines() if line.startswith("recorded twice")]
    assert listed == [
        "recorded twice: shard 000000000003 position 100: worker-4 at t+0.50s, worker-6 at t+3.25s"
    ]

    explained = FleetEvents(fate={"worker-1": "SIGKILL"})
    explained.feed(json.dumps({"message": f"worker worker-2@vm:1:ab took lease {other} from worker-1@vm:9:cd",
                               "worker_id": "worker-2@vm:1:ab"}))  # fmt: skip
    explained.feed(json.dumps({"message": f"delivery log: 12 record(s) of shard {other} delivered before",
                               "worker_id": "worker-2@vm:1:ab"}))  # fmt: skip
    only_other = judge([("k", "PUT", n) for n in range(12)], delivered[:24])
    console = Console(record=True, width=200)
    assert _report(console, DemoOutcome(only_other, explained, (), 1_000_000, source="kinesis"), None)
    assert not [line for line in console.export_text().splitlines() if line.startswith("recorded twice:")]
