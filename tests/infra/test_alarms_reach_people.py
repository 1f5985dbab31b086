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
from tests.infra.fleet_metrics import FleetState, publish, scan_pages, steady_leases, steady_load
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
