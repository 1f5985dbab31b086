"""One stream, bound: what the lifecycle reads shards through.

:class:`StreamSource` speaks for any stream (every call names its ARN and takes a
:class:`~consumer.streams.source.Position`); the lifecycle reads one stream and keeps its positions
as checkpoint text (digits or a sentinel). :class:`ShardReader` binds the ARN (and the stream's
``processing.convert_images``) and turns checkpoint text into positions — nothing else: results
and errors pass through as the source produced them (:mod:`consumer.streams.errors` is the one
vocabulary for read errors).
"""

from __future__ import annotations

from consumer.streams.dynamodb import MAX_LIMIT
from consumer.streams.source import GetRecordsResult, Position, Shard, StreamSource


class ShardReader:
    """The lifecycle's :class:`~consumer.lifecycle.ports.StreamReader` and shard lister for one stream."""

    def __init__(self, source: StreamSource, stream_arn: str, *, convert_images: bool = False) -> None:
        self._source = source
        self.stream_arn = stream_arn
        self.convert_images = convert_images  # processing.convert_images: on_fetch

    def iterator_at(self, shard_id: str, position: str) -> str:
        """An iterator at TRIM_HORIZON, LATEST, or just after a sequence number (digits)."""
        return self._source.get_iterator(self.stream_arn, shard_id, Position.from_checkpoint(position))

    def fetch(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        if self.convert_images:
            return self._source.get_records(iterator, limit, shard_id, convert_images=True)
        return self._source.get_records(iterator, limit, shard_id)

    def most_records_per_read(self, shard_id: str) -> int:
        """DynamoDB Streams' GetRecords maximum, whatever the shard."""
        return MAX_LIMIT

    def list_shards(self) -> tuple[Shard, ...]:
        """Every shard of the stream, paged to the end (what shard sync plans over)."""
        return self._source.list_shards(self.stream_arn)

    def list_children(self, shard_id: str) -> tuple[Shard, ...]:
        """The children of one shard (DescribeStream's CHILD_SHARDS filter: one call, not a listing)."""
        return self._source.child_shards(self.stream_arn, shard_id)
