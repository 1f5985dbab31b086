"""The AWS clients of an environment, built from its settings as the worker builds them (endpoint,
region, timeouts, User-Agent): for the commands and benchmarks that read what a fleet writes."""

from consumer.runtime.clients import AwsClients, client_for, logs_client, stream_client_config

__all__ = ["AwsClients", "client_for", "logs_client", "stream_client_config"]
