"""The window-state table exists, with the leases table's conventions and the worker's grants,
exactly when tumbling windows are on (processing.tumbling_window_seconds > 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.permissions import WINDOW_STATE_ACTIONS
from tests.infra.conftest import Synthesized, deployable_config, edit_yaml, resources_of, synthesize


def _window_tables(raw: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [t for t in resources_of(raw, "AWS::DynamoDB::Table") if t.get("TableName") == name]


def _granted(raw: dict[str, Any], actions: list[str]) -> list[dict[str, Any]]:
    found = []
    for policy in resources_of(raw, "AWS::IAM::Policy"):
        for statement in policy["PolicyDocument"]["Statement"]:
            if sorted(statement.get("Action", [])) == sorted(actions):
                found.append(statement)
    return found


def test_no_window_state_table_without_windows(synthesized: dict[str, Synthesized]) -> None:
    for synth in synthesized.values():
        assert synth.settings.processing.tumbling_window_seconds == 0
        assert _window_tables(synth.raw, synth.settings.window_state_table_name) == []
        assert _granted(synth.raw, WINDOW_STATE_ACTIONS) == []


def test_windows_bring_their_table_and_the_grants_to_it(tmp_path: Path) -> None:
    config = deployable_config(tmp_path)
    edit_yaml(config / "dev.yaml", {"processing.tumbling_window_seconds": 60})
    edited = synthesize("dev", tmp_path / "out", config_dir=config)
    name = edited.settings.window_state_table_name
    (table,) = _window_tables(edited.raw, name)
    assert table["KeySchema"] == [
        {"AttributeName": "shard", "KeyType": "HASH"},
        {"AttributeName": "sequence", "KeyType": "RANGE"},
    ]
    leases = _window_tables(edited.raw, edited.settings.leases_table_name)[0]
    for same in ("BillingMode", "SSESpecification", "PointInTimeRecoverySpecification"):
        assert table.get(same) == leases.get(same), same
    (grant,) = _granted(edited.raw, WINDOW_STATE_ACTIONS)
    assert name in str(grant["Resource"])
    outputs = edited.raw.get("Outputs", {})
    assert any(key.startswith("WindowStateTableName") for key in outputs)
