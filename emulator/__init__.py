"""A local stand-in for AWS with real DynamoDB Streams lineage.

moto serves DynamoDB, S3, CloudWatch, CloudWatch Logs and SQS; this package intercepts the
``dynamodbstreams`` service and serves it from :class:`emulator.engine.StreamEngine`, which has
what moto's single never-closing shard lacks: partitions, rollovers, splits, trimming, iterator
expiry, paging, eventual consistency, throttling and injected faults. See docs/emulator.md.
"""
