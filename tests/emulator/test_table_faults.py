"""Conformance of the DynamoDB table faults a lease core meets on a real table: long-tail latency,
writes applied but answered HTTP 500 (or too late), stale eventually consistent scans, and the table
pattern that confines them. Driven through boto3 and the control API; nothing is asserted on
wall-clock durations (latency shows in the counters, staleness in what the scans return).
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError

from emulator.config import EngineConfig
from emulator.engine import StreamEngine
from emulator.errors import ControlError
from emulator.faults import FaultSettings, ScanView, ScanViews, draw_table_latency
from emulator.gate import TableCall
from emulator.testing import PROJECT_ROOT as REPO
from emulator.testing import RunningEmulator, emulator_command, running_emulator
from ground.settings import LoadSettings, TableSettings
from tests.emulator.conftest import read_stream
from tools.demo import load as load_module
from tools.demo.load import LoadGenerator

_names = itertools.count()
NO_RETRY = Config(retries={"total_max_attempts": 1, "mode": "standard"})


def _code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def _table(emu: RunningEmulator, prefix: str = "tf", stream: bool = True) -> str:
    name = f"{prefix}{next(_names)}"
    extra: dict[str, Any] = (
        {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}}
        if stream
        else {}
    )
    emu.client("dynamodb").create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )
    return name


class _Faults:
    """Set faults for one test and always put the defaults back (the emulator is shared)."""

    def __init__(self, emu: RunningEmulator) -> None:
        self.emu = emu

    def __call__(self, **changes: float | str) -> None:
        self.emu.control.set_faults(**changes)

    def reset(self) -> None:
        defaults = FaultSettings()
        self.emu.control.set_faults(
            **{
                name: getattr(defaults, name)
                for name in defaults.__dataclass_fields__
                if name.startswith("table_")
            }
        )


@pytest.fixture
def faults(emulator: RunningEmulator) -> Iterator[_Faults]:
    setter = _Faults(emulator)
    try:
        yield setter
    finally:
        setter.reset()


def _delta(emu: RunningEmulator, before: dict[str, int], name: str) -> int:
    return emu.control.counters().get(name, 0) - before.get(name, 0)


# ------------------------------------------------------------------------------- latency (pure)


def test_latency_has_its_median_near_the_setting_and_a_few_percent_far_slower() -> None:
    settings = FaultSettings(
        table_latency_millis=20, table_latency_tail_millis=400, table_latency_tail_rate=0.05
    )
    rng = random.Random(3)
    draws = [draw_table_latency(rng, settings) for _ in range(4000)]
    body = sorted(d.millis for d in draws if not d.tail)
    tail = [d.millis for d in draws if d.tail]
    assert 0.035 <= len(tail) / len(draws) <= 0.065
    assert 18 <= sorted(d.millis for d in draws)[len(draws) // 2] <= 22  # the median is the setting
    assert body[0] >= 10 and body[-1] <= 30
    assert min(tail) >= 400 and max(tail) <= 2000  # tail × Pareto, capped at 5 × tail
    assert max(tail) >= 1000  # heavy: the slowest calls are several times the typical tail


def test_latency_off_draws_nothing_so_other_faults_keep_their_seeded_sequence() -> None:
    rng = random.Random(5)
    state = rng.getstate()
    assert draw_table_latency(rng, FaultSettings(table_latency_tail_rate=0.5)).millis == 0
    assert rng.getstate() == state


def test_engine_confines_table_faults_to_the_pattern() -> None:
    faults = FaultSettings(table_error_rate=1.0, table_fault_tables="app, app-*")
    engine = StreamEngine(EngineConfig(faults=faults))
    assert engine.gate.admit_table_call("PutItem", frozenset({"orders"})) == TableCall()
    assert engine.gate.admit_table_call("ListTables", frozenset()) == TableCall()  # names no table
    for table in ("app", "app-workers"):
        refused = engine.gate.admit_table_call("GetItem", frozenset({table})).refused
        assert refused is not None and refused.status == 500
    # A transaction touching one table in scope is in scope.
    assert (
        engine.gate.admit_table_call("TransactWriteItems", frozenset({"orders", "app"})).refused is not None
    )
    assert engine.counters()["table_faults_injected"] == 3


def test_scan_views_serve_only_answers_inside_the_window_and_forget_the_rest() -> None:
    """Times are given, not read from a clock: views at 0, 400, 900 ms with a 600 ms window."""
    views, rng = ScanViews(), random.Random(1)

    def view(at: int, body: bytes) -> ScanView:
        return ScanView(at, "200 OK", (), body)

    assert views.record_and_pick("t\nq", view(0, b"v0"), 600, rng).body == b"v0"  # nothing older
    served = {views.record_and_pick("t\nq", view(400, b"v1"), 600, rng).body for _ in range(30)}
    assert served == {b"v0", b"v1"}  # the 0 ms view is 400 ms old: may be served
    served = {views.record_and_pick("t\nq", view(900, b"v2"), 600, rng).body for _ in range(30)}
    assert served == {b"v1", b"v2"}  # 900 ms old: never again
    views.record_and_pick("t\nother", view(950, b"x"), 600, rng)
    views.record_and_pick("t\nq", view(2000, b"v3"), 600, rng)
    assert set(views.views) == {"t\nq"}  # a request nobody repeated is dropped
    views.forget("t\n")
    assert not views.views


# ------------------------------------------------------------------------------- through boto3


def test_latency_applies_to_every_call_on_tables_in_scope(emulator: RunningEmulator, faults: _Faults) -> None:
    hit, spared = _table(emulator, "slow"), _table(emulator, "fast")
    ddb = emulator.client("dynamodb")
    faults(
        table_latency_millis=4,
        table_latency_tail_millis=40,
        table_latency_tail_rate=0.5,
        table_fault_tables="slow*",
    )
    before = emulator.control.counters()
    for i in range(10):
        ddb.put_item(TableName=hit, Item={"pk": {"S": f"k{i}"}})
        ddb.get_item(TableName=hit, Key={"pk": {"S": f"k{i}"}})
        ddb.put_item(TableName=spared, Item={"pk": {"S": f"k{i}"}})
    ddb.scan(TableName=hit)
    assert _delta(emulator, before, "table_delayed_calls") == 21  # the 21 calls on the slow table only
    tails = _delta(emulator, before, "table_tail_delayed_calls")
    assert 1 <= tails <= 20
    # Every delayed call waited at least half the median; each tail call at least the tail.
    assert _delta(emulator, before, "table_delay_millis") >= 21 * 2 + tails * 38


@pytest.mark.parametrize("write", ["put", "update", "delete", "batch", "transact"])
def test_an_ambiguous_write_is_applied_and_answered_500(
    emulator: RunningEmulator, faults: _Faults, write: str
) -> None:
    table = _table(emulator)
    ddb = emulator.client("dynamodb", config=NO_RETRY)
    ddb.put_item(TableName=table, Item={"pk": {"S": "old"}})
    new = {"pk": {"S": "new"}, "v": {"N": "1"}}
    calls = {
        "put": lambda: ddb.put_item(TableName=table, Item=new),
        "update": lambda: ddb.update_item(
            TableName=table, Key={"pk": new["pk"]}, UpdateExpression="SET v = :v",
            ExpressionAttributeValues={":v": new["v"]},
        ),
        "delete": lambda: ddb.delete_item(TableName=table, Key={"pk": {"S": "old"}}),
        "batch": lambda: ddb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": new}}]}),
        "transact": lambda: ddb.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": new}}]),
    }  # fmt: skip
    faults(table_ambiguous_rate=1.0, table_fault_tables=table)
    before = emulator.control.counters()
    with pytest.raises(ClientError) as exc:
        calls[write]()
    faults(table_ambiguous_rate=0.0)
    assert _code(exc) == "InternalServerError"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert _delta(emulator, before, "table_ambiguous_writes") == 1
    items = {i["pk"]["S"]: i for i in ddb.scan(TableName=table, ConsistentRead=True)["Items"]}
    if write == "delete":
        assert "old" not in items
    else:
        assert items["new"] == new
    events = [r["eventName"] for r in read_stream(emulator.client("dynamodbstreams"), _arn(emulator, table))]
    assert events == ["INSERT", "REMOVE" if write == "delete" else "INSERT"]  # the stream has it too


def _arn(emu: RunningEmulator, table: str) -> str:
    return str(emu.client("dynamodb").describe_table(TableName=table)["Table"]["LatestStreamArn"])


def test_a_retried_conditional_write_then_fails_its_condition(
    emulator: RunningEmulator, faults: _Faults
) -> None:
    """A lease take (counter 1 -> 2 if still 1) answered 500 after it applied: botocore's retry
    finds counter 2 and fails the condition, though the take did happen."""
    table = _table(emulator)
    ddb = emulator.client("dynamodb", config=Config(retries={"total_max_attempts": 3, "mode": "standard"}))
    ddb.put_item(TableName=table, Item={"pk": {"S": "shard-1"}, "leaseCounter": {"N": "1"}})
    faults(table_ambiguous_rate=1.0, table_fault_tables=table)
    before = emulator.control.counters()
    with pytest.raises(ClientError) as exc:
        ddb.update_item(
            TableName=table,
            Key={"pk": {"S": "shard-1"}},
            UpdateExpression="SET leaseCounter = :new, leaseOwner = :me",
            ConditionExpression="leaseCounter = :old",
            ExpressionAttributeValues={":old": {"N": "1"}, ":new": {"N": "2"}, ":me": {"S": "w1"}},
        )
    faults(table_ambiguous_rate=0.0)
    assert _code(exc) == "ConditionalCheckFailedException"
    assert _delta(emulator, before, "table_ambiguous_writes") == 1  # the failed retry is not ambiguous
    item = ddb.get_item(TableName=table, Key={"pk": {"S": "shard-1"}}, ConsistentRead=True)["Item"]
    assert item["leaseCounter"] == {"N": "2"} and item["leaseOwner"] == {"S": "w1"}


def test_an_ambiguous_write_can_answer_after_the_client_gave_up(
    emulator: RunningEmulator, faults: _Faults
) -> None:
    table = _table(emulator)
    impatient = emulator.client(
        "dynamodb", config=Config(read_timeout=0.5, retries={"total_max_attempts": 1, "mode": "standard"})
    )
    faults(table_ambiguous_rate=1.0, table_ambiguous_delay_millis=3000, table_fault_tables=table)
    before = emulator.control.counters()
    with pytest.raises(ReadTimeoutError):
        impatient.put_item(TableName=table, Item={"pk": {"S": "late"}})
    faults(table_ambiguous_rate=0.0, table_ambiguous_delay_millis=0)
    ddb = emulator.client("dynamodb")
    assert "Item" in ddb.get_item(TableName=table, Key={"pk": {"S": "late"}}, ConsistentRead=True)
    assert _delta(emulator, before, "table_ambiguous_delayed") == 1


def _scan_value(ddb: Any, table: str, **extra: Any) -> str:
    items = ddb.scan(TableName=table, **extra)["Items"]
    return str(items[0]["v"]["N"])


def test_a_stale_scan_shows_an_older_state_while_consistent_reads_and_writes_see_the_new_one(
    emulator: RunningEmulator, faults: _Faults
) -> None:
    table = _table(emulator)
    ddb = emulator.client("dynamodb")
    faults(table_stale_scan_millis=600_000, table_fault_tables=table)
    before = emulator.control.counters()
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    assert _scan_value(ddb, table) == "1"  # the view of v=1
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "2"}})
    seen = [_scan_value(ddb, table) for _ in range(30)]
    assert set(seen) == {"1", "2"}  # some scans stale, some fresh
    for _ in range(10):  # strongly consistent reads never are
        assert _scan_value(ddb, table, ConsistentRead=True) == "2"
        item = ddb.get_item(TableName=table, Key={"pk": {"S": "a"}}, ConsistentRead=True)["Item"]
        assert item["v"] == {"N": "2"}
    # Writes see the current state: a condition on v=2 holds, one on v=1 fails.
    ddb.update_item(
        TableName=table, Key={"pk": {"S": "a"}}, UpdateExpression="SET v = :three",
        ConditionExpression="v = :two", ExpressionAttributeValues={":two": {"N": "2"}, ":three": {"N": "3"}},
    )  # fmt: skip
    with pytest.raises(ClientError) as exc:
        ddb.delete_item(
            TableName=table, Key={"pk": {"S": "a"}}, ConditionExpression="v = :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )  # fmt: skip
    assert _code(exc) == "ConditionalCheckFailedException"
    assert _delta(emulator, before, "table_stale_scans") == seen.count("1")


def test_a_stale_scan_is_never_older_than_the_window(emulator: RunningEmulator, faults: _Faults) -> None:
    table = _table(emulator)
    ddb = emulator.client("dynamodb")
    faults(table_stale_scan_millis=300, table_fault_tables=table)
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    _scan_value(ddb, table)
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "2"}})
    time.sleep(0.4)  # the v=1 view is now older than the window: it may not be served any more
    assert {_scan_value(ddb, table) for _ in range(15)} == {"2"}


def test_the_table_pattern_leaves_other_tables_alone(emulator: RunningEmulator, faults: _Faults) -> None:
    source = _table(emulator, "source")
    leases = _table(emulator, "app", stream=False)
    workers = f"{leases}-workers"
    emulator.client("dynamodb").create_table(
        TableName=workers,
        KeySchema=[{"AttributeName": "workerId", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "workerId", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb = emulator.client("dynamodb", config=NO_RETRY)
    faults(
        table_throttle_rate=1.0, table_stale_scan_millis=600_000, table_fault_tables=f"{leases},{leases}-*"
    )
    before = emulator.control.counters()
    ddb.put_item(TableName=source, Item={"pk": {"S": "fine"}})
    ddb.list_tables()  # names no table: only hit when every table is
    for name, item in ((leases, {"pk": {"S": "x"}}), (workers, {"workerId": {"S": "w"}})):
        with pytest.raises(ClientError) as exc:
            ddb.put_item(TableName=name, Item=item)
        assert _code(exc) == "ProvisionedThroughputExceededException"
    assert _delta(emulator, before, "table_throttled") == 2
    # The source table's scans stay fresh although a staleness window is set.
    for v in range(3):
        ddb.put_item(TableName=source, Item={"pk": {"S": "fine"}, "v": {"N": str(v)}})
        assert _scan_value(ddb, source) == str(v)
    assert _delta(emulator, before, "table_stale_scans") == 0


def test_bad_table_fault_settings_are_refused(emulator: RunningEmulator, faults: _Faults) -> None:
    for bad in ({"table_ambiguous_rate": 1.5}, {"table_fault_tables": 3}, {"table_fault_tables": " , "},
                {"table_latency_millis": -1}, {"table_latency_tail_rate": 2}):  # fmt: skip
        with pytest.raises(ControlError):
            emulator.control.set_faults(**bad)
    assert emulator.control.faults()["table_fault_tables"] == "*"


def test_a_bad_table_fault_flag_stops_the_emulator_before_it_listens() -> None:
    command = [
        *emulator_command("local", REPO / "config", {"port": 0, "table_ambiguous_rate": 2}),
        "--exit-with-parent",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert result.returncode == 2 and "table_ambiguous_rate" in result.stderr
    assert "EMULATOR READY" not in result.stdout


def test_table_faults_can_be_set_at_start_up() -> None:
    with running_emulator(
        partitions=1, table_error_rate=1.0, table_stale_scan_millis=250, table_fault_tables="leases*"
    ) as emu:
        settings = emu.control.faults()
        assert settings["table_error_rate"] == 1.0 and settings["table_stale_scan_millis"] == 250
        assert settings["table_fault_tables"] == "leases*"
        ddb = emu.client("dynamodb", config=NO_RETRY)
        with pytest.raises(ClientError) as exc:  # creating a table in scope is a call on it too
            _table(emu, "leases")
        assert _code(exc) == "InternalServerError"
        spared = _table(emu, "source")
        ddb.put_item(TableName=spared, Item={"pk": {"S": "x"}})
        assert emu.control.counters()["table_faults_injected"] >= 1


def test_the_demo_load_retries_what_the_table_refuses_and_every_write_it_records_is_on_the_stream_once(
    emulator: RunningEmulator, faults: _Faults, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos demo's table faults hit the source table too: a refusal that outlasts the client's
    retries is the load's to retry (here the client has none), with the same item."""
    name = _table(emulator, "demo-load")
    arn = emulator.client("dynamodb").describe_table(TableName=name)["Table"]["LatestStreamArn"]
    table = TableSettings.model_validate({"name": name, "partition_key": {"name": "pk"}})
    monkeypatch.setattr(load_module, "REFUSED_WRITE_BACKOFF_SECONDS", 0.01)
    load = LoadGenerator(
        emulator.client("dynamodb", config=NO_RETRY),
        table,
        LoadSettings(writes_per_second=200, keys=20, seed=3),
        tmp_path / "oracle.jsonl",
    )
    faults(table_throttle_rate=0.3, table_error_rate=0.2, table_fault_tables=name)

    load.run(duration_seconds=120, on_write=lambda _: load.stop() if load.writes >= 40 else None)

    assert load.writes == 40 and load.refused >= 5
    written = Counter(tuple(row.values()) for row in map(json.loads, (tmp_path / "oracle.jsonl").open()))
    assert sum(written.values()) == load.writes
    on_stream = Counter(
        (
            record["dynamodb"]["Keys"]["pk"]["S"],
            record["eventName"],
            int(record["dynamodb"]["OldImage" if record["eventName"] == "REMOVE" else "NewImage"]["w"]["N"]),
        )
        for record in read_stream(emulator.client("dynamodbstreams"), arn)
    )
    assert on_stream == written
