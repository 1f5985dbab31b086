"""Lease-worker properties: the Java KCL's names (in snake_case) and its defaults, so a team moving
from KCL carries its tuning over unchanged; plus the derived intervals the lease code runs on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ground.positions import LATEST, InitialPosition
from ground.settings.base import SettingsModel
from ground.settings.source import KINESIS_MAX_RECORDS

# Java's Integer.MAX_VALUE: KCL's "unbounded" for maxLeasesForWorker.
UNBOUNDED = 2_147_483_647

# Failover periods a finished lease stays before shard sync deletes it (WorkerSettings.cleanup_delay_millis).
CLEANUP_DELAY_FAILOVERS = 3


class WorkerSettings(SettingsModel):
    """Lease-worker properties: KCL's names in snake_case, with KCL's defaults."""

    failover_time_millis: int = Field(
        10_000, ge=1_000, description="A lease not renewed for this long may be taken (failoverTimeMillis)."
    )
    epsilon_millis: int = Field(25, ge=0, description="Timer slack subtracted from intervals (KCL epsilon).")
    lease_renewal_interval_millis: int | None = Field(
        None, ge=100, description="How often a worker renews its liveness; default failover/3 - epsilon."
    )
    lease_taker_interval_millis: int | None = Field(
        None,
        ge=100,
        description="The taking interval: a dead worker's or a stopping worker's leases are taken up within "
        "about one of it. A worker runs a taker round every half of it: reads the workers table (who is "
        "alive, who is stopping) and, when something may need doing, scans the leases table to take, "
        "steal, balance. Default failover/3.",
    )
    lease_full_scan_interval_millis: int | None = Field(
        None,
        ge=100,
        description="Longest time between two full scans of the leases table by one worker when nothing "
        "asked for one sooner (a worker joined, died or left; it wants leases; it just took some); "
        "default 2 x failover, the Java KCL's scan period. Bounds how late a new unowned lease is seen.",
    )
    max_clock_skew_millis: int = Field(
        500, ge=0, description="Assumed bound on wall-clock skew between workers (NTP / Amazon Time Sync)."
    )
    shard_sync_interval_millis: int = Field(
        60_000, ge=1_000, description="Period of the shard sync that creates leases for new shards."
    )
    describe_stream_budget_per_second: float = Field(
        5.0,
        gt=0,
        le=10,
        description="DescribeStream calls per second for the whole fleet. The account has about 10/s for "
        "every consumer of its streams (other applications, dev and prod in one account, operators' "
        "describe-stream): the default leaves half to them. The fleet keeps to it at start-up and in "
        "steady state (docs/streams.md).",
    )
    max_leases_for_worker: int = Field(UNBOUNDED, ge=1, description="Cap on leases one worker holds.")
    max_leases_to_steal_at_one_time: int = Field(1, ge=1, description="Leases stolen per taker run.")
    max_records: int | None = Field(
        None,
        ge=1,
        le=KINESIS_MAX_RECORDS,
        description="The Limit of each GetRecords (KCL's maxRecords). Unset: the most the stream serves "
        "a call, 1000 from a table's stream (DynamoDB Streams), 10 000 from a Kinesis stream (KCL's "
        "default); at most 1000 when any stream read is a table's.",
    )
    idle_time_between_reads_millis: int = Field(
        1000,
        ge=0,
        description="Pause before the next GetRecords after a batch that was not full (records are not "
        "waiting); empty polls in a row back off from it to max_idle_time_between_reads_millis.",
    )
    max_idle_time_between_reads_millis: int = Field(
        10_000,
        ge=0,
        description="Longest pause between polls of a shard that keeps answering empty (doubling from "
        "idle_time_between_reads_millis; never below it). Bounds an idle shard's cost and the delay of "
        "its first record after a quiet spell; set it to idle_time_between_reads_millis to turn off.",
    )
    catch_up_behind_millis: int = Field(
        10_000,
        ge=0,
        description="A batch whose records are this far behind the stream's tip is followed at once by the "
        "next read (catch-up), at most one read per min_time_between_reads_millis; 0 turns catch-up off.",
    )
    min_time_between_reads_millis: int = Field(
        200,
        ge=0,
        description="Shortest time between the starts of two catch-up reads of one shard (KCL 3's minimum).",
    )
    parent_shard_poll_interval_millis: int = Field(
        10_000,
        ge=100,
        description="How often a child shard re-checks whether its parents finished, after its first five "
        "checks (every half taking interval: a parent that is just finishing starts its child within one).",
    )
    call_process_records_even_for_empty_record_list: bool = Field(
        False, description="Call the processor on empty batches (needed for time-based flushing)."
    )
    cleanup_leases_upon_shard_completion: bool = Field(
        True, description="Delete finished leases once their children have progressed."
    )
    initial_position: InitialPosition = Field(
        LATEST, description="Where shards open at first start begin; descendants always use TRIM_HORIZON."
    )
    lease_table_billing_mode: Literal["PROVISIONED", "PAY_PER_REQUEST"] = Field(
        "PROVISIONED", description="Leases table billing mode."
    )
    initial_lease_table_read_capacity: int = Field(10, ge=1, description="Leases table RCU (PROVISIONED).")
    initial_lease_table_write_capacity: int = Field(10, ge=1, description="Leases table WCU (PROVISIONED).")
    lease_table_name: str | None = Field(
        None, description="Leases table name; default the name prefix (see scope_names_by_env)."
    )
    worker_table_name: str | None = Field(
        None, description="Heartbeat (workers) table name; default <leases table>-workers."
    )
    task_backoff_time_millis: int = Field(500, ge=0, description="Back-off after a failed task.")
    on_trimmed: Literal["fail", "skip_to_trim_horizon", "reload"] = Field(
        "fail",
        description="What to do when data was trimmed before it was read (always logged as ERROR): stop "
        "the shard (fail), go on at the oldest record left (skip_to_trim_horizon), or go on there after "
        "re-delivering the whole table from a paced Scan as re-loaded records (reload: docs/processing.md).",
    )
    reload_read_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="on_trimmed=reload: the share of the source table's provisioned read capacity one "
        "worker's reloads may consume (measured with ReturnConsumedCapacity, all of the worker's "
        "reloads together).",
    )
    reload_on_demand_read_units_per_second: float = Field(
        100.0,
        gt=0,
        le=40_000,
        description="on_trimmed=reload on an on-demand (PAY_PER_REQUEST) table, which states no capacity: "
        "the read units per second one worker's reloads may consume.",
    )
    reload_scan_segments: int = Field(
        4, ge=1, le=1000, description="on_trimmed=reload: TotalSegments of the reload's parallel Scan."
    )
    reload_page_items: int = Field(
        100,
        ge=1,
        le=1000,
        description="on_trimmed=reload: Limit of each Scan page (one page is the most a reload reads "
        "ahead of its pace, and one re-loaded batch).",
    )
    max_worker_threads: int = Field(
        16, ge=1, le=512, description="Threads that fetch and process shards (not one per shard)."
    )
    stall_timeout_millis: int | None = Field(
        300_000,
        ge=1_000,
        description="A shard is stalled when a call for it (the processor, lanes included, or a stream read) "
        "has not returned, or it ended and its reading does not reach the end, while its checkpoint has "
        "not moved, for this long: the worker logs the stuck call's stack, publishes StalledShards and "
        "releases the lease so another worker takes it. Above the longest batch a processor may take, "
        "retries included. None turns it off.",
    )

    def records_per_read(self, most: int) -> int:
        """The Limit of each GetRecords of a stream that serves at most ``most`` records a call:
        max_records, or ``most`` when max_records is unset (never above it)."""
        return most if self.max_records is None else min(self.max_records, most)

    @property
    def renewal_interval_millis(self) -> int:
        if self.lease_renewal_interval_millis is not None:
            return self.lease_renewal_interval_millis
        return self.failover_time_millis // 3 - self.epsilon_millis

    @property
    def taker_interval_millis(self) -> int:
        if self.lease_taker_interval_millis is not None:
            return self.lease_taker_interval_millis
        return self.failover_time_millis // 3

    @property
    def full_scan_interval_millis(self) -> int:
        if self.lease_full_scan_interval_millis is not None:
            return max(self.lease_full_scan_interval_millis, self.taker_interval_millis)
        return max(2 * self.failover_time_millis, self.taker_interval_millis)

    @property
    def fence_margin_millis(self) -> int:
        """How long before anybody may take its leases a worker that cannot renew stops using them."""
        return max(self.failover_time_millis // 5, self.epsilon_millis)

    @property
    def fence_after_millis(self) -> int:
        """A worker whose last good heartbeat started this long ago is fenced (failover - margin)."""
        return self.failover_time_millis - self.fence_margin_millis

    # Every other duration the worker derives from the failover time, named here so that following
    # failover_time_millis ends in this file (and in consumer.leases.decisions.Timing, which carries
    # it with the clock skew to the liveness judgements).

    @property
    def expiry_horizon_millis(self) -> int:
        """A lease or heartbeat not renewed for this long is expired, whatever the clocks say
        (failover + the clock skew allowed)."""
        return self.failover_time_millis + self.max_clock_skew_millis

    @property
    def drain_millis(self) -> int:
        """How long a stopping worker waits for its shard consumers and threads to finish (one
        failover: after that its leases may be taken anyway)."""
        return self.failover_time_millis

    @property
    def lease_call_budget_millis(self) -> int:
        """Every leases-table call, with its retries, ends within this (the client's timeouts):
        a heartbeat must not hang past the fence, nor a create land long after it was decided."""
        return self.failover_time_millis

    @property
    def cleanup_delay_millis(self) -> int:
        """A finished lease is deleted only once seen finished this long (3 failovers): longer than
        any scan is stale, so no worker's old view still holds it unfinished."""
        return CLEANUP_DELAY_FAILOVERS * self.failover_time_millis

    @model_validator(mode="after")
    def _renewal_shorter_than_failover(self) -> WorkerSettings:
        # A heartbeat and one retry (a third of the interval later) must both fit before the fence;
        # otherwise a single throttled request, or the interval alone, fences the worker.
        renewal, fence = self.renewal_interval_millis, self.fence_after_millis
        if renewal + max(renewal // 3, 1) >= fence:
            longest = (fence * 3) // 4 - 1
            raise ValueError(
                f"lease_renewal_interval_millis ({renewal}) leaves no room for a retried heartbeat "
                f"before the worker fences itself at failover - failover/5 = {fence} ms: use at most "
                f"{longest} (failover/3 - epsilon is the usual choice) or raise failover_time_millis"
            )
        if self.max_clock_skew_millis >= self.failover_time_millis // 2:
            raise ValueError(
                f"max_clock_skew_millis ({self.max_clock_skew_millis}) must be under half of "
                f"failover_time_millis ({self.failover_time_millis})"
            )
        return self
