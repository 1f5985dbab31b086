"""The Lambda form: an AWS Lambda handler's event, context and response, read as Lambda reads them,
under the product's failure policy and windows; its settings checked at start-up."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from consumer.processing import (
    InMemoryCheckpointer,
    ProcessingConfigError,
    ProcessRecordsInput,
    ShardEndedInput,
)
from consumer.processing.api import Batch
from consumer.processing.dead_letter import LocalDeadLetter
from consumer.processing.factory import function_processor, windowed_processor
from consumer.processing.lambda_event import LambdaContext
from consumer.processing.lambda_form import (
    Invoker,
    LambdaBatchHandler,
    LambdaEnvironment,
    LambdaFunction,
    LambdaResponseError,
    LambdaTimeoutError,
    LambdaWindowedHandler,
    handler_path,
)
from consumer.processing.retry import RetryPolicy
from consumer.processing.windows import Window, WindowedBatch
from consumer.records import ShardInfo, StreamRecord, WireRecord
from consumer.runtime.processors import build_processor_factory
from ground.clock import FakeClock
from tests.unit.processing import lambda_handlers
from tests.unit.processing.helpers import SHARD, record, records
from tests.unit.processing.test_factory import make_settings

ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"
ENVIRONMENT = LambdaEnvironment(lambda: ARN, "/orders-consumer/application", "worker-1")
INFO = ShardInfo(SHARD)
MODULE = "tests.unit.processing.lambda_handlers"


def invoker(handler: Any, clock: FakeClock | None = None, **options: Any) -> Invoker:
    function = LambdaFunction.from_options(options, "orders-consumer")
    return Invoker(handler, function, ENVIRONMENT, clock or FakeClock())


def answering(response: Any) -> Any:
    def handler(event: dict[str, Any], context: LambdaContext) -> Any:
        return response

    return handler


def batch(*recs: StreamRecord) -> Batch:
    return Batch(INFO, recs)


def test_each_invocation_gets_its_own_event_and_a_context_with_the_function_settings() -> None:
    clock = FakeClock()
    seen: list[tuple[dict[str, Any], LambdaContext, int]] = []
    keys: list[str] = []

    def handler(event: dict[str, Any], context: LambdaContext) -> None:
        clock.advance(1500)
        seen.append((event, context, context.get_remaining_time_in_millis()))
        keys.append(event["Records"][0]["dynamodb"]["Keys"]["pk"]["S"])
        event["Records"][0]["dynamodb"]["Keys"]["pk"]["S"] = "changed by the handler"

    held = WireRecord.from_parsed(dict(record(1).raw), SHARD)
    adapter = LambdaBatchHandler(
        invoker(handler, clock, function_name="orders-audit", memory_limit_in_mb=512, timeout_seconds=60)
    )
    adapter(batch(held))
    adapter(batch(held))
    (first, context, remaining), (_, other, _) = seen
    assert first["Records"][0]["eventSourceARN"] == ARN
    assert keys == ["item-1", "item-1"]  # a fresh event each time
    assert held.keys == {"pk": "item-1"}
    assert context.aws_request_id != other.aws_request_id
    assert (context.function_name, context.function_version) == ("orders-audit", "$LATEST")
    assert context.invoked_function_arn == "arn:aws:lambda:eu-west-1:123456789012:function:orders-audit"
    assert context.memory_limit_in_mb == "512"  # the runtime reads it from an environment variable
    assert (context.log_group_name, context.log_stream_name) == ("/orders-consumer/application", "worker-1")
    assert context.identity.cognito_identity_id is None and context.client_context is None
    assert remaining == 58_500
    clock.advance(120_000)
    assert context.get_remaining_time_in_millis() == 0


@pytest.mark.parametrize(
    "response",
    [None, "Successfully processed 3 records.", {}, {"batchItemFailures": None}, {"batchItemFailures": []}],
    ids=["null", "not-an-object", "empty", "null-list", "empty-list"],
)
def test_lambdas_complete_successes(response: Any) -> None:
    assert LambdaBatchHandler(invoker(answering(response)))(batch(*records(1, 3))) is None


@pytest.mark.parametrize(
    ("failures", "message"),
    [
        ([{"itemIdentifier": ""}], "missing, null or empty"),
        ([{"itemIdentifier": None}], "missing, null or empty"),
        ([{"itemidentifier": "000000000000000000002"}], "missing, null or empty"),
        (["000000000000000000002"], "missing, null or empty"),
        ({"itemIdentifier": "000000000000000000002"}, "not a list"),
        ([{"itemIdentifier": "999"}], "no SequenceNumber of this batch"),
    ],
    ids=["empty-string", "null", "bad-key-name", "not-an-item", "not-a-list", "not-in-the-batch"],
)
def test_lambdas_complete_failures(failures: Any, message: str) -> None:
    adapter = LambdaBatchHandler(invoker(answering({"batchItemFailures": failures})))
    with pytest.raises(LambdaResponseError, match=message):
        adapter(batch(*records(1, 3)))


def test_a_partial_failure_checkpoints_before_the_lowest_and_resumes_there() -> None:
    calls: list[list[int]] = []

    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        numbers = [r["dynamodb"]["SequenceNumber"] for r in event["Records"]]
        calls.append([int(n) for n in numbers])
        failed = [n for n in numbers if int(n) in (4, 6)] if len(calls) == 1 else []
        return {"batchItemFailures": [{"itemIdentifier": n} for n in reversed(failed)]}

    checkpointer = InMemoryCheckpointer(SHARD)
    processor = function_processor(
        LambdaBatchHandler(invoker(handler)), clock=FakeClock(), policy=RetryPolicy(bisect_on_error=False)
    )
    delivered = records(1, 8)
    checkpointer.delivered(delivered[-1].sequence_number)
    processor.process_records(ProcessRecordsInput(delivered, checkpointer, 0, INFO))
    assert calls == [[1, 2, 3, 4, 5, 6, 7, 8], [4, 5, 6, 7, 8]]
    assert checkpointer.last_checkpoint == delivered[-1].sequence_number


def test_without_report_batch_item_failures_only_an_error_fails_the_batch() -> None:
    response = {"batchItemFailures": [{"itemIdentifier": ""}]}
    adapter = LambdaBatchHandler(invoker(answering(response), report_batch_item_failures=False))
    assert adapter(batch(*records(1, 2))) is None


def test_an_exception_fails_the_whole_batch_and_a_poison_record_is_dead_lettered(tmp_path: Path) -> None:
    def handler(event: dict[str, Any], context: LambdaContext) -> None:
        if any(r["dynamodb"]["SequenceNumber"].endswith("5") for r in event["Records"]):
            raise RuntimeError("record 5 cannot be taken")

    checkpointer = InMemoryCheckpointer(SHARD)
    processor = function_processor(
        LambdaBatchHandler(invoker(handler)),
        clock=FakeClock(),
        policy=RetryPolicy(max_retry_attempts=1, base_backoff_millis=1),
        dead_letter=LocalDeadLetter(tmp_path),
    )
    delivered = records(1, 8)
    checkpointer.delivered(delivered[-1].sequence_number)
    processor.process_records(ProcessRecordsInput(delivered, checkpointer, 0, INFO))
    (letter,) = (tmp_path / SHARD).iterdir()
    document = orjson.loads(letter.read_bytes())
    assert [r["dynamodb"]["SequenceNumber"] for r in document["records"]] == ["000000000000000000005"]
    assert document["error"]["type"] == "RuntimeError"
    assert checkpointer.last_checkpoint == delivered[-1].sequence_number


def test_an_invocation_past_its_timeout_failed_whatever_it_returned() -> None:
    clock = FakeClock()

    def slow(event: dict[str, Any], context: LambdaContext) -> None:
        clock.advance(3001)

    with pytest.raises(LambdaTimeoutError, match=r"Task timed out after 3.00 seconds"):
        LambdaBatchHandler(invoker(slow, clock, timeout_seconds=3))(batch(record(1)))


def test_the_response_is_marshalled_as_the_python_runtime_does() -> None:
    response = {"batchItemFailures": [], "total": Decimal("12.50"), "count": Decimal("3")}
    assert invoker(answering(response)).invoke({}, ARN) == {
        "batchItemFailures": [],
        "total": 12.5,
        "count": 3,
    }
    with pytest.raises(LambdaResponseError, match="Runtime.MarshalError"):
        invoker(answering({"at": object()})).invoke({}, ARN)
    failures = b'{"batchItemFailures": [{"itemIdentifier": "000000000000000000002"}]}'
    result = LambdaBatchHandler(invoker(answering(failures)))(batch(*records(1, 3)))
    assert result is not None and result.failed_sequence_numbers == ("000000000000000000002",)


@pytest.mark.parametrize(("thread_safe", "at_once"), [(False, 1), (True, 2)])
def test_invocations_take_turns_unless_the_function_is_thread_safe(thread_safe: bool, at_once: int) -> None:
    inside, most = 0, 0
    both_started = threading.Barrier(2)
    lock = threading.Lock()

    def handler(event: dict[str, Any], context: LambdaContext) -> None:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.05)
        with lock:
            inside -= 1

    shared = invoker(handler, thread_safe=thread_safe)

    def call() -> None:
        both_started.wait()
        shared.invoke({}, ARN)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == at_once


def windowed(handler: Any, seconds: int = 10) -> Any:
    return windowed_processor(LambdaWindowedHandler(invoker(handler)), seconds=seconds, clock=FakeClock())


def test_a_tumbling_window_gets_lambdas_fields_and_keeps_the_returned_state() -> None:
    events: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        events.append(event)
        state = dict(event["state"])
        state["n"] = state.get("n", 0) + len(event["Records"])
        return {"state": state, "batchItemFailures": []}

    processor = windowed(handler)
    checkpointer = InMemoryCheckpointer(SHARD)
    first = tuple(record(s, created=1_700_000_000.0 + s) for s in (1, 2, 3))
    later = (record(4, created=1_700_000_011.0),)
    for chunk in (first, later):
        checkpointer.delivered(chunk[-1].sequence_number)
        processor.process_records(ProcessRecordsInput(chunk, checkpointer, 0, INFO))
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(INFO, checkpointer))
    shapes = [
        (len(e["Records"]), e["state"], e["isFinalInvokeForWindow"], e["window"]["start"]) for e in events
    ]
    assert shapes == [
        (3, {}, False, "2023-11-14T22:13:20Z"),
        (0, {"n": 3}, True, "2023-11-14T22:13:20Z"),
        (1, {}, False, "2023-11-14T22:13:30Z"),
        (0, {"n": 1}, True, "2023-11-14T22:13:30Z"),
    ]
    assert events[0]["window"]["end"] == "2023-11-14T22:13:30Z"
    assert {e["shardId"] for e in events} == {SHARD} and {e["eventSourceARN"] for e in events} == {ARN}
    assert not any(e["isWindowTerminatedEarly"] for e in events)


@pytest.mark.parametrize(
    ("response", "message"),
    [
        ({"batchItemFailures": []}, "must hold the new state"),
        ({"state": ["not", "an", "object"]}, "not a JSON object"),
        ({"state": {}, "batchItemFailures": [{"itemIdentifier": "000000000000000000001"}]}, "whole batch"),
    ],
)
def test_a_windowed_response_lambda_would_fail_fails_the_batch(response: Any, message: str) -> None:
    with pytest.raises(LambdaResponseError, match=message):
        LambdaWindowedHandler(invoker(answering(response)))(
            WindowedBatch(INFO, (record(1),), {}, Window(0.0, 10.0))
        )


def test_a_final_invocation_that_names_failures_fails_too() -> None:
    response = {"state": {}, "batchItemFailures": [{"itemIdentifier": "000000000000000000001"}]}
    with pytest.raises(LambdaResponseError, match=r"no SequenceNumber of this batch \(no records\)"):
        LambdaWindowedHandler(invoker(answering(response)))(
            WindowedBatch(INFO, (), {"n": 1}, Window(0.0, 10.0, is_final=True))
        )


def test_a_powertools_handler_runs_from_the_settings(tmp_path: Path) -> None:
    lambda_handlers.SEEN.clear()
    lambda_handlers.REFUSED.clear()
    lambda_handlers.REFUSED.add("item-3")
    settings = make_settings(
        processor=f"lambda:{MODULE}.lambda_handler",
        retry={"max_retry_attempts": 1, "base_backoff_millis": 1},
        dead_letter={"type": "local", "uri": str(tmp_path)},
    )
    factory = build_processor_factory(settings, clock=FakeClock(), stream_arn=lambda: ARN, worker_id="w-1")
    processor = factory(INFO)
    checkpointer = InMemoryCheckpointer(SHARD)
    delivered = tuple(record(s, key=f"item-{s}") for s in range(1, 6))
    checkpointer.delivered(delivered[-1].sequence_number)
    processor.process_records(ProcessRecordsInput(delivered, checkpointer, 0, INFO))
    # Powertools processes every record and reports item-3; processing resumes there: 3 fails alone
    # (bisected), is dead-lettered after its retry, and 4 and 5 are delivered again.
    assert [int(s) for s in lambda_handlers.SEEN] == [1, 2, 4, 5, 4, 5]
    (letter,) = (tmp_path / SHARD).iterdir()
    document = orjson.loads(letter.read_bytes())
    assert [r["dynamodb"]["SequenceNumber"] for r in document["records"]] == [delivered[2].sequence_number]
    assert document["error"]["type"] == "BatchProcessingError"
    assert checkpointer.last_checkpoint == delivered[-1].sequence_number


@pytest.mark.parametrize(
    ("processing", "message"),
    [
        ({"processor": f"lambda:{MODULE}.one_argument"}, "calls handler\\(event, context\\)"),
        ({"processor": f"lambda:{MODULE}:NotAFunction"}, "is not a function"),
        ({"processor": "lambda:no_such_app.handler"}, "module no_such_app does not import"),
        ({"processor": f"lambda:{MODULE}.lambda_handler", "options": {"timeout": 3}}, "unknown timeout"),
        (
            {"processor": f"lambda:{MODULE}.lambda_handler", "options": {"timeout_seconds": 0}},
            "seconds above 0",
        ),
        (
            {"processor": f"lambda:{MODULE}.lambda_handler", "options": {"memory_limit_in_mb": "1GB"}},
            "128-10240",
        ),
        ({"processor": f"lambda:{MODULE}.lambda_handler", "parallelization_factor": 4}, "thread_safe: true"),
    ],
)
def test_lambda_form_settings_that_cannot_work_fail_at_start_up(
    processing: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProcessingConfigError, match=message):
        build_processor_factory(make_settings(**processing))


def test_the_handler_is_named_as_lambda_names_it_or_as_this_product_does() -> None:
    assert handler_path("lambda:app.lambda_handler") == "app:lambda_handler"
    assert handler_path("lambda:orders.stream.app.lambda_handler") == "orders.stream.app:lambda_handler"
    assert handler_path("lambda:orders.app:lambda_handler") == "orders.app:lambda_handler"
