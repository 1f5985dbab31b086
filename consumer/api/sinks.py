"""The built-in processors (``processing.processor: changelog``), for a processor that wraps one."""

from consumer.sinks.changelog import ChangelogSink, ChangelogStore

__all__ = ["ChangelogSink", "ChangelogStore"]
