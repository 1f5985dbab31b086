"""The emulator's GetRecords bodies have the service's form: compact JSON with text as UTF-8, so a
worker against the emulator takes the path it takes against DynamoDB Streams (the body cut into
its records, each decoded alone: consumer/streams/wire.py), not the whole-body parse a spaced body
falls back to. Before, every end-to-end run exercised only that fallback."""

from __future__ import annotations

from typing import Any

from consumer.records.stream_record import WireRecord
from consumer.streams.wire import read_compact
from emulator.testing import RunningEmulator
from tests.emulator.conftest import all_shards, make_table


def test_get_records_bodies_are_compact_utf8_and_take_the_workers_cut(emulator: RunningEmulator) -> None:
    name, arn = make_table(emulator)
    table = emulator.client("dynamodb")
    texts = ["plain", "café ☕", "東京", "emoji 🙂"]
    for index, text in enumerate(texts):
        table.put_item(TableName=name, Item={"pk": {"S": f"k{index}"}, "text": {"S": text}})
    table.update_item(
        TableName=name,
        Key={"pk": {"S": "k1"}},
        UpdateExpression="SET n = :n",
        ExpressionAttributeValues={":n": {"N": "1.50"}},
    )
    streams = emulator.client("dynamodbstreams")
    bodies: list[bytes] = []

    def keep(http_response: Any, **_: Any) -> None:
        bodies.append(http_response.content)

    streams.meta.events.register("after-call.dynamodbstreams.GetRecords", keep)
    parsed: list[dict[str, Any]] = []
    for shard in all_shards(streams, arn):
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        parsed.extend(streams.get_records(ShardIterator=iterator)["Records"])
    assert len(parsed) == len(texts) + 1

    held: list[Any] = []
    for body in [b for b in bodies if b'"Records":[{' in b]:
        assert b'": ' not in body and b', "' not in body  # compact
        assert b"\\u" not in body  # text as UTF-8, as the service sends it
        compact = read_compact(body, "shard", convert_images=False)
        assert compact is not None, body[:200]
        held.extend(compact[0])
    assert len(held) == len(parsed)
    assert all(type(record) is WireRecord for record in held)
    images = {r.new_image["pk"]: r.new_image for r in held if r.new_image is not None}
    assert {images[f"k{i}"]["text"] for i in range(len(texts))} == set(texts)
    assert str(images["k1"]["n"]) == "1.50"
