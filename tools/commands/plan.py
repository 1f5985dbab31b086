"""``consumer plan``: capacity figures for one environment, each with its formula."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from tools.commands import add_command, add_env_arguments, settings_from
from tools.planning import make_plan


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "plan",
        "size the fleet and the leases table from the settings (each figure with its formula)",
        "Size the fleet and the leases table from config/<env>.yaml: the configured values read, "
        "every figure with its formula (N partitions, shards, workers, leases per worker, memory, "
        "leases-table units), a warning where a configured value puts the fleet at risk, and a note "
        "where it is a choice the plan only prices.",
    )
    add_env_arguments(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=_plan)


def _plan(args: argparse.Namespace) -> int:
    plan = make_plan(settings_from(args))
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2))
        return 0
    console = Console(width=160)
    inputs = Table(title=f"Inputs: the configured values of env {plan.env} the plan reads")
    inputs.add_column("setting")
    inputs.add_column("configured", justify="right")
    for key, value in plan.inputs:
        inputs.add_row(key, value)
    console.print(inputs)
    table = Table(title=f"Capacity plan for env {plan.env}", show_lines=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("unit")
    table.add_column("formula", overflow="fold")
    for figure in plan.figures:
        value = f"{figure.value:,.0f}" if float(figure.value).is_integer() else f"{figure.value:,.2f}"
        table.add_row(figure.name, value, figure.unit, figure.formula)
    console.print(table)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    for note in plan.notes:
        console.print(f"[dim]note:[/dim] {note}")
    return 0
