"""Lease coordination: the lease model, pure decisions, the store port and its DynamoDB adapter,
and the coordinator that runs heartbeats and taker rounds for one worker."""
