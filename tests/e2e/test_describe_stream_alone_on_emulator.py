"""DescribeStream failing alone, end to end: three `consumer run` workers on the emulator while the
stream's DescribeStream is throttled (LimitExceededException, DynamoDB Streams' answer past its 10
calls a second) and every other call answers: GetRecords, GetShardIterator and both leases tables.

The stream rolls over every 8 s, so during the outage the shards being read end and their children
appear, and the workers cannot list them (shard discovery and a shard's children both go through
DescribeStream). What must hold:

* no worker ends: a throttled DescribeStream is a transient error, however long it lasts;
* the shards open when the outage began keep delivering through it: reading needs no DescribeStream;
* once DescribeStream answers again, every record written before, during and after the outage is
  delivered exactly once and in per-item order, children after their parents.

The tables failing, alone and with the stream, are tests/e2e/test_lease_faults_on_emulator.py's and
tests/e2e/test_brownout_on_emulator.py's; this one is the stream's discovery failing alone.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.test_lease_faults_on_emulator import Fleet, fleet
from tests.support import wait_for

pytestmark = pytest.mark.e2e
__all__ = ["fleet"]  # the fleet fixture, shared with the leases tables' fault tests

ROLLOVER_SECONDS = 8  # the fixture's stream: its shards end this often
OUTAGE_SECONDS = 3 * ROLLOVER_SECONDS


def test_describe_stream_throttled_alone_ends_no_worker_and_loses_nothing(fleet: Fleet) -> None:
    run = fleet
    wait_for(run.all_held, 90, "three workers holding every lease and delivering")
    control = run.emu.control
    before = control.counters()
    delivered_at_start = run.delivered()
    control.set_faults(describe_stream_per_second=0.01)  # one call a hundred seconds
    try:
        wait_for(
            lambda: control.counters().get("throttled", 0) > before.get("throttled", 0),
            60,
            "a DescribeStream call throttled",
        )
        # The shards being read when it began are read on: the change log grows.
        wait_for(
            lambda: run.delivered() > delivered_at_start, 2 * ROLLOVER_SECONDS, "deliveries during the outage"
        )
        time.sleep(OUTAGE_SECONDS)
        during = control.counters()
    finally:
        control.set_faults(describe_stream_per_second=10.0)
    # The outage really was DescribeStream's: called and refused again and again (the fixture's
    # reads stay under the GetRecords limit), while the reads went on and shards ended.
    assert during.get("throttled", 0) - before.get("throttled", 0) >= 10, (before, during)
    assert during.get("calls_DescribeStream", 0) > before.get("calls_DescribeStream", 0)
    assert during.get("rollovers", 0) >= before.get("rollovers", 0) + 2, "shards ended during the outage"
    assert during.get("records_served", 0) > before.get("records_served", 0)
    dead = {p.name: p.popen.returncode for p in run.fleet.workers.values() if not p.alive}
    assert not dead, f"workers ended by a throttled DescribeStream: {dead}"

    time.sleep(ROLLOVER_SECONDS)  # records written after it answers again too
    run.stop_and_judge()
