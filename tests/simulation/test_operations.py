"""The deployed fleet's operational promises, short form: 42 seeded histories of the fleet model
(simulation/fleet_ops) in ``make test``; the long form (2 000) is ``python -m bench operations``.

The short form is the directed histories (each puts one fault of issue 46's list where it must be
found), slices of each data-path kind run by the real worker (two rollovers, one hang of each kind),
and drawn histories of every fleet kind but the tenfold load walk (its directed history covers it; a
drawn one takes four seconds): 24 drawn, each kind twice (tables six times, boot four), so that
``make test`` stays near its ten minutes; the long form draws the rest.
Every one must keep every promise. test_ops_checker.py shows the checker failing where it must.
"""

from __future__ import annotations

import itertools
import logging
import os

import pytest

from simulation.fleet_ops.histories import history
from simulation.fleet_ops.promises import Outcome
from simulation.fleet_ops.scenarios import DIRECTED, KINDS
from simulation.fleet_ops.slices import SLICE_KINDS

DRAWN_KINDS = [kind for kind, _ in KINDS if kind != "load"] + ["tables", "tables", "boot"]
# Slices of the data path (real workers): on 694e0be these rollovers had children wait for a full
# scan (1.5 and 4.4 taking intervals), and these hangs were never moved. A hang slice costs some
# 11 CPU s (ten simulated minutes of three real workers, to judge the page too), a drawn history
# under one: the short form keeps one hang of each kind, on different seeds (8 shards, the hang in
# w2; 7 shards, in w1); the other two are LONG_SLICES (OPERATIONS_LONG=1; the long form draws
# hundreds of slices).
SLICE_SEEDS = {"rollover": (15, 16), "hung-processor": (11,), "hung-read": (12,)}
LONG_SLICES = ((12, "hung-processor"), (11, "hung-read"))
FIRST_SEED = 1  # the long form starts at 1 000 000
BLOCKS = 4
SHORT_FORM = 42


def short_form() -> list[tuple[int, str]]:
    runs = [(0, name) for name in DIRECTED]
    runs += [(seed, kind) for kind in SLICE_KINDS for seed in SLICE_SEEDS[kind]]
    kinds = itertools.cycle(DRAWN_KINDS)
    seed = FIRST_SEED
    while len(runs) < SHORT_FORM:
        runs.append((seed, next(kinds)))
        seed += 1
    return runs


@pytest.fixture(autouse=True)
def _quiet() -> object:
    """The workers' expected warnings (throttles, failed rounds, lost leases) would drown the report."""
    logging.disable(logging.CRITICAL)
    yield None
    logging.disable(logging.NOTSET)


def test_the_short_form_is_forty_two_histories_of_every_kind() -> None:
    runs = short_form()
    assert len(runs) == SHORT_FORM and len(set(runs)) == SHORT_FORM
    assert {k for _, k in runs} >= set(DIRECTED) | set(SLICE_KINDS) | set(DRAWN_KINDS)


@pytest.mark.parametrize("block", range(BLOCKS))
def test_every_history_of_the_short_form_keeps_every_promise(block: int) -> None:
    broken: list[Outcome] = []
    runs = short_form()[block::BLOCKS]
    for seed, kind in runs:
        outcome = history(seed, kind)
        if not outcome.verdict.ok:
            broken.append(outcome)
    report = "\n".join(f"seed {o.seed} {o.scenario}: {o.verdict}" for o in broken)
    assert not broken, f"{len(broken)} of {len(runs)} histories broke a promise:\n{report}"


@pytest.mark.skipif(not os.environ.get("OPERATIONS_LONG"), reason="long form: set OPERATIONS_LONG=1")
@pytest.mark.parametrize(("seed", "kind"), LONG_SLICES)
def test_the_other_hang_slices_keep_every_promise(seed: int, kind: str) -> None:
    outcome = history(seed, kind)
    assert outcome.verdict.ok, f"seed {seed} {outcome.scenario}: {outcome.verdict}"


def test_a_seed_replays_exactly() -> None:
    first = history(3, "tables", keep=True)
    again = history(3, "tables", keep=True)
    assert first.fleet is not None and again.fleet is not None
    assert str(first.verdict) == str(again.verdict)
    assert [(t.at, t.alarm, t.state) for t in first.fleet.alarms.transitions] == [
        (t.at, t.alarm, t.state) for t in again.fleet.alarms.transitions
    ]
    assert [(s.at, s.desired, s.processed, s.lag) for s in first.fleet.samples] == [
        (s.at, s.desired, s.processed, s.lag) for s in again.fleet.samples
    ]
    assert first.fleet.loop.events == again.fleet.loop.events


def test_a_scale_out_during_a_deploy_outlives_the_old_group() -> None:
    """The long form's seed 1 000 232 (at 6f589d3): load x10, a deploy while the group grew; the old
    group's scale-out a minute into the deploy was undone when CloudFormation deleted it, the new
    group still at the size read when the deploy began. Its Custom::FleetSizeCarried resource now
    sets the new group to the old one's size before the old one goes."""
    outcome = history(1_000_232, keep=True)
    assert outcome.fleet is not None
    assert "load x10" in outcome.scenario and "deploy at" in outcome.scenario
    update = next(o for o in outcome.fleet.stack.operations if o.kind == "update")
    old = outcome.fleet.stack.groups[0]
    grown = [a for a in old.activities if update.started < a.at < (update.ended or 0)]
    assert [a.desired_to - a.desired_from for a in grown] == [1]  # the case: the old group grew meanwhile
    assert not outcome.verdict.scaling_flaps, outcome.verdict
    assert outcome.verdict.ok, outcome.verdict
