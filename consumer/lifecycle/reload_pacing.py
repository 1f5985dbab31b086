"""How fast a reload may read the table: a stated share of its read capacity, measured, not guessed.

A reload (``worker.on_trimmed: reload``) scans the whole source table. Its pace is
``worker.reload_read_share`` x the table's provisioned read capacity (DescribeTable), or
``worker.reload_on_demand_read_units_per_second`` on an on-demand table, which states none
(:func:`reload_rate`). The worker's reloads share one :class:`ReloadBudget`, so two shards reloading
at once on one worker together keep to the rate.

The pace is kept on what each page *consumed* (``ReturnConsumedCapacity=TOTAL``), which is known
only after the page: a page is never started before the units of the pages before it are paid for
at the rate, nor while another page of the worker is in flight (:class:`ReloadPacer`). So from any
page's start to any later page's start, the units consumed in between are at most rate x the time
between: the rate is exceeded only by the page in flight, which ``worker.reload_page_items`` bounds.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ground.settings import WorkerSettings

IN_FLIGHT_RETRY_MILLIS = 50  # another shard's page is being read: ask again this much later


@dataclass(frozen=True, slots=True)
class ReloadRate:
    units_per_second: float
    why: str  # said in the reload's log line: where the rate comes from


def reload_rate(table_description: Mapping[str, Any], settings: WorkerSettings) -> ReloadRate:
    """The pace from DescribeTable's ``Table``: a share of provisioned reads, or the stated rate."""
    billing = (table_description.get("BillingModeSummary") or {}).get("BillingMode")
    provisioned = (table_description.get("ProvisionedThroughput") or {}).get("ReadCapacityUnits") or 0
    if billing == "PAY_PER_REQUEST" or not provisioned:
        units = settings.reload_on_demand_read_units_per_second
        return ReloadRate(
            units, f"on-demand table: worker.reload_on_demand_read_units_per_second = {units:g}"
        )
    share = settings.reload_read_share
    return ReloadRate(
        share * float(provisioned),
        f"worker.reload_read_share {share:g} of {provisioned} provisioned read units",
    )


@dataclass
class ReloadPacer:
    """Pure: when the next page may start, from what the pages before it consumed.

    Each page's units push ``ready_at`` on by units / rate from the later of its start and the
    previous ``ready_at`` (never from the past: idle time does not build up credit for a burst).
    """

    units_per_second: float
    ready_at: int = 0  # monotonic ms
    in_flight: bool = False  # a page was started and its units are not known yet

    def take(self, now: int) -> int:
        """0: the next page may start now, and it is the caller's (no other starts until it is
        :meth:`spent`); else how long to wait before asking again."""
        if self.in_flight:
            return IN_FLIGHT_RETRY_MILLIS
        wait = max(0, self.ready_at - now)
        if wait == 0:
            self.in_flight = True
        return wait

    def spent(self, units: float, started: int) -> None:
        """The page that began at ``started`` consumed ``units`` (0 for one that failed)."""
        self.in_flight = False
        cost = math.ceil(units * 1000 / self.units_per_second)
        self.ready_at = max(self.ready_at, started) + cost


class ReloadBudget:
    """One worker's pacer, shared by its shard consumers (each on its own pool thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pacer: ReloadPacer | None = None

    def take(self, rate: float, now: int) -> int:
        with self._lock:
            return self._at(rate).take(now)

    def spent(self, rate: float, units: float, started: int) -> None:
        with self._lock:
            self._at(rate).spent(units, started)

    def _at(self, rate: float) -> ReloadPacer:
        if self._pacer is None:
            self._pacer = ReloadPacer(rate)
        elif self._pacer.units_per_second != rate:  # the table's capacity changed: the new rate holds
            self._pacer = ReloadPacer(rate, self._pacer.ready_at, self._pacer.in_flight)
        return self._pacer
