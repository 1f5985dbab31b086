"""The worker's start-up heap: frozen for the collector, with the young threshold raised, and
botocore's data read once for all of its clients."""

from __future__ import annotations

import gc
from pathlib import Path

import botocore.loaders
import pytest

from consumer.runtime.clients import AwsClients, stream_client_config, user_agent
from consumer.runtime.gc_tuning import OLDER_THRESHOLDS, YOUNG_THRESHOLD, tune_for_long_running
from ground.settings import load_settings

REPO = Path(__file__).resolve().parents[3]


def test_tuning_freezes_what_lives_and_raises_the_thresholds() -> None:
    kept = [object() for _ in range(1000)]  # noqa: F841 - alive during the call, so frozen by it
    before = gc.get_threshold()
    try:
        replaced = tune_for_long_running()
        assert replaced == before
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_clients_send_a_fixed_user_agent_naming_the_product() -> None:
    agent = user_agent()
    assert agent.startswith("dynamodb-stream-consumer/") and " botocore/" in agent and " Python/" in agent
    assert stream_client_config().user_agent == agent


def test_a_workers_clients_read_each_of_botocores_data_files_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One session for all of a worker's clients: endpoints, partitions and each service's model are
    parsed once per process, not once per client (which cost a worker some 0.5 CPU s and 170 000
    more objects at every start)."""
    read: list[str] = []
    load_file = botocore.loaders.JSONFileLoader.load_file

    def counted(self: botocore.loaders.JSONFileLoader, file_path: str) -> object:
        found = load_file(self, file_path)
        if found is not None:
            read.append(file_path)
        return found

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", counted)
    clients = AwsClients.from_settings(load_settings("local", REPO / "config"))
    assert clients.leases is not clients.dynamodb and clients.describe is not clients.streams
    assert any(path.endswith("endpoints") for path in read), read
    assert [path for path in set(read) if read.count(path) > 1] == []
