"""Observability: metrics in CloudWatch embedded metric format, and the worker's logging."""
