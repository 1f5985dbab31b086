"""A DynamoDB brownout, short form (bench/brownout.py runs the long one for bench/RESULTS.md).

Four ``consumer run`` processes on the emulator, as two instances of two, each instance with its
real watchdog (the judge, and its own read of the workers table) polling the workers' heartbeat
files; Auto Scaling is a stand-in that records ``SetInstanceHealth``. The leases and workers tables
refuse every call (throttled, then HTTP 500) for six failover times, longer than the watchdog's age
limit (four here; ``max(120 s, 6 x failover)`` on an instance): the judge of 674a950 marked both
instances Unhealthy here. Now:

* nobody is marked Unhealthy, though every watchdog saw its workers' rounds fail (and said why it
  did not blame its instance);
* every key is delivered again after the outage, and every acknowledged write reached a processor;
* then the leases table alone refuses (throttled, then HTTP 500) for two age limits while the
  workers table answers: the workers' heartbeat rows stay fresh while every lease-taking round
  fails. Nobody is marked Unhealthy: a peer is fine only when its row says its last round succeeded
  recently, and the watchdog's own read of the leases table fails too. A watchdog that counted
  peers as fine by their heartbeat rows marked both instances here;
* then the workers table alone refuses for two age limits while the leases table answers: the
  workers' heartbeats fail, they fence themselves, and the watchdogs cannot read the table either.
  Nobody is marked Unhealthy, and every key is delivered again once the table answers;
* the control: one worker frozen for 2.5 x the age limit while the others are fine marks its own
  instance, and only it.
"""

from __future__ import annotations

import pytest

from bench.brownout import brownout

pytestmark = pytest.mark.e2e


def test_a_brownout_of_both_tables_or_of_either_table_alone_replaces_nothing_and_loses_nothing() -> None:
    outcome = brownout(
        name="e2e-brownout",
        instances=2,
        processes=2,
        partitions=6,
        failover_millis=2000,
        outage_failovers=6,
        writes_per_second=20,
        control=True,
        alone=(("leases", 8), ("workers", 8)),
    )
    assert outcome.marked_in_outage == []
    leases, workers = outcome.alone["leases"], outcome.alone["workers"]
    assert leases.marked == [] and workers.marked == []
    seen_alone = [m for m in leases.excused if "had no lease-taking round succeed" in m]
    assert len(seen_alone) >= 2 and any("leases table" in m for m in seen_alone), leases.excused
    assert any("workers table" in m for m in workers.excused), workers.excused
    # The outage was long enough to trip the old rule: the watchdogs saw failing rounds, and said
    # why they did not act.
    seen = [m for m in outcome.excused if "had no lease-taking round succeed within 8 s" in m]
    assert len(seen) >= 2 and any("a dependency failing, not this instance" in m for m in seen)
    assert outcome.lost == []
    assert outcome.resume_seconds < outcome.outage_seconds  # delivering again (the bench times it)
    assert outcome.marked_in_control == ["inst-0"]
    assert outcome.problems == []
