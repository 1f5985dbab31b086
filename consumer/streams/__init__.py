"""Reading DynamoDB Streams: the stream-source port, its adapter with the fast parser, lineage and shard sync.

- :mod:`consumer.streams.source` — the :class:`StreamSource` port and its value types
- :mod:`consumer.streams.errors` — the one error hierarchy
- :mod:`consumer.streams.dynamodb` — the DynamoDB Streams adapter (botocore, but orjson for GetRecords)
- :mod:`consumer.streams.wire` — GetRecords body → records
- :mod:`consumer.streams.graph` — the shard graph, tolerant of DescribeStream's eventual consistency
- :mod:`consumer.streams.sync` — which leases to create and delete (pure)
"""
