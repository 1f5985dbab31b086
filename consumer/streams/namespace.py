"""Several streams behind one stream port: lease keys namespaced per stream.

The keys' form is :mod:`consumer.lease_keys`'s.

:class:`NamespacedStream` shows one stream with namespaced shard ids (parents included), so the
shard graph, the sync plan and the lease taker all work on the union of the streams as if it were
one stream: one sync leader lists every stream (on the process's one DescribeStream budget), and
one taker balances every lease of every stream across the workers. :class:`StreamSet` routes each
namespaced shard id back to its stream.
"""

from __future__ import annotations

from collections.abc import Sequence

from consumer.lease_keys import split_lease_key, stream_prefix
from consumer.streams.errors import ShardNotFoundError
from consumer.streams.kinesis_reader import KinesisShardReader
from consumer.streams.reader import ShardReader
from consumer.streams.source import GetRecordsResult, Shard


class NamespacedStream:
    """One stream whose shard ids are shown (and taken) with its namespace in front: a table's
    stream's (:func:`~consumer.lease_keys.stream_prefix`), or a Kinesis data stream's, whose
    ``prefix`` is the Java KCL's stream identifier and a colon."""

    def __init__(
        self, reader: ShardReader | KinesisShardReader, table_name: str, *, prefix: str | None = None
    ) -> None:
        self.reader = reader
        self.table_name = table_name  # a Kinesis stream's name
        self.prefix = prefix if prefix is not None else stream_prefix(reader.stream_arn)

    def key(self, shard_id: str) -> str:
        return f"{self.prefix}{shard_id}"

    def _shown(self, shard: Shard) -> Shard:
        parent, adjacent = shard.parent_shard_id, shard.adjacent_parent_shard_id
        return Shard(
            self.key(shard.shard_id),
            self.key(parent) if parent else None,
            shard.starting_sequence_number,
            shard.ending_sequence_number,
            self.key(adjacent) if adjacent else None,
        )

    def list_shards(self) -> tuple[Shard, ...]:
        return tuple(self._shown(s) for s in self.reader.list_shards())

    def list_children(self, shard_id: str) -> tuple[Shard, ...]:
        return tuple(self._shown(s) for s in self.reader.list_children(shard_id))


class StreamSet:
    """Every configured stream as one :class:`~consumer.runtime.assembly.StreamPort` over
    namespaced shard ids: listings are concatenated (each stream's DescribeStream calls paced by
    the one pacer their source shares), reads and child lookups go to the stream a key names."""

    def __init__(self, streams: Sequence[NamespacedStream]) -> None:
        self.streams = tuple(streams)
        self._by_prefix = {s.prefix: s for s in self.streams}
        if len(self._by_prefix) != len(self.streams):
            raise ValueError("two configured streams have the same namespace: is a table listed twice?")

    def route(self, lease_key: str) -> tuple[NamespacedStream, str]:
        """The stream a namespaced key belongs to and the shard id within it. A key of no
        configured stream (a stream dropped from ``streams:``, or the old stream of a re-created
        table) raises ShardNotFoundError: the shard is not in any stream this worker reads."""
        namespace, shard_id = split_lease_key(lease_key)
        stream = self._by_prefix.get(namespace)
        if stream is None:
            raise ShardNotFoundError(
                f"lease {lease_key!r} belongs to no stream in streams: (namespaces: "
                f"{', '.join(sorted(self._by_prefix))})"
            )
        return stream, shard_id

    def list_shards(self) -> tuple[Shard, ...]:
        return tuple(shard for stream in self.streams for shard in stream.list_shards())

    def list_children(self, shard_id: str) -> tuple[Shard, ...]:
        stream, own = self.route(shard_id)
        return stream.list_children(own)

    def iterator_at(self, shard_id: str, position: str) -> str:
        stream, own = self.route(shard_id)
        return stream.reader.iterator_at(own, position)

    def fetch(self, shard_id: str, iterator: str, limit: int) -> GetRecordsResult:
        stream, own = self.route(shard_id)
        return stream.reader.fetch(own, iterator, limit)

    def most_records_per_read(self, shard_id: str) -> int:
        """The shard's own stream's maximum (a table's stream's shards and a Kinesis stream's differ).
        A key of no configured stream is never read (:meth:`route` refuses its iterator): the
        smallest of the streams' maximums."""
        namespace, own = split_lease_key(shard_id)
        stream = self._by_prefix.get(namespace)
        if stream is None:
            return min(s.reader.most_records_per_read(own) for s in self.streams)
        return stream.reader.most_records_per_read(own)
