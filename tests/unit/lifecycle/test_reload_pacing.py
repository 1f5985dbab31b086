"""The reload's pace: a share of the table's read capacity, kept on the units each page consumed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from consumer.lifecycle.reload_pacing import IN_FLIGHT_RETRY_MILLIS, ReloadBudget, ReloadPacer, reload_rate
from ground.settings import WorkerSettings


def test_the_rate_is_the_share_of_provisioned_reads_or_the_stated_on_demand_rate() -> None:
    s = WorkerSettings(reload_read_share=0.2, reload_on_demand_read_units_per_second=50)
    provisioned = {"ProvisionedThroughput": {"ReadCapacityUnits": 40, "WriteCapacityUnits": 5}}
    assert reload_rate(provisioned, s).units_per_second == pytest.approx(8.0)
    on_demand = {
        "BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
        "ProvisionedThroughput": {"ReadCapacityUnits": 0},
    }
    rate = reload_rate(on_demand, s)
    assert rate.units_per_second == 50 and "on-demand" in rate.why


@pytest.mark.parametrize("share", [0, -0.1, 1.5])
def test_a_share_outside_0_to_1_is_refused(share: float) -> None:
    with pytest.raises(ValidationError, match="reload_read_share"):
        WorkerSettings(reload_read_share=share)


def test_a_page_waits_until_the_units_before_it_are_paid_for_and_idle_time_buys_no_burst() -> None:
    pacer = ReloadPacer(units_per_second=10)
    assert pacer.take(0) == 0
    pacer.spent(5, started=0)  # half a second's worth
    assert pacer.take(100) == 400
    assert pacer.take(500) == 0
    pacer.spent(1, started=60_000)  # a minute idle: counts from the page's own start
    assert pacer.take(60_000) == 100


def test_one_budget_paces_every_reload_of_the_worker_together() -> None:
    budget = ReloadBudget()
    assert budget.take(10, 0) == 0  # shard A's page starts
    assert budget.take(10, 0) == IN_FLIGHT_RETRY_MILLIS  # shard B may not start one beside it
    budget.spent(10, 20, 0)  # A's page: two seconds' worth
    assert budget.take(10, 5) == 1_995  # B waits for it to be paid for


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=1_000),
    pages=st.lists(
        st.tuples(st.floats(min_value=0.5, max_value=200), st.integers(min_value=0, max_value=3_000)),
        min_size=2,
        max_size=40,
    ),
)
def test_between_any_two_page_starts_the_units_consumed_stay_within_the_rate(
    rate: float, pages: list[tuple[float, int]]
) -> None:
    """Pages start whenever the pacer allows or later (a slow scan, other work): from any page's
    start to a later one's, the units of the pages in between (the first included) fit the rate."""
    pacer = ReloadPacer(rate)
    starts: list[int] = []
    now = 0
    for units, late in pages:
        now += late
        while (wait := pacer.take(now)) > 0:
            now += wait
        starts.append(now)
        pacer.spent(units, started=now)
    for i in range(len(pages)):
        for j in range(i + 1, len(pages)):
            consumed = sum(units for units, _ in pages[i:j])
            assert consumed <= rate * (starts[j] - starts[i]) / 1000 + 1e-6
