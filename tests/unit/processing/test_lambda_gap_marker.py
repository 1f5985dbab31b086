"""worker.on_trimmed=reload in the Lambda form: the gap's marker event and the re-loaded records as a
Lambda handler receives them."""

from __future__ import annotations

from typing import Any

from consumer.processing.api import Batch
from consumer.processing.gap import GapEvent, reloaded_record
from consumer.processing.lambda_form import Invoker, LambdaBatchHandler, LambdaEnvironment, LambdaFunction
from consumer.records import ShardInfo
from ground.clock import FakeClock

SHARD = ShardInfo("shardId-1")
ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"
GAP = GapEvent(SHARD, "gap", "000000000000000000100", None, 1_700_000_000.0, None, "r1", 1_700_000_500.5)


def handler_seeing(events: list[dict[str, Any]]) -> LambdaBatchHandler:
    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        events.append(event)
        return {"batchItemFailures": []}

    function = LambdaFunction("orders-stream")
    return LambdaBatchHandler(
        Invoker(lambda_handler, function, LambdaEnvironment(lambda: ARN, "/aws/lambda/x", "w"), FakeClock())
    )


def test_the_gap_is_a_marker_event_with_no_records() -> None:
    events: list[dict[str, Any]] = []
    handler_seeing(events)(Batch(SHARD, (), gap=GAP))
    handler_seeing(events)(Batch(SHARD, (), gap=GAP.finished(3)))
    assert [e["Records"] for e in events] == [[], []]
    assert events[0]["gap"] == {
        "phase": "gap",
        "shardId": "shardId-1",
        "lastPosition": "000000000000000000100",
        "firstReadable": None,
        "lostFrom": 1_700_000_000.0,
        "lostUntil": None,
        "reloadId": "r1",
        "reloadStartedAt": 1_700_000_500.5,
        "recordsReloaded": 0,
    }
    assert events[1]["gap"]["phase"] == "reloaded" and events[1]["gap"]["recordsReloaded"] == 3


def test_reloaded_records_reach_the_handler_marked_as_modifies_with_the_new_image_only() -> None:
    events: list[dict[str, Any]] = []
    item = {"pk": {"S": "a"}, "n": {"N": "7"}}
    record = reloaded_record(item, key_names=("pk",), number=1, gap=GAP, region="us-east-1")
    handler_seeing(events)(Batch(SHARD, (record,), reload=GAP))
    (sent,) = events[0]["Records"]
    assert sent["eventName"] == "MODIFY" and sent["reloaded"] is True and sent["reloadId"] == "r1"
    assert sent["dynamodb"]["NewImage"] == item and "OldImage" not in sent["dynamodb"]
    assert sent["dynamodb"]["Keys"] == {"pk": {"S": "a"}}
    assert sent["dynamodb"]["ApproximateCreationDateTime"] == 1_700_000_500.0  # whole seconds, as Lambda
    assert sent["eventSourceARN"] == ARN and "gap" not in events[0]
