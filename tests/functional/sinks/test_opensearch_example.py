"""The OpenSearch example processor against a small _bulk stand-in on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch

from consumer.processing import InMemoryCheckpointer, ProcessRecordsInput, function_processor
from consumer.processing.dead_letter import LocalDeadLetter
from consumer.processing.retry import RetryPolicy
from consumer.records import ShardInfo, StreamRecord
from examples.opensearch_indexer import OpenSearchIndexer, document_id
from ground.clock import FakeClock

SHARD = ShardInfo("shardId-0007")


class StandIn:
    """Just enough of the _bulk API: index/delete, 400 for a document with a 'bad' field,
    and 429 for the first ``throttle`` requests."""

    def __init__(self, throttle: int = 0) -> None:
        self.indices: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self.throttle = throttle

    def bulk(self, lines: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests += 1
        items, errors, index = [], False, 0
        while index < len(lines):
            ((operation, target),) = lines[index].items()
            docs = self.indices.setdefault(target["_index"], {})
            if self.requests <= self.throttle:
                status, error = 429, {"type": "es_rejected_execution_exception"}
            elif operation == "delete":
                status, error = (200, None) if docs.pop(target["_id"], None) is not None else (404, None)
            else:
                source = lines[index + 1]
                if "bad" in source:
                    status, error = 400, {"type": "mapper_parsing_exception", "reason": "field [bad]"}
                else:
                    docs[target["_id"]], status, error = source, 201, None
            index += 1 if operation == "delete" else 2
            outcome: dict[str, Any] = {"_index": target["_index"], "_id": target["_id"], "status": status}
            if error:
                outcome["error"], errors = error, errors or status != 404
            items.append({operation: outcome})
        return {"took": 1, "errors": errors, "items": items}


@pytest.fixture
def stand_in() -> Iterator[tuple[StandIn, str]]:
    state = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            text = self.rfile.read(length).decode()
            lines = [json.loads(line) for line in text.splitlines() if line.strip()]
            payload = json.dumps(state.bulk(lines)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def change(seq: int, key: str, event: str = "INSERT", **image: Any) -> StreamRecord:
    keys = {"pk": {"S": key}, "sk": {"N": "1"}}
    body: dict[str, Any] = {"Keys": keys, "SequenceNumber": str(seq).zfill(21)}
    if event != "REMOVE":
        body["NewImage"] = {**keys, **{k: {"N": str(v)} for k, v in image.items()}, "tags": {"SS": ["x"]}}
    return StreamRecord({"eventID": str(seq), "eventName": event, "dynamodb": body}, SHARD.shard_id)


def test_indexes_deletes_and_dead_letters_the_document_the_cluster_refuses(
    stand_in: tuple[StandIn, str], tmp_path: Path
) -> None:
    state, url = stand_in
    state.throttle = 1  # the first bulk request is throttled: retried, not lost
    indexer = OpenSearchIndexer(index="orders", client=OpenSearch(hosts=[url], timeout=5))
    dead = LocalDeadLetter(tmp_path)
    processor = function_processor(
        indexer.handle,
        clock=FakeClock(),
        policy=RetryPolicy(base_backoff_millis=5, max_backoff_millis=10),
        dead_letter=dead,
    )
    batch = (
        change(1, "a", price=10),
        change(2, "b", price=20),
        change(3, "c", bad=1),
        change(4, "a", "MODIFY", price=11),
        change(5, "b", "REMOVE"),
        change(6, "z", "REMOVE"),  # never indexed: a 404 counts as done
    )
    checkpointer = InMemoryCheckpointer(SHARD.shard_id)
    checkpointer.delivered(batch[-1].sequence_number)
    processor.process_records(ProcessRecordsInput(batch, checkpointer, 0, SHARD))
    assert state.indices["orders"] == {"a|1": {"pk": "a", "sk": 1, "price": 11, "tags": ["x"]}}
    (document,) = dead.read_all()
    assert document["error"]["type"] == "NonRetryableError"
    assert "mapper_parsing_exception" in document["error"]["message"]
    assert [r["eventID"] for r in document["records"]] == ["3"]
    assert checkpointer.last_checkpoint == batch[-1].sequence_number


def test_document_ids_come_from_the_keys() -> None:
    assert document_id({"sk": 2, "pk": "x"}) == "x|2"
    with pytest.raises(ValueError, match="options.hosts"):
        OpenSearchIndexer()
