"""Alarms that reach people, and alarms that are quiet while the fleet is well: read from the templates.

* Every alarm action is followed: to a scaling policy of the group, or to a topic, the topic's policy
  and (when it is encrypted) its key; CloudWatch, acting for this environment's alarms, may publish
  and use the key; a publish without TLS, or for another account's or environment's alarm, is refused.
* Every alarm's own definition (statistics, metric math, Metrics Insights query, missing data) is
  evaluated over the metrics of a healthy fleet in steady state at the group's minimum, typical and
  maximum size: every one is OK.
* The 2N expression reads the number of leases whatever the Scan pages: evaluated over fleet sizes,
  a leases table of one page and of many, it crosses 2 exactly at 2N; walking the group with the
  scaling alarms never turns back.

The evaluators are models (simulation/cloudwatch.py, tests/infra/policy_model.py); each test also shows
them failing where they should (the policy that shipped before, a figure that counts pages).
"""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

import pytest

from simulation.cloudwatch import Datapoints, alarm_series, alarm_state, statistic_series
from tests.infra.alarm_walk import (
    alarms_of,
    publish_request,
    resolved,
    topic_policy,
    walk_alarm_actions,
)
from tests.infra.conftest import ENVIRONMENTS, Synthesized
from tests.infra.fleet_metrics import (
    FleetState,
    publish,
    scan_pages,
    steady_leases,
    steady_load,
    worker_event,
)
from tests.infra.policy_model import decide

pytestmark = pytest.mark.infra

MINUTES = 40  # the longest evaluation (scale-in: 6 periods of 5 minutes) with room


@pytest.fixture(params=ENVIRONMENTS)
def synth(request: pytest.FixtureRequest, synthesized: dict[str, Synthesized]) -> Synthesized:
    return synthesized[request.param]


def _group_name(synth: Synthesized) -> str:
    """The group's name as its alarms' dimensions give it: CloudFormation generates it (a Ref)."""
    (group,) = [
        k for k, r in synth.raw["Resources"].items() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"
    ]
    return f"<{group}>"


# ------------------------------------------------------------------------- alarm -> action -> topic


def test_every_alarm_action_reaches_a_policy_of_the_group_or_a_topic_cloudwatch_may_publish_to(
    synth: Synthesized,
) -> None:
    paged = walk_alarm_actions(synth)
    settings = synth.settings
    if settings.scaling.has_alarm_topic:
        # Every health alarm pages (the scaling alarms act on the group instead).
        health = [
            a for a in alarms_of(synth).values() if not any("Fn::GetAtt" in x for x in a["AlarmActions"])
        ]
        assert len(paged) == len(health) > 0
        assert all(len(a["AlarmActions"]) == 1 for a in health)
    if settings.env == "prod":
        assert paged and settings.scaling.alarm_topic_encrypted


def test_the_walk_refuses_the_policy_that_shipped_before(synthesized: dict[str, Synthesized]) -> None:
    """The prod topic policy of 674a950 held the TLS deny alone: CloudWatch's publish had no allow."""
    prod = synthesized["prod"]
    (topic_logical,) = [k for k, r in prod.raw["Resources"].items() if r["Type"] == "AWS::SNS::Topic"]
    document = topic_policy(prod, topic_logical)
    deny_only = {**document, "Statement": [s for s in document["Statement"] if s["Effect"] == "Deny"]}
    arn = resolved(prod, {"Ref": topic_logical})
    alarm = f"{prod.settings.application_name}-prod-workers-silent"
    assert decide(deny_only, publish_request(prod, arn, alarm)) == "no allow"


# --------------------------------------------------------------------- quiet while the fleet is well


def _states(synth: Synthesized, state: FleetState, minutes: int = MINUTES) -> dict[str, str]:
    data = publish(synth.settings, state, _group_name(synth), minutes)
    return {name: alarm_state(alarm, data, 0, minutes * 60) for name, alarm in alarms_of(synth).items()}


@pytest.mark.parametrize("size", ["min", "typical", "max"])
def test_every_alarm_is_ok_over_a_healthy_steady_fleet(synth: Synthesized, size: str) -> None:
    fleet = synth.settings.fleet
    instances = {"min": fleet.min_instances, "typical": fleet.desired_instances, "max": fleet.max_instances}[
        size
    ]
    instances = max(instances, 1)  # a group that may be empty is evaluated with its first instance
    n = synth.settings.table.expected_partitions()[0]
    state = FleetState(instances, steady_leases(n), n, steady_load(synth.settings, instances))
    states = _states(synth, state)
    assert states and all(s == "OK" for s in states.values()), {k: v for k, v in states.items() if v != "OK"}


def test_the_evaluation_finds_the_alarms_that_should_fire(synthesized: dict[str, Synthesized]) -> None:
    prod = synthesized["prod"]
    fleet, n = prod.settings.fleet, 44
    behind = _states(prod, FleetState(4, 2 * n, n, steady_load(prod.settings, 4)))
    assert behind["leases-at-2N"] == "ALARM" and behind["group-at-max"] == "OK"
    at_max_behind = _states(prod, FleetState(fleet.max_instances, 2 * n, n, 0))
    assert at_max_behind["group-at-max"] == "ALARM" and at_max_behind["leases-near-N"] == "OK"
    oversized = _states(
        prod, FleetState(fleet.max_instances, steady_leases(n), n, steady_load(prod.settings, 3))
    )
    assert oversized["leases-near-N"] == "ALARM"
    short = _states(
        prod, FleetState(3, steady_leases(n), n, steady_load(prod.settings, 3), ready_unassigned=5)
    )
    assert short["ready-shards-unassigned"] == "ALARM"
    silent = {name: alarm_state(a, Datapoints(), 0, MINUTES * 60) for name, a in alarms_of(prod).items()}
    assert silent["workers-silent"] == "ALARM"


# ------------------------------------------------------------------------- 2N, whatever the pages


def _scale_out(synth: Synthesized) -> dict[str, Any]:
    return alarms_of(synth)[f"leases-at-{synth.settings.scaling.returned_item_count_multiplier:g}N"]


@pytest.mark.parametrize("open_shards", [44, 10_000])
def test_the_2n_expression_counts_leases_for_any_fleet_size_and_any_number_of_pages(
    synthesized: dict[str, Synthesized], open_shards: int
) -> None:
    prod = synthesized["prod"]
    alarm = _scale_out(prod)
    fleet = prod.settings.fleet
    many_pages = len(scan_pages(3 * open_shards)) > 1
    assert many_pages == (open_shards == 10_000)
    for instances in range(fleet.min_instances, fleet.max_instances + 1, 3):
        for leases in (open_shards, 2 * open_shards - 1, 2 * open_shards, 3 * open_shards):
            data = publish(
                prod.settings, FleetState(instances, leases, open_shards, 0.0), _group_name(prod), 10
            )
            series, _ = alarm_series(alarm, data, 0, 600)
            assert series[-1] == pytest.approx(leases / open_shards), (instances, leases)
            expected = "ALARM" if leases >= 2 * open_shards else "OK"
            assert alarm_state(alarm, data, 0, 600) == expected, (instances, leases)
    # What the seed's Average per Scan request reads instead: a page's share once there are pages.
    data = publish(prod.settings, FleetState(6, 2 * open_shards, open_shards, 0.0), _group_name(prod), 10)
    key = (
        "AWS/DynamoDB",
        "ReturnedItemCount",
        frozenset({("Operation", "Scan"), ("TableName", prod.settings.leases_table_name)}),
    )
    average = statistic_series(data.series(key), "Average", 0, 300, 2)[-1]
    assert (average == 2 * open_shards) != many_pages


def test_scaling_never_oscillates_over_fleet_sizes_loads_and_lease_counts(
    synthesized: dict[str, Synthesized],
) -> None:
    prod = synthesized["prod"]
    alarms = alarms_of(prod)
    fleet = prod.settings.fleet
    sizes = range(fleet.min_instances, fleet.max_instances + 1)

    @cache
    def step(leases: int, open_shards: int, load: float, instances: int) -> int:
        data = publish(
            prod.settings, FleetState(instances, leases, open_shards, load), _group_name(prod), MINUTES
        )
        out = alarm_state(alarms["leases-at-2N"], data, 0, MINUTES * 60) == "ALARM"
        scale_in = alarm_state(alarms["leases-near-N"], data, 0, MINUTES * 60) == "ALARM"
        assert not (out and scale_in), (leases, load, instances)
        return (
            1
            if out and instances < fleet.max_instances
            else -1
            if scale_in and instances > fleet.min_instances
            else 0
        )

    for open_shards in (44, 10_000):
        n = open_shards
        lease_counts = sorted(
            {0, n // 2, n, steady_leases(n), int(1.25 * n), int(1.25 * n) + 1, 2 * n - 1, 2 * n, 3 * n}
        )
        loads = sorted(
            {
                0.0,
                *(
                    steady_load(prod.settings, s)
                    for s in (fleet.min_instances, fleet.desired_instances, fleet.max_instances)
                ),
            }
        )
        for leases, load, start in itertools.product(lease_counts, loads, sizes):
            path = [start]
            for _ in range(2 * len(sizes)):
                path.append(path[-1] + step(leases, n, load, path[-1]))
            moves = {b - a for a, b in itertools.pairwise(path)} - {0}
            assert len(moves) <= 1 and path[-1] == path[-2], (leases, n, load, path)
    assert any(step(2 * 44, 44, 0.0, s) == 1 for s in sizes)  # the walk does move
    assert any(step(44, 44, 0.0, s) == -1 for s in sizes)


def test_the_group_walks_from_min_to_max_under_ten_times_the_load_and_back_to_min_at_rest(
    synth: Synthesized,
) -> None:
    """The template's own scaling alarms over a fleet whose load rises tenfold (it falls behind:
    ended parents and their waiting children hold the leases table at 2N) and then falls back to rest
    (caught up: the open shards and a few finished ones). The group goes to its maximum one instance
    per alarm, and back to its minimum, never turning in between. The scale-in rule of 694e0be asked
    one instance fewer to hold 6N leases: prod (N = 44, 4 processes x 11 leases) stopped at 6."""
    alarms = alarms_of(synth)
    settings = synth.settings
    fleet, n = settings.fleet, settings.table.expected_partitions()[0]
    low, high = max(fleet.min_instances, 1), fleet.max_instances
    rest = steady_load(settings, low) / 2  # a load the minimum carries with the scale-in rule's headroom

    def step(state: FleetState) -> int:
        data = publish(settings, state, _group_name(synth), MINUTES)
        out = alarm_state(_scale_out(synth), data, 0, MINUTES * 60) == "ALARM"
        scale_in = alarm_state(alarms["leases-near-N"], data, 0, MINUTES * 60) == "ALARM"
        assert not (out and scale_in), state
        return 1 if out and state.instances < high else -1 if scale_in and state.instances > low else 0

    path = [low]
    for _ in range(high - low + 2):  # the load ten times what the minimum is sized for
        path.append(path[-1] + step(FleetState(path[-1], 2 * n, n, 10 * rest)))
    assert path[-1] == high, path
    for _ in range(high - low + 2):  # back at rest
        path.append(path[-1] + step(FleetState(path[-1], steady_leases(n), n, rest)))
    assert path[-1] == low, path
    turns = [b - a for a, b in itertools.pairwise(path) if b != a]
    assert turns == [1] * (high - low) + [-1] * (high - low), path


# ---------------------------------------------- quiet at rest, on a deploy, on one event; paging on a lasting one

# Minutes from the start of a lasting failure to ALARM (docs/deploy.md's alarm table says the same),
# and how the failure shows in the metrics.
START = 20  # minutes of a healthy fleet before the failure


def _failing(synth: Synthesized, alarm: str, minutes: list[int]) -> Datapoints:
    """A healthy fleet whose ``alarm``'s failure happens in each of ``minutes``."""
    settings = synth.settings
    fleet = settings.fleet
    n = settings.table.expected_partitions()[0]
    state = FleetState(
        fleet.min_instances or 1, steady_leases(n), n, steady_load(settings, fleet.min_instances or 1)
    )
    end = max(minutes) + 1 if minutes else START
    if alarm == "workers-silent":  # every worker gone from START on
        return publish(settings, state, _group_name(synth), START)
    data = publish(settings, state, _group_name(synth), max(end, START + 20), lake=alarm != "lake-freshness")
    namespace = settings.metrics_namespace
    at = [(m * 60.0 + 45.0) for m in minutes]
    if alarm == "lake-freshness":
        keep = publish(settings, state, _group_name(synth), START)  # the follow reports until it stops
        data.points.update({k: v for k, v in keep.points.items() if k[1] == "LakeFreshnessSeconds"})
    elif alarm == "leases-table-throttled":
        table = {"TableName": settings.leases_table_name}
        data.extend("AWS/DynamoDB", "WriteThrottleEvents", table, [(t, 4.0) for t in at])
    elif alarm == "stalled-shards":  # by shard: the alarm's contributors
        shard = {"Operation": "ProcessTask", "ShardId": "shardId-00000001700000000000-0001"}
        data.extend(namespace, "StalledShards", shard, [(t, 1.0) for t in at])
    elif alarm == "processing-stopped":  # the source table still written to, nothing processed
        for key in [k for k in data.points if k[1] == "RecordsProcessed"]:
            data.points[key] = [(t, v) for t, v in data.points[key] if int(t // 60) not in minutes]
    else:
        metric = {
            "leases-lost": "LostLeases",
            "ready-shards-unassigned": "ReadyLeasesUnassigned",
            "telemetry-dropped": "TelemetryDropped",
            "telemetry-send-failures": "TelemetrySendFailures",
            "records-lost-to-trimming": "RecordsTrimmedLost",
            "dead-letters": "RecordsSentToDeadLetter",
            "leases-not-taken": "LeasesNotTaken",
            "lease-tables-failing": "LeaseTableErrors",
        }[alarm]
        worker_event(settings, data, metric, minutes)
    return data


# alarm -> (minutes a lasting failure takes to page, whether one event alone may page)
PAGES = {
    "workers-silent": (10, False),
    "leases-lost": (3, False),
    "leases-table-throttled": (3, False),
    "ready-shards-unassigned": (3, False),
    "telemetry-dropped": (10, False),
    "telemetry-send-failures": (10, False),
    "stalled-shards": (10, False),
    "leases-not-taken": (3, False),
    "lease-tables-failing": (3, False),
    "processing-stopped": (5, False),
    "lake-freshness": (3, False),
    "records-lost-to-trimming": (1, True),
    "dead-letters": (1, True),
}


def test_every_paging_alarm_has_a_stated_time_to_page(synth: Synthesized) -> None:
    paging = {
        name
        for name, alarm in alarms_of(synth).items()
        if not any("Fn::GetAtt" in a for a in alarm.get("AlarmActions", []))
    }
    # The two left out: a lag of a quarter of the retention pages in its 5-minute period; the group
    # at its maximum and still behind, in 3 scaling periods.
    assert paging <= {*PAGES, "lag-near-retention", "group-at-max"}, paging


def _period_minutes(definition: dict[str, Any]) -> int:
    if "Period" in definition:
        return int(definition["Period"]) // 60
    periods = {
        int(q.get("Period") or q.get("MetricStat", {}).get("Period") or 0) for q in definition["Metrics"]
    }
    return max(periods) // 60


def test_on_a_fresh_deploy_no_alarm_is_red(synth: Synthesized) -> None:
    """The stacks were just created: the group exists (its creation waited for the boot signals, the
    workers' first rounds), the workers have reported for two minutes, no ``follow`` has run yet."""
    fleet = synth.settings.fleet
    n = synth.settings.table.expected_partitions()[0]
    size = max(fleet.min_instances, 1)
    data = publish(
        synth.settings,
        FleetState(size, steady_leases(n), n, steady_load(synth.settings, size)),
        _group_name(synth),
        MINUTES,
        first_minute=MINUTES - 2,
        lake=False,
    )
    states = {name: alarm_state(alarm, data, 0, MINUTES * 60) for name, alarm in alarms_of(synth).items()}
    assert "ALARM" not in states.values(), states
    if "lake-freshness" in states:  # the state every alarm starts in: no change, no page
        assert states["lake-freshness"] == "INSUFFICIENT_DATA"


@pytest.mark.parametrize("alarm", sorted(PAGES))
def test_one_event_does_not_page_and_a_lasting_failure_pages_in_the_stated_time(
    synthesized: dict[str, Synthesized], alarm: str
) -> None:
    prod = synthesized["prod"]
    definition = alarms_of(prod)[alarm]
    within, at_once = PAGES[alarm]
    period = _period_minutes(definition)
    lasting = list(range(START, START + within))
    paging_state = "INSUFFICIENT_DATA" if alarm == "lake-freshness" else "ALARM"
    if alarm == "lake-freshness":
        assert definition["InsufficientDataActions"] == definition["AlarmActions"]
    data = _failing(prod, alarm, lasting)
    assert alarm_state(definition, data, 0, (START + within) * 60) == paging_state, alarm
    assert alarm_state(definition, data, 0, (START + within - period) * 60) == "OK", alarm
    if alarm in ("workers-silent", "lake-freshness"):
        return
    once = _failing(prod, alarm, [START])
    later = [alarm_state(definition, once, 0, (START + m) * 60) for m in range(period, 15, period)]
    assert ("ALARM" in later) == at_once, (alarm, later)
