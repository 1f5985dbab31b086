"""A DynamoDB brownout, short form (bench/brownout.py runs the long one for bench/RESULTS.md).

Four ``consumer run`` processes on the emulator, as two instances of two, each instance with its
real watchdog (the judge, and its own read of the workers table) polling the workers' heartbeat
files; Auto Scaling is a stand-in that records ``SetInstanceHealth``. The leases and workers tables
refuse every call (throttled, then HTTP 500) for four failover times, twice the watchdog's age
limit: the judge of 674a950 marked both instances Unhealthy here. Now:

* nobody is marked Unhealthy, though every watchdog saw its workers' rounds fail (and said why it
  did not blame its instance);
* every key is delivered again after the outage, and every acknowledged write reached a processor;
* the control: one worker frozen for 1.5 x the age limit while the others are fine marks its own
  instance, and only it.
"""

from __future__ import annotations

import pytest

from bench.brownout import brownout

pytestmark = pytest.mark.e2e


def test_a_brownout_of_the_leases_tables_replaces_no_instance_and_loses_nothing() -> None:
    outcome = brownout(
        name="e2e-brownout",
        instances=2,
        processes=2,
        partitions=6,
        failover_millis=3000,
        outage_failovers=4,
        writes_per_second=20,
        control=True,
    )
    assert outcome.marked_in_outage == []
    # The outage was long enough to trip the old rule: each watchdog saw failing rounds.
    assert all("had no lease-taking round succeed within 6 s" in message for message in outcome.excused)
    assert len(outcome.excused) >= 2  # both instances' watchdogs
    assert outcome.lost == []
    assert outcome.resume_seconds < outcome.outage_seconds  # delivering again (the bench times it)
    assert outcome.marked_in_control == ["inst-0"]
    assert outcome.problems == []
