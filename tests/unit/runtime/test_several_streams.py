"""Several streams in one fleet, below the processes: the ``streams:`` settings, the lease keys'
form, the stream port and processors that route by it, the Stream dimension, and one taker
balancing every stream's leases together (the e2e test runs it on the emulator)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.lease_keys import split_lease_key, stream_prefix, table_of
from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease
from consumer.processing.api import InitializationInput, ProcessRecordsInput, RecordProcessor
from consumer.processing.memory_checkpointer import InMemoryCheckpointer
from consumer.records import ShardInfo
from consumer.runtime.lease_scope import ConfiguredStreamsOnly
from consumer.runtime.several_streams import RoutedProcessors, StreamMetrics
from consumer.streams.errors import ShardNotFoundError
from consumer.streams.namespace import NamespacedStream, StreamSet
from consumer.streams.reader import ShardReader
from consumer.streams.source import GetRecordsResult, Position, Shard
from consumer.streams.sync import LeaseView, plan_shard_sync
from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.transports import InMemoryTransport
from ground.clock import FakeClock
from ground.settings import ConfigError, Settings, WorkerSettings, load_settings

ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/{}/stream/2026-11-27T03:44:28.302"


def settings(tmp_path: Path, body: str) -> Settings:
    (tmp_path / "base.yaml").write_text(
        "application_name: many-tables\nendpoint_url: http://127.0.0.1:4599\n"
        "table: {name: orders, partition_key: {name: pk}, sort_key: {name: sk}}\n"
        "processing: {processor: changelog, options: {destination: var/changelog}}\n"
    )
    (tmp_path / "env.yaml").write_text(body)
    return load_settings("env", tmp_path)


def problems(tmp_path: Path, body: str) -> str:
    with pytest.raises(ConfigError) as raised:
        settings(tmp_path, body)
    return str(raised.value)


# ------------------------------------------------------------------------------------ settings


def test_without_streams_the_one_table_is_the_only_stream(tmp_path: Path) -> None:
    loaded = settings(tmp_path, "")
    assert not loaded.several_streams and loaded.per_stream() == (loaded,)


def test_each_entry_is_layered_over_the_top_level_table_and_processing(tmp_path: Path) -> None:
    loaded = settings(
        tmp_path,
        "streams:\n"
        "  - table: {name: orders}\n    processing: {options: {destination: var/orders}}\n"
        "  - table: {name: customers, partition_key: {name: id, type: N}, sort_key: null}\n"
        "    processing: {processor: 'lambda:handlers.customers'}\n",
    )
    orders, customers = loaded.per_stream()
    assert loaded.several_streams and (loaded.table, loaded.processing) == (orders.table, orders.processing)
    assert (orders.table.sort_key and orders.table.sort_key.name) == "sk"  # inherited
    assert orders.processing.options == {"destination": "var/orders"}
    assert (customers.table.partition_key.name, customers.table.partition_key.type) == ("id", "N")
    assert customers.table.sort_key is None
    # Another processor starts from no options: the changelog's destination is not the handler's.
    assert (
        customers.processing.processor == "lambda:handlers.customers" and customers.processing.options == {}
    )
    assert all(view.streams is None and view.worker == loaded.worker for view in (orders, customers))


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("streams: []\n", "streams: is an empty list"),
        (
            "streams:\n  - table: {name: orders}\n    processing: {options: {destination: a}}\n"
            "  - table: {name: orders}\n    processing: {options: {destination: b}}\n",
            "streams.1.table: table 'orders' is already streams.0's",
        ),
        (
            "streams:\n  - table: {name: orders}\n  - table: {name: customers}\n",
            "streams.1.processing.options.destination: 'var/changelog' is also streams.0's",
        ),
        ("streams:\n  - table: {nme: orders}\n", "streams.0.table.nme: unknown key; did you mean 'name'?"),
        ("streams:\n  - tabel: {name: orders}\n", "streams.0.tabel: unknown key; did you mean 'table'?"),
    ],
)
def test_a_bad_list_is_refused_naming_the_key(tmp_path: Path, body: str, said: str) -> None:
    message = problems(tmp_path, body)
    assert said in message
    assert "table.nme" not in message.replace("streams.0.table.nme", "")  # said once, of the entry


# ------------------------------------------------------------------------------------ lease keys


def test_a_lease_key_names_account_table_stream_creation_and_shard() -> None:
    prefix = stream_prefix(ARN.format("orders"))
    assert prefix == "123456789012:orders:1795751068:"
    key = f"{prefix}shardId-00000001795751076003-6af5a43e"
    assert split_lease_key(key) == (prefix, "shardId-00000001795751076003-6af5a43e")
    assert table_of(key) == "orders"
    assert split_lease_key("shardId-1") == ("", "shardId-1") and table_of("shardId-1") is None
    # A table re-created under the same name has a new stream, a new label: other keys.
    assert stream_prefix(ARN.format("orders").replace("03:44:28", "05:00:00")) != prefix
    with pytest.raises(ValueError, match="not a DynamoDB stream ARN"):
        stream_prefix("arn:aws:kinesis:eu-west-1:123456789012:stream/orders")


@given(
    table=st.from_regex(r"[A-Za-z0-9_.-]{3,30}", fullmatch=True),
    shard=st.from_regex(r"shardId-[0-9]{20}-[0-9a-f]{8}", fullmatch=True),
)
def test_every_key_splits_back_into_its_table_and_shard(table: str, shard: str) -> None:
    key = stream_prefix(ARN.format(table)) + shard
    assert table_of(key) == table and split_lease_key(key)[1] == shard


class FakeSource:
    """Two tables' shards: one parent split in two on "orders", one open shard on "customers"."""

    def __init__(self) -> None:
        self.shards = {
            ARN.format("orders"): (
                Shard("p", None, "1", "9"),
                Shard("c1", "p", "10"),
                Shard("c2", "p", "11"),
            ),
            ARN.format("customers"): (Shard("p", None, "1"),),
        }
        self.reads: list[tuple[str, str]] = []
        self.fetched: list[tuple[str, dict[str, bool]]] = []

    def list_shards(self, stream_arn: str) -> tuple[Shard, ...]:
        return self.shards[stream_arn]

    def child_shards(self, stream_arn: str, shard_id: str) -> tuple[Shard, ...]:
        return tuple(s for s in self.shards[stream_arn] if s.parent_shard_id == shard_id)

    def get_iterator(self, stream_arn: str, shard_id: str, position: Position) -> str:
        self.reads.append((stream_arn, shard_id))
        return f"{stream_arn}|{shard_id}"

    def get_records(self, iterator: str, limit: int, shard_id: str, **how: bool) -> GetRecordsResult:
        self.fetched.append((iterator, how))
        return GetRecordsResult((), None, 0)


def stream_set(source: FakeSource) -> StreamSet:
    return StreamSet(
        [NamespacedStream(ShardReader(source, ARN.format(t)), t) for t in ("orders", "customers")]  # type: ignore[arg-type]
    )


def test_each_stream_reads_with_its_own_convert_images() -> None:
    source = FakeSource()
    streams = StreamSet(
        [
            NamespacedStream(ShardReader(source, ARN.format("orders"), convert_images=True), "orders"),  # type: ignore[arg-type]
            NamespacedStream(ShardReader(source, ARN.format("customers")), "customers"),  # type: ignore[arg-type]
        ]
    )
    orders, customers = (stream_prefix(ARN.format(t)) for t in ("orders", "customers"))
    streams.fetch(f"{orders}p", "it-o", 1000)
    streams.fetch(f"{customers}p", "it-c", 1000)
    assert source.fetched == [("it-o", {"convert_images": True}), ("it-c", {})]


def test_the_stream_set_shows_every_stream_namespaced_and_routes_back() -> None:
    source = FakeSource()
    streams = stream_set(source)
    listed = streams.list_shards()
    orders, customers = (stream_prefix(ARN.format(t)) for t in ("orders", "customers"))
    assert [(s.shard_id, s.parent_shard_id) for s in listed] == [
        (f"{orders}p", None),
        (f"{orders}c1", f"{orders}p"),
        (f"{orders}c2", f"{orders}p"),
        (f"{customers}p", None),
    ]
    streams.iterator_at(f"{customers}p", "TRIM_HORIZON")
    assert source.reads == [(ARN.format("customers"), "p")]  # the same shard id, the right stream
    assert [c.shard_id for c in streams.list_children(f"{orders}p")] == [f"{orders}c1", f"{orders}c2"]
    with pytest.raises(ShardNotFoundError, match="belongs to no stream"):
        streams.iterator_at("111111111111:gone:1:p", "TRIM_HORIZON")
    # The sync plans the union as one stream: each table's shards, parents first, by their keys.
    plan = plan_shard_sync(listed, [LeaseView(f"{orders}p", "SHARD_END")], "TRIM_HORIZON", False, False)
    assert sorted((n.shard_id, sorted(n.parent_shard_ids)) for n in plan.leases_to_create) == [
        (f"{customers}p", []),
        (f"{orders}c1", [f"{orders}p"]),
        (f"{orders}c2", [f"{orders}p"]),
    ]


class Recording:
    def __init__(self, shard: ShardInfo) -> None:
        self.made_for = shard
        self.seen: list[ShardInfo] = []

    def initialize(self, initialization: InitializationInput) -> None:
        self.seen.append(initialization.shard)

    def process_records(self, process: ProcessRecordsInput) -> None:
        self.seen.append(process.shard)

    def lease_lost(self, lease_lost: object) -> None: ...

    def shard_ended(self, shard_ended: object) -> None: ...

    def shutdown_requested(self, shutdown: object) -> None: ...


def test_each_processor_sees_its_own_stream_s_shard_ids() -> None:
    made: dict[str, list[Recording]] = {"orders": [], "customers": []}

    def factory(table: str):  # type: ignore[no-untyped-def]
        def make(shard: ShardInfo) -> RecordProcessor:
            made[table].append(Recording(shard))
            return made[table][-1]

        return make

    orders, customers = (stream_prefix(ARN.format(t)) for t in made)
    routed = RoutedProcessors({orders: factory("orders"), customers: factory("customers")})
    leased = ShardInfo(f"{orders}c1", (f"{orders}p",))
    processor = routed(leased)
    processor.initialize(InitializationInput(leased, "TRIM_HORIZON"))
    processor.process_records(ProcessRecordsInput((), InMemoryCheckpointer(), 0, leased))
    (recording,) = made["orders"]
    assert recording.made_for == ShardInfo("c1", ("p",)) and recording.seen == [ShardInfo("c1", ("p",))] * 2
    assert made["customers"] == []


def test_a_stream_s_figures_carry_its_stream_dimension(tmp_path: Path) -> None:
    loaded = settings(
        tmp_path,
        "metrics: {destination: none}\nstreams:\n"
        "  - table: {name: orders}\n    processing: {options: {destination: a}}\n"
        "  - table: {name: customers}\n    processing: {options: {destination: b}}\n",
    )
    transport = InMemoryTransport()
    recorder = MetricsRecorder(loaded, "w-1", transport, FakeClock(), sample_process=False)
    StreamMetrics(recorder, stream_prefix(ARN.format("orders"))).count(
        "ProcessTask", "RecordsRetried", 2, shard_id="p"
    )
    recorder.count(
        "ProcessTask", "RecordsProcessed", 5, shard_id=stream_prefix(ARN.format("customers")) + "p"
    )
    recorder.gauge("RenewAllLeases", "CurrentLeases", 3, "Count")  # of no stream
    recorder.flush()
    recorder.stop(timeout_seconds=2)
    by_stream = {(d.get("Stream"), name) for d in transport.documents for name in d if name[0].isupper()}
    assert (("orders", "RecordsRetried") in by_stream) and (("customers", "RecordsProcessed") in by_stream)
    sets = {
        d.get("Stream"): [tuple(s) for c in d["_aws"]["CloudWatchMetrics"] for s in c["Dimensions"]]  # type: ignore[index]
        for d in transport.documents
    }
    assert sets["orders"] == [("Operation", "WorkerIdentifier", "Stream"), ("Operation", "WorkerIdentifier")]
    assert ("Operation", "Stream") in sets["customers"]  # RecordsProcessed is a fleet metric
    assert sets[None] == [("Operation", "WorkerIdentifier")]


# ------------------------------------------------------------------------------------ balance


def test_one_taker_balances_every_stream_s_leases_together() -> None:
    """Three workers, three tables of four shards: four leases each in all, whatever their tables
    (three coordinators each balancing its own table could leave one worker all twelve)."""
    store, clock = InMemoryLeaseStore(), FakeClock()
    for table in ("orders", "customers", "payments"):
        for shard in range(4):
            key = f"{stream_prefix(ARN.format(table))}shardId-{shard}"
            store.create_if_absent(Lease(key, None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    workers = [LeaseCoordinator(store, name, WorkerSettings(), clock) for name in ("a", "b", "c")]
    for worker in workers:
        worker.heartbeat_once()
    for _ in range(3):
        for worker in workers:
            worker.heartbeat_once()
            worker.take_round()
        clock.advance(WorkerSettings().taker_interval_millis)
    held = {w.worker_id: [lease.shard_id for lease in w.held()] for w in workers}
    assert {name: len(keys) for name, keys in held.items()} == {"a": 4, "b": 4, "c": 4}
    assert len({k for keys in held.values() for k in keys}) == 12
    assert Counter(table_of(k) for keys in held.values() for k in keys) == {
        t: 4 for t in ("orders", "customers", "payments")
    }


def test_leases_of_streams_not_configured_are_left_alone_and_named_once() -> None:
    """A stream dropped from streams: (and the plain keys of the one-table form used before) keeps
    its leases in the table. Taken, they ended as RECORDS_TRIMMED_LOST with SHARD_END written, so
    adding the stream back skipped the rest of those shards. Left alone, they keep their position."""
    store, clock = InMemoryLeaseStore(), FakeClock()
    read = [stream_prefix(ARN.format(t)) for t in ("orders", "customers")]
    for prefix in read:
        for shard in range(3):
            store.create_if_absent(
                Lease(f"{prefix}shardId-{shard}", None, 0, ExtendedSequenceNumber("TRIM_HORIZON"))
            )
    dropped = stream_prefix(ARN.format("archived"))
    orphans = [f"{dropped}shardId-0", f"{dropped}shardId-1", "shardId-plain"]
    for key in orphans:
        store.create_if_absent(Lease(key, None, 0, ExtendedSequenceNumber("4960")))
    said: list[str] = []
    scoped = ConfiguredStreamsOnly(store, read, warn=said.append)
    workers = [LeaseCoordinator(scoped, name, WorkerSettings(), clock) for name in ("a", "b")]
    for _ in range(3):
        for worker in workers:
            worker.heartbeat_once()
            worker.take_round()
        clock.advance(WorkerSettings().taker_interval_millis)
    held = sorted(lease.shard_id for worker in workers for lease in worker.held())
    assert held == sorted(f"{prefix}shardId-{shard}" for prefix in read for shard in range(3))
    for key in orphans:
        assert store.get(key) == Lease(key, None, 0, ExtendedSequenceNumber("4960"))
    assert len(said) == 1 and dropped in said[0] and "(plain shard ids)" in said[0], said


def test_config_validate_names_the_stream_whose_processor_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tools.cli import main

    settings(
        tmp_path,
        "streams:\n"
        "  - table: {name: orders}\n    processing: {options: {destination: a}}\n"
        "  - table: {name: customers}\n    processing: {processor: chagnelog, options: {destination: b}}\n",
    )
    code = main(["config", "validate", "--env", "env", "--config-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3
    assert (
        "streams.1: processing.processor 'chagnelog' is not a built-in" in err
        and "did you mean 'changelog'?" in err
    )


def test_a_second_parent_is_namespaced_too() -> None:
    source = FakeSource()
    source.shards[ARN.format("orders")] = (
        Shard("a", None, "1", "9"),
        Shard("b", None, "2", "9"),
        Shard("m", "a", "10", None, "b"),
    )
    (stream, _) = stream_set(source).streams
    orders = stream_prefix(ARN.format("orders"))
    merged = stream.list_shards()[2]
    assert merged.parent_shard_ids == (f"{orders}a", f"{orders}b")
