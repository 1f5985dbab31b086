"""``consumer plan``: capacity figures for one environment, each with its formula."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from consumer.commands import add_env_arguments, settings_from
from consumer.planning import make_plan


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan", help="size the fleet and the leases table from the settings (seed formulas)"
    )
    add_env_arguments(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=_plan)


def _plan(args: argparse.Namespace) -> int:
    plan = make_plan(settings_from(args))
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2))
        return 0
    table = Table(title=f"Capacity plan for env {plan.env}", show_lines=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("unit")
    table.add_column("formula", overflow="fold")
    for figure in plan.figures:
        value = f"{figure.value:,.0f}" if float(figure.value).is_integer() else f"{figure.value:,.2f}"
        table.add_row(figure.name, value, figure.unit, figure.formula)
    console = Console(width=160)
    console.print(table)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    return 0
