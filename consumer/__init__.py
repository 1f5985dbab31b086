"""A Python-native, self-hosted fleet that processes a DynamoDB table's stream with shared leases."""

__version__ = "0.1.0"
