"""The worker, metrics and logs settings of the end-to-end tests' environments (YAML for an
environment file): timers compressed so that failover, rollovers and splits happen within seconds,
every record from the oldest, metrics flushed each second to the log group."""

FAST_FLEET_YAML = """\
worker:
  failover_time_millis: 3000
  max_clock_skew_millis: 100
  idle_time_between_reads_millis: 100
  parent_shard_poll_interval_millis: 200
  shard_sync_interval_millis: 2000
  initial_position: TRIM_HORIZON
  task_backoff_time_millis: 100
metrics:
  destination: logs
  flush_interval_seconds: 1
logs:
  retention_days: 1"""
