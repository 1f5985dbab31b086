"""A local stand-in for AWS with real DynamoDB Streams lineage.

moto serves DynamoDB, S3, CloudWatch, CloudWatch Logs and SQS; this package intercepts the
``dynamodbstreams`` service and serves it from :class:`emulator.engine.StreamEngine`, which has
what moto's single never-closing shard lacks: partitions, rollovers, splits, trimming, iterator
expiry, paging, eventual consistency, throttling and injected faults. ``kinesis`` is served from
:class:`emulator.kinesis_engine.KinesisEngine`: hash-key ranges, splits, merges, shard-count
updates, Kinesis' per-shard limits and retention. See docs/emulator.md.
"""
