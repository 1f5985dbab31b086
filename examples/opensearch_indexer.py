"""Example function-form processor: keep an OpenSearch (or Elasticsearch) index in step with a table.

Seed 001's job: every INSERT/MODIFY indexes the new image under an id made from the item's keys,
every REMOVE deletes that id, all in one ``_bulk`` request per batch. Failures are sorted the way
the failure policy expects:

* a document the cluster will never accept (HTTP 400: mapping conflict, bad field) is raised as a
  :class:`NonRetryableError` once it is alone in its batch, so it goes to the dead letter with the
  cluster's reason — with ``bisect_on_error`` the policy isolates it first;
* anything else (429 throttling, 5xx, the cluster unreachable) is reported as a partial failure
  from the first failed record, which the policy retries with back-off; a delete of a missing
  document (404) counts as done.

Use it with::

    processing:
      processor: examples.opensearch_indexer:OpenSearchIndexer
      options: {hosts: ["https://search-domain:443"], index: orders}
      retry: {max_retry_attempts: 10, bisect_on_error: true}
      dead_letter: {type: s3, uri: s3://bucket/opensearch-dead-letter}
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from opensearchpy import OpenSearch

from consumer.processing import Batch, BatchResult, NonRetryableError
from consumer.records import StreamRecord


def to_json_value(value: Any) -> Any:
    """DynamoDB's Python values (Decimal, bytes, sets) as JSON a search engine can index."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, (set, frozenset)):
        return sorted((to_json_value(v) for v in value), key=str)
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json_value(v) for v in value]
    return value


def document_id(keys: Mapping[str, Any]) -> str:
    """Stable id from the key attributes (sorted by name, so hash and range key order never matter)."""
    return "|".join(str(to_json_value(keys[name])) for name in sorted(keys))


class OpenSearchIndexer:
    def __init__(
        self,
        hosts: Sequence[str] | None = None,
        index: str = "items",
        *,
        client: OpenSearch | None = None,
        timeout_seconds: float = 30.0,
    ) -> None:
        if client is None and not hosts:
            raise ValueError(
                "OpenSearchIndexer needs options.hosts (e.g. ['https://domain:443']) or a client"
            )
        self.index = index
        self.client = client or OpenSearch(hosts=list(hosts or ()), timeout=timeout_seconds)

    def actions(self, records: Sequence[StreamRecord]) -> list[dict[str, Any]]:
        body: list[dict[str, Any]] = []
        for record in records:
            target = {"_index": self.index, "_id": document_id(record.keys)}
            if record.event_name == "REMOVE":
                body.append({"delete": target})
            else:
                body.append({"index": target})
                body.append(to_json_value(record.new_image or {}))
        return body

    def handle(self, batch: Batch) -> BatchResult | None:
        if not batch.records:
            return None
        answer = self.client.bulk(body=self.actions(batch.records))
        if not answer.get("errors"):
            return None
        for record, item in zip(batch.records, answer["items"], strict=True):
            ((operation, outcome),) = item.items()
            status = int(outcome.get("status", 500))
            if status < 300 or (operation == "delete" and status == 404):
                continue
            reason = str(outcome.get("error", {}))
            if 400 <= status < 500 and status != 429:
                if len(batch.records) == 1:
                    raise NonRetryableError(
                        f"{self.index}/{document_id(record.keys)} rejected ({status}): {reason}"
                    )
                error = f"rejected ({status}): {reason}"
            else:
                error = f"failed ({status}), will retry: {reason}"
            return BatchResult.failed(record, error=error)
        return None
