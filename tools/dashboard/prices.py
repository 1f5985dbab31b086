"""The list prices the dashboard's cost panel multiplies by.

us-east-1, as AWS's DynamoDB pricing pages list them and docs/deploy.md's cost table quotes them;
other regions list up to about a fifth more. A rate shown "per month" is that rate held for
730 hours, the month AWS's own calculator uses. The free tier (2.5 M stream read requests a month,
for every stream of an account and region together) is not taken off: the panel shows what a rate
costs, not a bill.
"""

from __future__ import annotations

HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600

STREAM_READ_REQUEST = 0.02 / 100_000
"""$ per streams read request unit: one GetRecords call, whatever it returns (up to 1 MB)."""
ON_DEMAND_READ_UNIT = 0.125 / 1_000_000
"""$ per read request unit of an on-demand table."""
ON_DEMAND_WRITE_UNIT = 0.625 / 1_000_000
"""$ per write request unit of an on-demand table."""
PROVISIONED_RCU_HOUR = 0.00013
"""$ per provisioned read capacity unit and hour."""
PROVISIONED_WCU_HOUR = 0.00065
"""$ per provisioned write capacity unit and hour."""


def per_month(price_per_unit: float) -> float:
    """What one unit per second costs in a month: the factor a rate per second is multiplied by."""
    return price_per_unit * SECONDS_PER_MONTH


def provisioned_per_month(read_units: float, write_units: float) -> float:
    """A provisioned table's capacity for a month, used or not."""
    return (read_units * PROVISIONED_RCU_HOUR + write_units * PROVISIONED_WCU_HOUR) * HOURS_PER_MONTH
