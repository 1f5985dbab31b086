"""Leases, heartbeats and table snapshots as values: what the lease side reads, decides on and writes.

A :class:`Lease` is one row of the leases table (a shard, its owner, its counter and checkpoint,
its lineage, a pending steal), a :class:`Heartbeat` one worker's row of the workers table, a
:class:`Snapshot` one Scan of both. Their items in the tables -- the Java KCL's attribute names, a
malformed item named rather than dropped -- are :mod:`consumer.leases.items`'; the keys of the rows
that are not leases or heartbeats are here, where every reader of the tables finds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ground.positions import AT_TIMESTAMP, LATEST, SENTINELS, SHARD_END, TRIM_HORIZON, split_position

FIRST_START_KEY = "__app__#first-start"
# The workers-table row whose ``generation`` moves before every cleanup delete (conditions.py).
LINEAGE_KEY = "__app__#lineage"
LEGACY_PREFIXES = ("__worker__#", "__app__#")
HAND_OVER_PREFIX = "handOver#"


@dataclass(frozen=True, slots=True, order=False)
class ExtendedSequenceNumber:
    """A checkpoint: a sequence number (digits) or a sentinel, plus KCL's sub-sequence number."""

    sequence: str
    sub_sequence: int = 0

    def __post_init__(self) -> None:
        if self.sequence not in SENTINELS and not self.sequence.isdigit():
            raise ValueError(
                f"checkpoint {self.sequence!r} is neither digits nor one of {', '.join(SENTINELS)}"
            )

    @property
    def rank(self) -> tuple[int, int, int]:
        """KCL's order: AT_TIMESTAMP < TRIM_HORIZON < LATEST < numbers < SHARD_END."""
        if self.sequence == AT_TIMESTAMP:
            return (0, 0, 0)
        if self.sequence == TRIM_HORIZON:
            return (1, 0, 0)
        if self.sequence == LATEST:
            return (2, 0, 0)
        if self.sequence == SHARD_END:
            return (4, 0, 0)
        return (3, int(self.sequence), self.sub_sequence)

    def __lt__(self, other: ExtendedSequenceNumber) -> bool:
        return self.rank < other.rank

    def __le__(self, other: ExtendedSequenceNumber) -> bool:
        return self.rank <= other.rank

    @property
    def is_shard_end(self) -> bool:
        return self.sequence == SHARD_END

    def __str__(self) -> str:
        """The position text the lifecycle reads (:func:`ground.positions.position_text`)."""
        return self.sequence if not self.sub_sequence else f"{self.sequence}.{self.sub_sequence}"

    @classmethod
    def parse(cls, text: str) -> ExtendedSequenceNumber:
        """A sentinel, ``"<digits>"`` or ``"<digits>.<sub>"`` (what :meth:`__str__` writes): a
        checkpoint inside a KPL aggregate is written as the Java KCL writes it, the sequence number
        and ``checkpointSubSequenceNumber``. ValueError for anything else."""
        if text in SENTINELS:
            return cls(text)
        try:
            sequence, sub_sequence = split_position(text)
        except ValueError:
            raise ValueError(
                f"checkpoint {text!r} is neither digits (or digits.sub-sequence) nor one of "
                f"{', '.join(SENTINELS)}"
            ) from None
        return cls(sequence, sub_sequence)


@dataclass(frozen=True, slots=True)
class Lease:
    shard_id: str
    owner: str | None
    counter: int
    checkpoint: ExtendedSequenceNumber
    owner_switches_since_checkpoint: int = 0
    parent_shard_ids: frozenset[str] = frozenset()
    child_shard_ids: frozenset[str] = frozenset()
    pending_owner: str | None = None
    pending_since: int | None = None

    @property
    def finished(self) -> bool:
        return self.checkpoint.is_shard_end


@dataclass(frozen=True, slots=True)
class Heartbeat:
    worker_id: str
    counter: int
    at_wall_millis: int
    lease_count: int = 0
    # The worker is stopping gracefully and will hand its leases on: the others scan the leases
    # table every round until it is gone, so they adopt what it hands them at once.
    stopping: bool = False
    # Wall ms when this worker last left leases free for others (created a shard's children it did
    # not take, or let a lease go to nobody): a worker whose last full scan predates it scans again
    # at its next round instead of at the full-scan interval. 0: never.
    new_leases_at: int = 0
    # Wall time of the worker's last lease-taking round whose reads succeeded (None: none yet, or a
    # worker too old to say). A row keeps being written while every leases-table read fails, so
    # an instance's watchdog counts another worker as fine by this, not by ``at_wall_millis``.
    round_ok_at_wall_millis: int | None = None


@dataclass(frozen=True, slots=True)
class HandOverRequest:
    """A thief asked the owner for ``shard_id`` at ``at_wall_millis`` (the thief's clock)."""

    shard_id: str
    thief: str
    at_wall_millis: int


@dataclass(frozen=True, slots=True)
class MalformedItem:
    key: str
    problem: str


@dataclass(frozen=True)
class Snapshot:
    """The leases table as one Scan saw it."""

    leases: Mapping[str, Lease]
    heartbeats: Mapping[str, Heartbeat]
    malformed: tuple[MalformedItem, ...] = field(default_factory=tuple)
    first_start_claimed: bool = False  # the FIRST_START_KEY marker row exists (workers table)
