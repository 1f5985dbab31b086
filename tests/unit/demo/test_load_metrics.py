"""The load generator publishes its writes as ``TableWrites``: locally, the dashboard's writes line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from consumer.telemetry.metric_names import LOAD_GENERATOR_OPERATION
from consumer.telemetry.metrics import MetricsRecorder
from consumer.telemetry.transports import InMemoryTransport
from ground.settings import LoadSettings, Settings
from tools.dashboard.readback import points_of_all
from tools.demo.load import LoadGenerator


class RecordingTable:
    """Accepts every write, as a table would; remembers how many it took."""

    def __init__(self) -> None:
        self.calls = 0

    def _write(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        return {}

    put_item = update_item = delete_item = _write


def test_every_write_is_counted_as_table_writes(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {"application_name": "load-test", "table": {"name": "orders", "partition_key": {"name": "pk"}}}
    )
    transport = InMemoryTransport()
    recorder = MetricsRecorder(settings, "load-generator", transport, sample_process=False)
    table = RecordingTable()
    load = LoadGenerator(
        table,
        settings.table,
        LoadSettings(writes_per_second=2000, keys=10, seed=7),
        tmp_path / "oracle.jsonl",
        metrics=recorder,
    )
    written = load.run(duration_seconds=0.05)
    recorder.stop(timeout_seconds=5)

    assert written > 0 and written == table.calls == load.writes
    points = [p for p in points_of_all(transport.documents) if p.name == "TableWrites"]
    assert sum(v for p in points for v in p.values) == written
    assert {(p.operation, p.worker) for p in points} == {(LOAD_GENERATOR_OPERATION, "load-generator")}
