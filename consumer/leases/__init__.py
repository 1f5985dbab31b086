"""Lease coordination: the lease model, pure decisions, the store port and its DynamoDB adapter,
the lease machine (:mod:`consumer.leases.machine`: a worker's lease state, no I/O) with its driver,
and the coordinator that runs heartbeats and taker rounds for one worker."""
