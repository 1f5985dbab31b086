"""Per-shard lifecycle and the scheduler that runs a worker's shard consumers."""
