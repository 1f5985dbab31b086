"""One exception hierarchy for the pipeline: every failure a user can act on is a PipelineError."""

from __future__ import annotations


class PipelineError(Exception):
    """Base of every error the pipeline raises on purpose."""


class BadChangeLogError(PipelineError):
    """The change log holds more malformed lines than the run may tolerate, or an unreadable object."""


class SnapshotStoreError(PipelineError):
    """The snapshot pointer, a version or its manifest cannot be read or written."""


class VerifyError(PipelineError):
    """The live table cannot be scanned for verification."""


class HalfCommittedError(SnapshotStoreError):
    """The tombstones table committed a run and the snapshot table did not: the run's files stay
    (the tombstones table holds some of them) and the next run repairs the snapshot table."""


class ConcurrentRunError(SnapshotStoreError):
    """Another run committed to the snapshot tables while this one ran: this run wrote nothing (its
    merge was planned on the tables as they were) and running it again merges on top of the other."""
