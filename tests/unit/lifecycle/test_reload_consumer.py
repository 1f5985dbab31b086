"""worker.on_trimmed=reload through the shard consumer (the driver): a fake table, a fake stream
whose data after the lease's checkpoint was trimmed, and processors of both forms."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from consumer.leases.model import ExtendedSequenceNumber
from consumer.lifecycle.ports import ScanPageResult
from consumer.lifecycle.reload_pacing import ReloadBudget
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.states import ShutdownReason
from consumer.processing.api import Batch, GapInput, ProcessRecordsInput
from consumer.processing.factory import function_processor
from consumer.records import ShardInfo
from consumer.streams.errors import TrimmedDataError
from ground.clock import Clock
from ground.settings import WorkerSettings
from tests.unit.lifecycle.fakes import RecordingProcessor
from tests.unit.lifecycle.test_shard_consumer import Rig

SETTINGS = WorkerSettings(
    max_records=100,
    idle_time_between_reads_millis=200,
    failover_time_millis=10_000,
    on_trimmed="reload",
    reload_read_share=0.5,
    reload_scan_segments=3,
    reload_page_items=4,
)
BEFORE_GAP = "000000000000000000050"


@dataclass
class FakeTable:
    """A provisioned table of ``count`` items, a unit per item read; remembers when it was read."""

    clock: Clock
    count: int = 25
    read_units: int = 20
    region: str | None = "eu-west-1"
    reads: list[tuple[int, float]] = field(default_factory=list)  # (monotonic ms, units)

    def describe(self) -> Mapping[str, Any]:
        return {
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "ProvisionedThroughput": {"ReadCapacityUnits": self.read_units},
            "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        }

    def scan_page(
        self, segment: int, total_segments: int, start_key: Mapping[str, Any] | None, limit: int
    ) -> ScanPageResult:
        mine = [i for i in range(self.count) if i % total_segments == segment]
        start = 0 if start_key is None else int(start_key["i"]) + 1
        page = [i for i in mine if i >= start][:limit]
        more = page and page[-1] != mine[-1]
        items = tuple({"pk": {"S": f"item-{i}"}, "n": {"N": str(i)}} for i in page)
        self.reads.append((self.clock.monotonic_millis(), float(len(page))))
        return ScanPageResult(items, {"i": page[-1]} if more else None, float(len(page)))


class Counted:
    def __init__(self) -> None:
        self.sums: Counter[str] = Counter()

    def count(
        self, operation: str, name: str, value: float = 1, unit: str = "Count", shard_id: str | None = None
    ) -> None:
        self.sums[name] += value

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        return None

    def timing(self, operation: str, name_prefix: str, millis: float, success: bool) -> None:
        return None


def consumer(rig: Rig, processor: Any, table: FakeTable, metrics: Counted) -> ShardConsumer:
    rig.coordinator.take_round()
    lease = next(lease for lease in rig.coordinator.held() if lease.shard_id == "s1")
    return ShardConsumer(
        ShardInfo("s1"),
        lease.checkpoint.sequence,
        leases=rig.coordinator,
        reader=rig.stream,
        processor=processor,
        settings=rig.settings,
        clock=rig.clock,
        metrics=metrics,  # type: ignore[arg-type]
        counter=lease.counter,
        reloads=(lambda shard_id: table, ReloadBudget()),
    )


def trimmed_rig() -> Rig:
    rig = Rig(SETTINGS)
    rig.stream.add("s1", 100, 5)  # readable: 100..140; what was between 50 and 100 is trimmed
    rig.lease("s1", checkpoint=BEFORE_GAP)
    rig.stream.iterator_faults["s1"] = [TrimmedDataError("TrimmedDataAccessException")]
    return rig


@dataclass
class GapAware(RecordingProcessor):
    """The class form with the optional ``gap``; records what it saw and where the lease stood."""

    order: list[str] = field(default_factory=list)
    lease_at: list[str] = field(default_factory=list)
    rig: Rig | None = None

    def gap(self, gap: GapInput) -> None:
        self.order.append(f"gap:{gap.event.phase}:{gap.event.records_reloaded}")

    def process_records(self, process: ProcessRecordsInput) -> None:
        for r in process.records:
            self.order.append(("reloaded:" if r.reloaded else "stream:") + r.sequence_number)
        assert self.rig is not None
        self.lease_at.append(self.rig.store.get("s1").checkpoint.sequence)
        super().process_records(process)  # checkpoints: a reload batch's checkpointer records nothing


def test_the_gap_reaches_the_processor_then_the_table_then_the_shard_and_the_lease_waits() -> None:
    rig = trimmed_rig()
    table = FakeTable(rig.clock)
    metrics = Counted()
    processor = GapAware(rig=rig)
    rig.drive(consumer(rig, processor, table, metrics), max_steps=2_000)
    reloaded = [e for e in processor.order if e.startswith("reloaded:")]
    stream = [e for e in processor.order if e.startswith("stream:")]
    assert processor.order[0] == "gap:gap:0"
    assert processor.order.index("gap:reloaded:25") == 1 + len(reloaded)  # after every reloaded record
    assert processor.order.index(stream[0]) > processor.order.index("gap:reloaded:25")
    assert sorted(int(e.split(":")[1]) for e in reloaded) == list(range(1, 26))
    assert len(stream) == 5
    # The lease did not move past the gap before the shard's own records came.
    reload_batches = len(processor.lease_at) - 1
    assert set(processor.lease_at[:reload_batches]) == {BEFORE_GAP}
    assert rig.store.get("s1").checkpoint == ExtendedSequenceNumber("SHARD_END")
    assert metrics.sums["RecordsReloaded"] == 25 and metrics.sums["ReloadedGaps"] == 1
    assert metrics.sums["ReloadReadUnits"] == 25
    # Paced at half of 20 units/s: the 25 units took at least 25 / 10 s less the first page's.
    first, last = table.reads[0][0], table.reads[-1][0]
    assert sum(units for _, units in table.reads[:-1]) <= 10 * (last - first) / 1000 + 1e-6


def test_the_function_form_gets_marker_batches_and_reloaded_batches_before_the_shard() -> None:
    rig = trimmed_rig()
    table = FakeTable(rig.clock, count=7)
    seen: list[str] = []

    def handle(batch: Batch) -> None:
        if batch.gap is not None:
            seen.append(f"gap:{batch.gap.phase}")
        elif batch.reload is not None:
            assert all(r.reloaded and r.raw["reloadId"] == batch.reload.reload_id for r in batch.records)
            assert all(r.event_name == "MODIFY" and r.old_image is None for r in batch.records)
            seen.extend(f"reloaded:{r.new_image['pk']}" for r in batch.records if r.new_image)
        else:
            seen.extend(f"stream:{r.sequence_number}" for r in batch.records)

    processor = function_processor(handle, clock=rig.clock)
    c = consumer(rig, processor, table, Counted())
    rig.drive(c, max_steps=2_000)
    assert seen[0] == "gap:gap"
    end = seen.index("gap:reloaded")
    assert sorted(seen[1:end]) == sorted(f"reloaded:item-{i}" for i in range(7))
    assert [e for e in seen[end + 1 :]] == [f"stream:{r.sequence_number}" for r in rig.stream.shards["s1"]]
    assert c.life.reason is ShutdownReason.SHARD_END


def test_a_reload_that_fails_midway_is_delivered_again_and_the_shard_waits() -> None:
    rig = trimmed_rig()
    table = FakeTable(rig.clock, count=9)
    calls = {"n": 0}
    seen: list[str] = []

    def handle(batch: Batch) -> None:
        if batch.reload is not None:
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("the sink is down for a moment")
            seen.extend("r" for _ in batch.records)
        elif batch.records:
            assert len(seen) == 9, "the shard's records came before the reload was whole"
            seen.extend("s" for _ in batch.records)

    processor = function_processor(handle, clock=rig.clock)
    rig.drive(consumer(rig, processor, table, Counted()), max_steps=2_000)
    assert seen == ["r"] * 9 + ["s"] * 5


def test_a_reload_under_way_counts_as_progress_for_the_stall_watch() -> None:
    """A reload moves no checkpoint for as long as it reads the table; the stall watch sees its pages."""
    from consumer.lifecycle.stall_mover import progress_of

    rig = trimmed_rig()
    c = consumer(rig, GapAware(rig=rig), FakeTable(rig.clock, count=40), Counted())
    seen: dict[str, str] = {}  # progress -> the lease's checkpoint then
    for _ in range(500):
        due = c.step()
        seen[progress_of(c)] = c.checkpointer.last_checkpoint
        if due is None:
            break
        rig.advance(max(0, due - rig.clock.monotonic_millis()))
    during = {p: checkpoint for p, checkpoint in seen.items() if "reload page" in p}
    assert len(during) >= 10 and set(during.values()) == {BEFORE_GAP}
