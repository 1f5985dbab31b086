"""A write the table refuses is retried or named, never dropped: the oracle lists exactly what the
table took.

The chaos demo's table faults (throttles and HTTP 500s on every table) once outlasted botocore's
three attempts for one write of the load and killed the load's thread: a traceback in the demo's
output, and a load that stopped early while the demo still judged it."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ground.settings import LoadSettings, Settings
from tools.demo.load import LoadError, LoadGenerator
from tools.demo.run import Loads

SETTINGS = Settings.model_validate(
    {"application_name": "load-test", "table": {"name": "orders", "partition_key": {"name": "pk"}}}
)


def refusal(code: str, status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"{code} (test)"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "PutItem",
    )


class Refusing:
    """A client that refuses the calls whose numbers (1-based) are in ``refuse`` with ``error`` and
    takes the others, answering ``answer``; a subclass names the calls it stands in for."""

    answer: dict[str, Any] = {}

    def __init__(self, refuse: set[int], error: Exception) -> None:
        self.refuse, self.error = refuse, error
        self.calls: list[dict[str, Any]] = []
        self.taken: list[dict[str, Any]] = []

    def _call(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        if len(self.calls) in self.refuse:
            raise self.error
        self.taken.append(request)
        return self.answer


class RefusingTable(Refusing):
    put_item = update_item = delete_item = Refusing._call


def generator(table: RefusingTable, oracle: Path) -> LoadGenerator:
    return LoadGenerator(table, SETTINGS.table, LoadSettings(writes_per_second=2000, keys=10, seed=7), oracle)


def oracle_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ProvisionedThroughputExceededException", 400),
        ("ThrottlingException", 400),
        ("InternalServerError", 500),
    ],
)
def test_a_refused_write_is_retried_with_the_same_item_and_recorded_once(
    tmp_path: Path, code: str, status: int
) -> None:
    table = RefusingTable({2, 3, 4}, refusal(code, status))
    load = generator(table, tmp_path / "oracle.jsonl")

    written = load.run(duration_seconds=0.6)

    assert written == load.writes == len(table.taken) == len(oracle_lines(tmp_path / "oracle.jsonl"))
    assert load.refused == 3
    # Calls 2 to 5 are one write: the same request each time (the retry does not draw a new payload).
    assert table.calls[1] == table.calls[2] == table.calls[3] == table.calls[4] == table.taken[1]
    # No write was taken twice (a put or an update carries its write number; a delete only its key).
    numbered = [json.dumps(c, sort_keys=True) for c in table.taken if "UpdateExpression" in c or "Item" in c]
    assert len(set(numbered)) == len(numbered)


def test_the_same_seed_writes_the_same_items_with_or_without_refusals(tmp_path: Path) -> None:
    refused = RefusingTable({1, 5}, refusal("ProvisionedThroughputExceededException", 400))
    clean = RefusingTable(set(), refusal("unused", 400))
    generator(refused, tmp_path / "a.jsonl").run(duration_seconds=0.3)
    generator(clean, tmp_path / "b.jsonl").run(duration_seconds=0.3)
    shortest = min(len(refused.taken), len(clean.taken))
    assert shortest > 10
    assert refused.taken[:shortest] == clean.taken[:shortest]


def test_a_write_refused_for_good_stops_the_load_naming_the_table_and_the_key(tmp_path: Path) -> None:
    table = RefusingTable({3}, refusal("ValidationException", 400))
    load = generator(table, tmp_path / "oracle.jsonl")

    with pytest.raises(
        LoadError, match=r"the table orders refused the \w+ of item-\d{5}: .*ValidationException"
    ):
        load.run(duration_seconds=5)

    assert load.writes == 2 == len(oracle_lines(tmp_path / "oracle.jsonl"))


def test_a_load_stopped_while_a_write_is_refused_leaves_that_write_out_of_the_oracle(tmp_path: Path) -> None:
    table = RefusingTable(set(range(2, 10_000)), refusal("ProvisionedThroughputExceededException", 400))
    load = generator(table, tmp_path / "oracle.jsonl")
    timer = threading.Timer(0.3, load.stop)
    timer.start()
    try:
        written = load.run(duration_seconds=30)
    finally:
        timer.cancel()
    assert written == 1 == len(oracle_lines(tmp_path / "oracle.jsonl"))
    assert load.refused >= 1


def test_the_demo_load_keeps_a_generator_error_for_the_demo_to_report(tmp_path: Path) -> None:
    failing = generator(RefusingTable({1}, refusal("ResourceNotFoundException", 400)), tmp_path / "a.jsonl")
    working = generator(RefusingTable(set(), refusal("unused", 400)), tmp_path / "b.jsonl")
    loads = Loads([failing, working])

    loads.run(duration_seconds=0.2)

    assert len(loads.errors) == 1
    assert str(loads.errors[0]).startswith("the table orders refused the put of item-")
    assert "ResourceNotFoundException" in str(loads.errors[0])
    assert working.writes > 0 and failing.writes == 0
