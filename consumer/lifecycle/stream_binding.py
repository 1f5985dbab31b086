"""Bind the DynamoDB Streams adapter (``consumer.streams``) to the lifecycle's reader port.

The adapter keeps botocore for signing, retries and endpoints but parses GetRecords bodies itself
(the fast path); this module only translates positions, results and errors between the two
vocabularies, so neither package depends on the other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from consumer.lifecycle.ports import (
    DataTrimmedError,
    Fetched,
    IteratorExpiredError,
    ReadThrottledError,
    ShardGoneError,
    StreamGoneError,
)
from consumer.streams import errors as source_errors
from consumer.streams.source import Position, Shard, StreamSource


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except source_errors.ExpiredIteratorError as exc:
        raise IteratorExpiredError(str(exc)) from exc
    except source_errors.InvalidStreamRequestError as exc:
        # An iterator the service no longer accepts: get a new one from the last position.
        raise IteratorExpiredError(str(exc)) from exc
    except source_errors.TrimmedDataError as exc:
        raise DataTrimmedError(str(exc)) from exc
    except source_errors.ShardNotFoundError as exc:
        raise ShardGoneError(str(exc)) from exc
    except (
        source_errors.StreamNotFoundError,
        source_errors.StreamGoneError,
        source_errors.AccessDeniedError,
    ) as exc:
        raise StreamGoneError(str(exc)) from exc
    except source_errors.StreamSourceError as exc:  # throttling, 5xx, a malformed response: retry
        raise ReadThrottledError(str(exc)) from exc


class SourceReader:
    """The lifecycle's :class:`~consumer.lifecycle.ports.StreamReader` and shard lister for one stream."""

    def __init__(self, source: StreamSource, stream_arn: str) -> None:
        self._source = source
        self.stream_arn = stream_arn

    def iterator_at(self, shard_id: str, position: str) -> str:
        with _translated():
            return self._source.get_iterator(self.stream_arn, shard_id, Position.from_checkpoint(position))

    def fetch(self, shard_id: str, iterator: str, limit: int) -> Fetched:
        with _translated():
            result = self._source.get_records(iterator, limit, shard_id)
        return Fetched(result.records, result.next_iterator, result.millis_behind_latest)

    def list_shards(self) -> tuple[Shard, ...]:
        """Every shard of the stream, paged to the end (what shard sync plans over)."""
        return self._source.list_shards(self.stream_arn)

    def list_children(self, shard_id: str) -> tuple[Shard, ...]:
        """The children of one shard (DescribeStream's CHILD_SHARDS filter: one call, not a listing)."""
        return self._source.child_shards(self.stream_arn, shard_id)
