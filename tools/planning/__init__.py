"""``consumer plan``: the usual sizing formulas for DynamoDB Streams consumers applied to one
environment's settings (:mod:`tools.planning.plan`), each figure with its formula
(:mod:`tools.planning.figures`); the leases table's traffic is :mod:`tools.planning.leases_table`.
"""

from __future__ import annotations

from tools.planning.figures import Figure, Plan
from tools.planning.plan import make_plan, plan_inputs

__all__ = ["Figure", "Plan", "make_plan", "plan_inputs"]
