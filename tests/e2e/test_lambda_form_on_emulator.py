"""A Powertools ``BatchProcessor`` handler, byte for byte as a Lambda user deploys it
(tests/e2e/lambda_app/lambda_function.py), run by a ``consumer run`` worker on the emulator.

Thirty orders go into the table before the worker starts, so it reads them in invocations of ten:
two fail their first attempts (partial batch failures, reported by Powertools), one can never be
processed. What the handler logs of every invocation (the sequence numbers it was given, the
failures it reported or the error it raised) and of every processed order is compared with the
stream: every order is processed, a record is never delivered again once an invocation acknowledged
it, the invocation after a partial failure starts at the lowest failed record, and the poison order
ends alone in the dead letters. The context and event carry the configured function and the real
stream's ARN.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from emulator.testing import running_emulator
from ground.settings import load_settings
from tests.e2e.fast_settings import FAST_WORKER_YAML
from tools.demo.fleet import LocalFleet
from tools.local_aws import create_local_tables

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
APP = Path(__file__).resolve().parent / "lambda_app"
ORDERS = 30
FLAKY = {4: 1, 15: 2}  # order number -> attempts that fail
POISON = 22


def write_config(directory: Path, endpoint: str, dead_letters: Path) -> None:
    (directory / "lambda.yaml").write_text(
        f"""
application_name: e2e-lambda
region: us-east-1
endpoint_url: {endpoint}
table:
  name: orders
  partition_key: {{name: pk, type: S}}
{FAST_WORKER_YAML}
metrics:
  destination: none
logs:
  retention_days: 1
processing:
  processor: lambda:lambda_function.lambda_handler
  options: {{function_name: orders-stream, memory_limit_in_mb: 512, timeout_seconds: 60}}
  import_paths: ["{APP}"]
  batching: {{batch_size: 10}}
  retry: {{max_retry_attempts: 2, base_backoff_millis: 20, max_backoff_millis: 100, bisect_on_error: true}}
  dead_letter: {{type: local, uri: {dead_letters}}}
"""
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def first_failure(invocation: dict[str, Any]) -> int | None:
    """Where the handler's answer says processing resumes: its lowest reported failure, the first
    record if it raised, None if it succeeded."""
    if "raised" in invocation:
        return int(invocation["sequence_numbers"][0])
    return min((int(s) for s in invocation["failures"]), default=None)


def acknowledged(invocations: list[dict[str, Any]]) -> set[int]:
    """The records some invocation's answer acknowledged: those before its first failure."""
    done: set[int] = set()
    for invocation in invocations:
        failed = first_failure(invocation)
        done |= {int(s) for s in invocation["sequence_numbers"] if failed is None or int(s) < failed}
    return done


def acknowledged_orders(output: Path) -> set[str]:
    done = acknowledged(lines(output / "invocations.jsonl"))
    return {line["pk"] for line in lines(output / "processed.jsonl") if int(line["sequence_number"]) in done}


def test_a_powertools_handler_runs_unchanged_with_lambdas_partial_failures(tmp_path: Path) -> None:
    config, output, dead_letters = tmp_path / "config", tmp_path / "output", tmp_path / "dead-letters"
    for directory in (config, output):
        directory.mkdir()
    environ = {
        "PYTHONPATH": str(REPO),
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
        "ORDERS_OUTPUT_DIR": str(output),  # the function's environment variable on Lambda
    }
    with running_emulator(partitions=1, rollover_seconds=3600, seed=37) as emu:
        write_config(config, emu.endpoint, dead_letters)
        create_local_tables(load_settings("lambda", config), emu.client("dynamodb"))
        ddb = emu.client("dynamodb")
        stream_arn = ddb.describe_table(TableName="orders")["Table"]["LatestStreamArn"]
        for n in range(ORDERS):
            item = {"pk": {"S": f"order-{n:02d}"}, "status": {"S": "poison" if n == POISON else "new"}}
            if n in FLAKY:
                item["fail_times"] = {"N": str(FLAKY[n])}
            ddb.put_item(TableName="orders", Item=item)
        with LocalFleet("lambda", config, tmp_path / "logs", environ) as fleet:
            worker = fleet.start_worker()
            deadline = time.monotonic() + 90
            expected = {f"order-{n:02d}" for n in range(ORDERS) if n != POISON}
            while time.monotonic() < deadline:
                # Done when every order was acknowledged (a record processed after a failure in its
                # invocation is delivered again before it counts) and the poison one dead-lettered.
                if acknowledged_orders(output) >= expected and any(dead_letters.rglob("*.json")):
                    break
                assert worker.alive, worker.log_path.read_text()[-3000:]
                time.sleep(0.3)
            fleet.terminate(worker.name)
            worker_log = worker.log_path.read_text(errors="replace")
    invocations = lines(output / "invocations.jsonl")
    processed = lines(output / "processed.jsonl")
    assert {line["pk"] for line in processed} == expected, worker_log[-3000:]
    assert all(line["event"] == "INSERT" for line in processed)
    seq_of = {line["pk"]: int(line["sequence_number"]) for line in processed}

    (letter,) = dead_letters.rglob("*.json")
    document = json.loads(letter.read_text())
    poison = [int(r["dynamodb"]["SequenceNumber"]) for r in document["records"]]
    assert [r["dynamodb"]["NewImage"]["pk"]["S"] for r in document["records"]] == [f"order-{POISON:02d}"]
    assert document["error"]["type"] == "BatchProcessingError"  # Powertools: every record failed

    resumed_after_partial = 0
    for index, invocation in enumerate(invocations):
        given = {int(s) for s in invocation["sequence_numbers"]}
        before = acknowledged(invocations[:index])
        assert not before & given, f"invocation {index} delivered acknowledged records again"
        failed = first_failure(invocation)
        if failed is not None and index + 1 < len(invocations):
            following = int(invocations[index + 1]["sequence_numbers"][0])
            if following != failed:  # only past a record given up on, into the dead letters
                assert failed in poison and following > max(poison), (
                    f"invocation {index + 1} did not resume at {failed}"
                )
            elif "failures" in invocation:
                resumed_after_partial += 1
    done = acknowledged(invocations)
    assert done >= set(seq_of.values()) and not done & set(poison)
    assert resumed_after_partial >= len(FLAKY)  # each flaky order was reported by Powertools at least once
    assert any(len(invocation["sequence_numbers"]) == 10 for invocation in invocations)

    assert {arn for invocation in invocations for arn in invocation["event_source_arns"]} == {stream_arn}
    assert {(i["function_name"], i["memory_limit_in_mb"]) for i in invocations} == {("orders-stream", "512")}
    assert all(0 < i["remaining_millis"] <= 60_000 for i in invocations)
    assert len({i["request_id"] for i in invocations}) == len(invocations)
    # Powertools' Logger read the same context (its JSON lines are in the worker's output).
    assert '"function_name":"orders-stream"' in worker_log.replace(" ", "")
