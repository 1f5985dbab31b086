"""The demo's tables: one, or each of ``streams:`` when the environment lists several.

Each table gets its own load (its own seed and oracle), its own change log and its own verdict:
a change of one table landing in another's change log, or lost behind another table's
traffic, shows in that table's verdict. The fleet is one: the same workers serve every table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ground.settings import LoadSettings, Settings

# The chaos demo's slow changelog (tools/demo/slow.py): every EVERY-th batch of a shard sleeps.
SLOW_PROCESSOR = "tools.demo.slow:SlowChangelog"
SLOW_EVERY = 25


@dataclass(frozen=True)
class DemoTable:
    """One table of the demo: its view of the settings (Settings.per_stream), where its change log
    lands and where its load's oracle is written."""

    settings: Settings
    changelog: Path
    oracle: Path

    @property
    def name(self) -> str:
        return self.settings.table.name

    @property
    def key(self) -> str:
        return self.settings.table.partition_key.name

    def load(self, index: int) -> LoadSettings:
        """This table's load: the environment's, with a seed of its own (the same writes to every
        table would hide a change delivered to the wrong one)."""
        load = self.settings.load
        return load if index == 0 else load.model_copy(update={"seed": load.seed + index})


def demo_tables(settings: Settings, workdir: Path) -> list[DemoTable]:
    """The one table (its oracle ``oracle.jsonl``, as before), or every stream's."""
    views = settings.per_stream()
    return [
        DemoTable(
            view,
            Path(str(view.processing.options.get("destination", workdir / "changelog"))),
            workdir / ("oracle.jsonl" if len(views) == 1 else f"oracle-{view.table.name}.jsonl"),
        )
        for view in views
    ]


def slow_streams_config(settings: Settings, config_dir: Path, workdir: Path, delay_millis: int) -> Path:
    """A copy of ``config_dir`` whose ``<env>.yaml`` gives every stream the chaos demo's slow
    changelog, writing to that stream's own change log, with its own processing otherwise.

    One stream is switched with ``CONSUMER_PROCESSING__*`` variables; a list's entries cannot be
    addressed by variables, so several streams get the list written out in full."""
    copied = workdir / "config"
    copied.mkdir(parents=True, exist_ok=True)
    for source in config_dir.glob("*.yaml"):
        (copied / source.name).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    env_file = copied / f"{settings.env}.yaml"
    data: dict[str, Any] = yaml.safe_load(env_file.read_text(encoding="utf-8")) or {}
    data["streams"] = [
        {
            "table": view.table.model_dump(mode="json"),
            "processing": {
                **view.processing.model_dump(mode="json"),
                "processor": SLOW_PROCESSOR,
                "options": {
                    "destination": str(table.changelog),
                    "table": table.name,
                    "delay_millis": delay_millis,
                    "every": SLOW_EVERY,
                },
            },
        }
        for view, table in ((t.settings, t) for t in demo_tables(settings, workdir))
    ]
    env_file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return copied
