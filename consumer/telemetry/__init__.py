"""Observability: EMF metrics and the two CloudWatch log groups (the dashboard is drawn by tools.dashboard).

* ``metrics.MetricsRecorder`` - thread-safe aggregation, flushed as EMF on a timer.
* ``transports`` / ``shipper`` - where the documents go, without ever blocking the worker.
* ``logs.configure_logging`` - JSON logs to the lease-worker and application log groups.
* ``context`` - worker id and shard id attached to every log line.
* ``catalogue`` - the meaningful log messages (LEASE_LOST, refused checkpoint, ...).
* ``metric_names`` - every metric's name, unit, level and aggregation.
"""
