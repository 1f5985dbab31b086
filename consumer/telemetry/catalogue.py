"""The log messages that mean trouble (lost leases, stuck shards, trimmed data), written the same way everywhere.

Each meaningful message has a fixed event code. The code is the ``event`` field of the JSON log line
(CloudWatch Logs filter ``{ $.event = "LEASE_LOST_SHUTDOWN" }``) and also opens the message text in
brackets, so a plain-text search (``"[LEASE_LOST_SHUTDOWN]"``) finds it in any log viewer. The
wording keeps the Java KCL's phrases where it has one, so an operator's saved searches still match.

Call the ``log_*`` helpers instead of writing these messages by hand; the helpers choose the level
too: a lost lease or a refused checkpoint is a WARNING (the fleet recovers, but duplicates follow),
the parent-not-closed race is a benign WARNING, and lost or dead-lettered records are ERRORs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class MeaningfulEvent(StrEnum):
    LEASE_LOST_SHUTDOWN = "LEASE_LOST_SHUTDOWN"
    CHECKPOINT_REFUSED_LEASE_GONE = "CHECKPOINT_REFUSED_LEASE_GONE"
    PARENT_NOT_CLOSED = "PARENT_NOT_CLOSED"
    RETRIES_EXHAUSTED = "RETRIES_EXHAUSTED"
    RECORDS_TRIMMED_LOST = "RECORDS_TRIMMED_LOST"
    GAP_RELOAD_STARTED = "GAP_RELOAD_STARTED"
    GAP_RELOADED = "GAP_RELOADED"
    SHARD_STALLED = "SHARD_STALLED"
    LEASES_NOT_TAKEN = "LEASES_NOT_TAKEN"


@dataclass(frozen=True)
class EventDescription:
    event: MeaningfulEvent
    level: int
    meaning: str
    action: str


CATALOGUE: tuple[EventDescription, ...] = (
    EventDescription(
        MeaningfulEvent.LEASE_LOST_SHUTDOWN,
        logging.WARNING,
        "A shard consumer shut down with reason LEASE_LOST (zombie): another worker owns the shard now.",
        "Occasional: normal rebalancing. Frequent: renewals are too slow (leases-table throttling, "
        "CPU starvation, long GC-like pauses) - check RenewLease.Time and the leases-table throttles.",
    ),
    EventDescription(
        MeaningfulEvent.CHECKPOINT_REFUSED_LEASE_GONE,
        logging.WARNING,
        "A checkpoint was refused because this worker no longer holds the lease; the new owner "
        "re-processes from the last checkpoint (duplicates, never loss).",
        "Make processing of one batch shorter than failover_time_millis; check LostLeases.",
    ),
    EventDescription(
        MeaningfulEvent.PARENT_NOT_CLOSED,
        logging.WARNING,
        "DescribeStream listed a child shard while its parent still looked open (eventual "
        "consistency). Benign: the shard sync retries.",
        "None unless it repeats for the same shard for many minutes.",
    ),
    EventDescription(
        MeaningfulEvent.RETRIES_EXHAUSTED,
        logging.ERROR,
        "The processor failed on records until the retry policy gave up; they went to the dead letter.",
        "Inspect the dead letter destination and the processor's exception; replay once fixed.",
    ),
    EventDescription(
        MeaningfulEvent.RECORDS_TRIMMED_LOST,
        logging.ERROR,
        "Records were trimmed from the stream (24 h retention) before this fleet read them: data loss.",
        "The fleet is too slow or was down too long: check MillisBehindLatest and scale out.",
    ),
    EventDescription(
        MeaningfulEvent.GAP_RELOAD_STARTED,
        logging.WARNING,
        "worker.on_trimmed=reload: after a trim loss, the whole table is re-delivered from a paced "
        "Scan before the shard goes on at its oldest record left.",
        "None: the reload repairs the sinks (docs/processing.md); find why the shard fell 24 h behind.",
    ),
    EventDescription(
        MeaningfulEvent.GAP_RELOADED,
        logging.WARNING,
        "A reload was delivered whole: how many items, pages and read units, and how long it took.",
        "None; a reload that never ends (no GAP_RELOADED after GAP_RELOAD_STARTED) is retrying: "
        "read the shard's errors.",
    ),
    EventDescription(
        MeaningfulEvent.SHARD_STALLED,
        logging.ERROR,
        "A shard's checkpoint did not move for worker.stall_timeout_millis while a call for it had not "
        "returned (the line carries its stack) or it had ended without its reading reaching the end; "
        "its lease was released so that another worker takes it.",
        "Read the stack: a processor call that hangs (a downstream without a timeout), a record it "
        "cannot handle (retried until an operator acts: fix it, or dead-letter it), or a stuck read. "
        "Stalls that persist page (the stalled-shards alarm).",
    ),
    EventDescription(
        MeaningfulEvent.LEASES_NOT_TAKEN,
        logging.ERROR,
        "Ready leases stayed free for worker.stall_timeout_millis although this worker had room.",
        "Look for the lease's parents (a parent lease not finishing blocks its children) and for "
        "taker errors in the same worker's log; `consumer leases` shows the table.",
    ),
)


def _emit(logger: logging.Logger, event: MeaningfulEvent, level: int, text: str, **fields: Any) -> None:
    extra = {"event": event.value, **{k: v for k, v in fields.items() if v is not None}}
    logger.log(level, "[%s] %s", event.value, text, extra=extra)


def log_lease_lost_shutdown(logger: logging.Logger, shard_id: str, new_owner: str | None = None) -> None:
    """A shard consumer stopped because its lease is gone (KCL: shutdown reason ZOMBIE/LEASE_LOST)."""
    owner = f"; the lease now belongs to {new_owner}" if new_owner else ""
    _emit(
        logger,
        MeaningfulEvent.LEASE_LOST_SHUTDOWN,
        logging.WARNING,
        f"Shutting down shard consumer for {shard_id} with reason LEASE_LOST (zombie){owner}",
        shard=shard_id,
        new_owner=new_owner,
    )


def log_checkpoint_refused(logger: logging.Logger, shard_id: str, sequence_number: str | None) -> None:
    """A checkpoint write failed its condition: this worker does not hold the lease any more."""
    _emit(
        logger,
        MeaningfulEvent.CHECKPOINT_REFUSED_LEASE_GONE,
        logging.WARNING,
        f"Can't update checkpoint - instance doesn't hold the lease for shard {shard_id} "
        f"(checkpoint {sequence_number} refused)",
        shard=shard_id,
        sequence_number=sequence_number,
    )


def log_parent_not_closed(logger: logging.Logger, shard_id: str, parent_shard_id: str) -> None:
    """The DescribeStream eventual-consistency race; benign, the next shard sync resolves it."""
    _emit(
        logger,
        MeaningfulEvent.PARENT_NOT_CLOSED,
        logging.WARNING,
        f"Parent shard {parent_shard_id} of {shard_id} is not closed yet (benign DescribeStream race; "
        "retrying at the next shard sync)",
        shard=shard_id,
        parent_shard_id=parent_shard_id,
    )


def log_retries_exhausted(
    logger: logging.Logger,
    shard_id: str,
    record_count: int,
    attempts: int,
    destination: str,
    *,
    first_sequence_number: str | None = None,
    last_sequence_number: str | None = None,
    error: str | None = None,
) -> None:
    """Records the retry policy gave up on; they were sent to ``destination`` (the dead letter)."""
    span = f" {first_sequence_number}..{last_sequence_number}" if first_sequence_number else ""
    _emit(
        logger,
        MeaningfulEvent.RETRIES_EXHAUSTED,
        logging.ERROR,
        f"Retries exhausted after {attempts} attempts for {record_count} records of shard {shard_id}"
        f"{span}; sent to dead letter {destination}" + (f": {error}" if error else ""),
        shard=shard_id,
        record_count=record_count,
        attempts=attempts,
        destination=destination,
        first_sequence_number=first_sequence_number,
        last_sequence_number=last_sequence_number,
        error=error,
    )


def log_trimmed_loss(
    logger: logging.Logger,
    shard_id: str,
    resume_position: str | None,
    detail: str,
    on_trimmed: str,
) -> None:
    """Records trimmed (retention) before they were read: always an ERROR, whatever the policy."""
    after = {
        "skip_to_trim_horizon": "skipping to TRIM_HORIZON",
        "reload": "re-loading the table, then going on at TRIM_HORIZON",
    }.get(on_trimmed, "stopping the shard")
    _emit(
        logger,
        MeaningfulEvent.RECORDS_TRIMMED_LOST,
        logging.ERROR,
        f"Records lost to trimming in shard {shard_id} after position {resume_position}: {detail}; "
        f"worker.on_trimmed={on_trimmed}, {after}",
        shard=shard_id,
        resume_position=resume_position,
        on_trimmed=on_trimmed,
    )


def log_reload_started(
    logger: logging.Logger, shard_id: str, gap: Any, units_per_second: float, why: str
) -> None:
    """A reload begins (``gap``: consumer.processing.gap.GapEvent): what was lost and the pace."""
    _emit(
        logger,
        MeaningfulEvent.GAP_RELOAD_STARTED,
        logging.WARNING,
        f"Re-loading table for the gap in shard {shard_id} after position {gap.last_position} (first "
        f"readable {gap.first_readable}); reload {gap.reload_id} started at {gap.reload_started_at:.3f}, "
        f"paced at {units_per_second:g} read units/s ({why})",
        shard=shard_id,
        reload_id=gap.reload_id,
        last_position=gap.last_position,
        first_readable=gap.first_readable,
        lost_from=gap.lost_from,
        lost_until=gap.lost_until,
        reload_started_at=gap.reload_started_at,
        units_per_second=units_per_second,
    )


def log_reload_delivered(
    logger: logging.Logger, shard_id: str, gap: Any, *, pages: int, units: float, millis: int
) -> None:
    """A reload delivered whole: what was re-loaded."""
    _emit(
        logger,
        MeaningfulEvent.GAP_RELOADED,
        logging.WARNING,
        f"Re-loaded {gap.records_reloaded} item(s) for the gap in shard {shard_id} (reload "
        f"{gap.reload_id}: {pages} page(s), {units:g} read units, {millis / 1000:.1f} s); going on at "
        f"{gap.first_readable or 'the oldest record left'}",
        shard=shard_id,
        reload_id=gap.reload_id,
        records_reloaded=gap.records_reloaded,
        pages=pages,
        read_units=units,
        millis=millis,
    )


def log_shard_stalled(logger: logging.Logger, shard_id: str, what: str, stack: str) -> None:
    """A stalled shard released (consumer.lifecycle.stalls): always an ERROR, with the stuck call."""
    where = f"; the stuck call:\n{stack}" if stack else "; no call of it is running"
    _emit(
        logger,
        MeaningfulEvent.SHARD_STALLED,
        logging.ERROR,
        f"Shard {shard_id} stalled: {what}; releasing its lease so that another worker takes it{where}",
        shard=shard_id,
    )


def log_leases_not_taken(logger: logging.Logger, shard_ids: list[str], free_millis: int) -> None:
    """Ready leases left free although this worker could take more."""
    shown = ", ".join(shard_ids[:5]) + (f" and {len(shard_ids) - 5} more" if len(shard_ids) > 5 else "")
    _emit(
        logger,
        MeaningfulEvent.LEASES_NOT_TAKEN,
        logging.ERROR,
        f"{len(shard_ids)} ready leases stayed free for {free_millis / 1000:.0f} s although this worker "
        f"had room: {shown}",
        shards=shard_ids[:20],
    )
