"""What the demo does to its fleet while the load runs, and undoes in time.

The plain demo follows a script (a worker joins at 25 % of the load, a shard splits at 35 %, a
worker that holds a lease is SIGKILLed at 50 %); chaos mode runs a seeded plan instead
(:mod:`tools.demo.chaos`: kills, SIGSTOPs around the failover time, restarts, stream and table
faults, splits). What an action leaves to undo (a frozen worker, faults switched on) is an
:class:`Undo` due at a time; every act is noted in the fleet's events as it happens.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulator.control import EmulatorControl
from emulator.faults import FaultSettings
from ground.settings import Settings
from tools.demo.chaos import ChaosAction, FaultValue
from tools.demo.events import FleetEvents, short_shard
from tools.demo.fleet import LocalFleet
from tools.demo.tables import DemoTable


@dataclass(frozen=True, order=True)
class Undo:
    """Something a chaos action does later: resume a frozen worker (``resume:<name>``) or put the
    fault settings ``names`` back to their baseline (``what`` is the action's kind)."""

    due: float
    what: str
    names: tuple[str, ...] = ()


class Disruptions:
    """The acts of one demo run on its fleet, each noted (``note``) at the demo's time (``elapsed``)."""

    def __init__(
        self,
        settings: Settings,
        tables: list[DemoTable],
        ddb: Any,
        control: EmulatorControl,
        events: FleetEvents,
        *,
        note: Callable[[str], None],
        elapsed: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.tables = tables
        self.ddb = ddb
        self.control = control
        self.events = events
        self.note = note
        self.elapsed = elapsed

    def _split(self, rng: random.Random | None) -> str:
        """Split a shard of the one table, or (several streams, chaos) of one chosen by ``rng``."""
        table = rng.choice(self.tables) if rng is not None and len(self.tables) > 1 else self.tables[0]
        children = self.control.split(table.name)
        where = f" of {table.name}" if len(self.tables) > 1 else ""
        return f"split{where}: children {', '.join(short_shard(c) for c in children)}"

    def _holder(self, fleet: LocalFleet) -> str | None:
        """A worker that holds a lease now (the one the script kills), or None when none does yet."""
        try:
            items = self.ddb.scan(TableName=self.settings.leases_table_name).get("Items", [])
        except self.ddb.exceptions.ResourceNotFoundException:
            return None  # no worker has created the leases table yet (a slow start): anyone will do
        owners = [
            i["leaseOwner"]["S"]
            for i in items
            if "leaseOwner" in i and not i["leaseKey"]["S"].startswith("__")
        ]
        for name in fleet.workers:
            if any(owner.startswith(f"{name}@") for owner in owners):
                return name
        return None

    def _start(self, fleet: LocalFleet, why: str) -> None:
        name = fleet.start_worker().name
        self.note(f"{name} started ({why})")

    def _kill(self, fleet: LocalFleet, victim: str, why: str) -> None:
        self.events.fate[victim] = "SIGKILL"
        fleet.kill(victim)
        self.note(f"SIGKILL {victim} ({why})")

    def scripted(self, fleet: LocalFleet, script: dict[str, float], elapsed: float) -> None:
        """The plain demo: a worker joins at 25 %, a split at 35 %, a lease holder is killed at 50 %."""
        if script.get("join", 0) and elapsed >= script["join"]:
            self._start(fleet, "joins the fleet")
            script["join"] = 0
        if script.get("split", 0) and elapsed >= script["split"]:
            self.note(self._split(None).replace(": children", ": a shard closed; children", 1))
            script["split"] = 0
        if script.get("kill", 0) and elapsed >= script["kill"]:
            victim = self._holder(fleet) or next(iter(fleet.workers))
            self._kill(fleet, victim, "it held leases")
            script["kill"] = 0

    def chaos(self, fleet: LocalFleet, action: ChaosAction, rng: random.Random, undo: list[Undo]) -> None:
        running = [w.name for w in fleet.alive() if not w.paused]
        victim = rng.choice(running) if running else None
        if action.kind == "kill" and victim:
            self._kill(fleet, victim, "chaos")
            self._start(fleet, f"replaces {victim}")
        elif action.kind == "pause" and victim:
            self._pause(fleet, action, rng, victim=victim, running=running, undo=undo)
        elif action.kind == "restart" and victim:
            self.events.fate[victim] = "SIGTERM"
            code = fleet.terminate(victim)
            self.note(f"SIGTERM {victim}: exited {code} (chaos restart)")
            self._start(fleet, f"replaces {victim}")
        elif action.kind in ("stream-faults", "table-faults"):
            changes: dict[str, FaultValue | str] = dict(action.fault_changes)
            scope = ""
            if action.scope == "leases":
                changes["table_fault_tables"] = self._leases_tables()
                scope = " (leases tables)"
            self.control.set_faults(**changes)
            undo.append(Undo(self.elapsed() + action.seconds, action.kind, tuple(action.fault_changes)))
            self.note(f"{action.kind}{scope} on for {action.seconds:g} s: {action.fault_changes}")
        elif action.kind == "split":
            self.note(self._split(rng))

    def _pause(
        self,
        fleet: LocalFleet,
        action: ChaosAction,
        rng: random.Random,
        *,
        victim: str,
        running: list[str],
        undo: list[Undo],
    ) -> None:
        """SIGSTOP ``victim`` and, for a multi-worker pause, more running workers; a pause freezes
        the last running worker only when the action asks for the whole fleet."""
        count = len(running) if action.whole_fleet else min(action.workers, len(running) - 1)
        if count < 1:
            return
        others = [name for name in running if name != victim]
        victims = [victim, *rng.sample(others, count - 1)]
        failover = self.settings.worker.failover_time_millis / 1000
        relation = "longer" if action.seconds > failover else "shorter"
        for name in victims:
            self.events.paused(name, time.time())
            fleet.pause(name)
            undo.append(Undo(self.elapsed() + action.seconds, f"resume:{name}"))
            self.note(
                f"SIGSTOP {name} for {action.seconds:.1f} s "
                f"(chaos: {action.seconds / failover:.2f} x failover, {relation} than the failover time"
                f"{'; the whole fleet' if action.whole_fleet else ''})"
            )

    def _leases_tables(self) -> str:
        """The emulator's table_fault_tables for this application's leases and workers tables."""
        leases = self.settings.leases_table_name
        workers = getattr(self.settings, "workers_table_name", None) or f"{leases}-workers"
        return f"{leases},{workers}"

    def _baseline(self, name: str) -> FaultValue:
        """What a fault setting is outside chaos: the configured stream faults, else the default."""
        configured = self.settings.emulator.faults
        value: FaultValue = (
            getattr(configured, name) if hasattr(configured, name) else getattr(FaultSettings(), name)
        )
        return value

    def undo(self, fleet: LocalFleet, item: Undo) -> None:
        if item.what.startswith("resume:"):
            name = item.what.split(":", 1)[1]
            if fleet.workers[name].alive:
                fleet.resume(name)
                self.events.resumed(name, time.time())
                self.note(f"SIGCONT {name}")
        else:
            self.control.set_faults(**{name: self._baseline(name) for name in item.names})
            self.note(f"{item.what} off")
