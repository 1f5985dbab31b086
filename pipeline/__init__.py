"""The Spark data pipeline: the change log the fleet lands → current state, statistics, verification.

No Spark source for DynamoDB Streams exists, so the fleet's ``changelog`` sink lands every change as
gzip JSON Lines and these jobs turn that log into what downstream users query. Transforms
(:mod:`pipeline.parse`, :mod:`pipeline.snapshot`, :mod:`pipeline.patch`, :mod:`pipeline.stats`,
:mod:`pipeline.compare`) are pure ``DataFrame → DataFrame`` functions with explicit schemas
(:mod:`pipeline.schemas`); the jobs read and write (:mod:`pipeline.snapshot_run` and its two modes,
:mod:`pipeline.bootstrap_run`, :mod:`pipeline.reports`, :mod:`pipeline.follow`,
:mod:`pipeline.maintenance`), and :mod:`pipeline.jobs` is their command line.
"""
