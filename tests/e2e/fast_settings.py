"""The worker settings of the end-to-end tests' environments (YAML for an environment file):
timers compressed so that failover, rollovers and splits happen within seconds, every record from
the oldest; and their telemetry, metrics flushed each second to the log group the tests read."""

FAST_WORKER_YAML = """\
worker:
  failover_time_millis: 3000
  max_clock_skew_millis: 100
  idle_time_between_reads_millis: 100
  parent_shard_poll_interval_millis: 200
  shard_sync_interval_millis: 2000
  task_backoff_time_millis: 100
  initial_position: TRIM_HORIZON"""

TELEMETRY_TO_LOGS_YAML = """\
metrics:
  destination: logs
  flush_interval_seconds: 1
logs:
  retention_days: 1"""
