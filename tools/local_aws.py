"""What a machine with no AWS account needs to run against the local emulator.

The emulator accepts any credentials, but boto3 refuses to send a request without some ("Unable to
locate credentials" on a newcomer's first ``consumer run``). When
``endpoint_url`` is a loopback address, :func:`use_local_credentials` supplies dummy ones (never
replacing credentials or a profile the user chose). :func:`create_local_tables` creates what the
configuration names — the source table with its key schema and stream, and the replica table of the
``dynamodb_replica`` sink — so nobody has to work the key schema out of ``base.yaml``.
:func:`write_sample_items` puts a few items in the source table, the "write something" step of the
first processor, and :func:`shards_behind` tells when a worker has processed them. The emulators
``consumer local up`` started are recorded one file per environment (:class:`EmulatorState`), so
environments on one machine each get their own and a command never attaches to another's.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ground.settings import KeyAttribute, Settings, is_loopback_endpoint

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}


def is_local_endpoint(endpoint_url: str | None) -> bool:
    """True for ``http://127.0.0.1:4599`` and the like: an emulator on this machine."""
    return is_loopback_endpoint(endpoint_url)


def use_local_credentials(settings: Settings, environ: Any = None) -> bool:
    """Put dummy credentials in the environment when the endpoint is local and none are set.

    Only the environment is consulted (not the instance metadata service, whose time-outs would
    slow every local command down); a profile the user selected is left alone. Returns whether
    dummy credentials were supplied.
    """
    environ = os.environ if environ is None else environ
    if not is_local_endpoint(settings.endpoint_url):
        return False
    if environ.get("AWS_ACCESS_KEY_ID") or environ.get("AWS_PROFILE"):
        return False
    for name, value in DUMMY_CREDENTIALS.items():
        environ[name] = value
    return True


def endpoint_answers(endpoint_url: str, timeout: float = 2.0) -> bool:
    """Whether something accepts TCP connections at the endpoint's host and port."""
    parts = urlsplit(endpoint_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class TableSpec:
    """A table the configuration names, with the key schema and stream it needs."""

    name: str
    role: str
    partition_key: KeyAttribute
    sort_key: KeyAttribute | None
    stream_view_type: str | None

    def create_arguments(self) -> dict[str, Any]:
        keys = [(self.partition_key, "HASH")] + ([(self.sort_key, "RANGE")] if self.sort_key else [])
        arguments: dict[str, Any] = {
            "TableName": self.name,
            "KeySchema": [{"AttributeName": key.name, "KeyType": kind} for key, kind in keys],
            "AttributeDefinitions": [
                {"AttributeName": key.name, "AttributeType": key.type} for key, _ in keys
            ],
            "BillingMode": "PAY_PER_REQUEST",
        }
        if self.stream_view_type is not None:
            arguments["StreamSpecification"] = {
                "StreamEnabled": True,
                "StreamViewType": self.stream_view_type,
            }
        return arguments


def configured_tables(settings: Settings) -> list[TableSpec]:
    """The source table (with its stream), the window-state table when tumbling windows are on, and,
    for ``dynamodb_replica``, the replica tables; those of each stream with several (``streams:``).

    The leases and workers tables are not listed: the worker creates them itself, as on AWS.
    """
    specs: list[TableSpec] = []
    for view in settings.per_stream():
        specs += [spec for spec in _stream_tables(view) if spec.name not in {known.name for known in specs}]
    return specs


def _stream_tables(settings: Settings) -> list[TableSpec]:
    """One stream's tables (``settings`` is its view, Settings.per_stream)."""
    table = settings.table
    source = table.existing_table_name or table.name
    specs = [TableSpec(source, "source table", table.partition_key, table.sort_key, table.stream_view_type)]
    if settings.processing.tumbling_window_seconds > 0:
        # consumer.processing.window_state.DynamoDBWindowStateStore's items (never in the leases table).
        specs.append(
            TableSpec(
                settings.window_state_table_name,
                "window-state table",
                KeyAttribute(name="shard", type="S"),
                KeyAttribute(name="sequence", type="S"),
                None,
            )
        )
    if settings.processing.processor == "dynamodb_replica":
        options: Mapping[str, Any] = settings.processing.options
        if options.get("region") or options.get("endpoint_url"):
            return specs  # elsewhere: not this emulator's to create
        for key, role in (("table", "replica table"), ("tombstone_table", "replica tombstone table")):
            name = options.get(key)
            if isinstance(name, str) and name:
                specs.append(TableSpec(name, role, table.partition_key, table.sort_key, None))
    return specs


def create_local_tables(settings: Settings, dynamodb: Any, timeout: float = 30.0) -> list[str]:
    """Create every configured table that does not exist yet; one line per table, for the user."""
    existing: set[str] = set()
    for page in dynamodb.get_paginator("list_tables").paginate():
        existing.update(page.get("TableNames", []))
    lines = []
    for spec in configured_tables(settings):
        if spec.name in existing:
            lines.append(f"{spec.role} {spec.name}: already there")
            continue
        dynamodb.create_table(**spec.create_arguments())
        _wait_active(dynamodb, spec.name, timeout)
        stream = f", stream {spec.stream_view_type}" if spec.stream_view_type else ""
        keys = spec.partition_key.name + (f" + {spec.sort_key.name}" if spec.sort_key else "")
        lines.append(f"{spec.role} {spec.name}: created (key {keys}{stream})")
    return lines


def _wait_active(dynamodb: Any, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dynamodb.describe_table(TableName=name)["Table"].get("TableStatus") == "ACTIVE":
            return
        time.sleep(0.1)
    raise TimeoutError(f"table {name} did not become ACTIVE within {timeout:g} s")


def _key_value(key: KeyAttribute, text: str, number: int) -> dict[str, str]:
    if key.type == "N":
        return {"N": str(number)}
    if key.type == "B":
        return {"B": text}
    return {"S": text}


def sample_item(settings: Settings, number: int, written_at: str = "") -> dict[str, Any]:
    """Item ``number`` in the source table's key schema (low-level attribute values). ``written_at``
    makes each run's items new values: DynamoDB Streams records no change for an item written again
    as it was, so a second `local write` of the same items would otherwise deliver nothing."""
    table = settings.table
    item: dict[str, Any] = {
        table.partition_key.name: _key_value(table.partition_key, f"item-{number}", number)
    }
    if table.sort_key is not None:
        item[table.sort_key.name] = _key_value(table.sort_key, "v1", 1)
    item["quantity"] = {"N": str(number)}
    item["written_by"] = {"S": "consumer local write"}
    if written_at:
        item["written_at"] = {"S": written_at}
    return item


def write_sample_items(
    settings: Settings, dynamodb: Any, count: int, first: int = 1, written_at: str = ""
) -> list[dict[str, Any]]:
    """Put ``count`` sample items into the source table; returns them."""
    name = settings.table.existing_table_name or settings.table.name
    items = [sample_item(settings, number, written_at) for number in range(first, first + count)]
    for item in items:
        dynamodb.put_item(TableName=name, Item=item)
    return items


# ------------------------------------------------------------------ emulators started by `local up`

STATE_DIR = Path("var")


@dataclass(frozen=True)
class EmulatorState:
    """An emulator `consumer local up` started from this directory: ``var/emulator-<env>.json``."""

    env: str | None  # None: a file written before each environment had its own
    pid: int
    endpoint: str
    path: Path

    @property
    def alive(self) -> bool:
        return process_alive(self.pid)


def state_path(env: str, directory: Path = STATE_DIR) -> Path:
    return directory / f"emulator-{env}.json"


def write_state(env: str, pid: int, endpoint: str, directory: Path = STATE_DIR) -> Path:
    path = state_path(env, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"env": env, "pid": pid, "endpoint": endpoint}))
    return path


def read_states(directory: Path = STATE_DIR) -> list[EmulatorState]:
    """Every emulator recorded in ``directory`` (alive or not), oldest file name first."""
    states = []
    for path in sorted(directory.glob("emulator*.json")):
        try:
            data = json.loads(path.read_text())
            states.append(EmulatorState(data.get("env"), int(data["pid"]), str(data["endpoint"]), path))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return states


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _address(endpoint: str) -> tuple[str, int | None]:
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    return ("127.0.0.1" if host in ("localhost", "::1") else host), parts.port


def another_environments_emulator(settings: Settings, directory: Path = STATE_DIR) -> EmulatorState | None:
    """A running emulator that `local up` started for another environment at this one's endpoint.

    Two environments that share a port would share one emulator: their tables, their leases and
    (for a processor writing files) each other's output. This is what lets a command say so
    instead of quietly attaching to the wrong one.
    """
    if settings.endpoint_url is None:
        return None
    mine = _address(settings.endpoint_url)
    for state in read_states(directory):
        if state.env not in (None, settings.env) and _address(state.endpoint) == mine and state.alive:
            return state
    return None


# ------------------------------------------------------------------ waiting for a worker


def stream_positions(shards: list[dict[str, Any]]) -> dict[str, str | None]:
    """Each shard's last sequence number (None: no record yet), from the emulator's shard table."""
    return {str(row["shardId"]): row.get("lastSequenceNumber") for row in shards if not row.get("removed")}


def records_arrived(before: Mapping[str, str | None], after: Mapping[str, str | None]) -> bool:
    """Did any shard take a record between the two readings (a new shard with a record counts)?"""
    return any(last is not None and before.get(shard) != last for shard, last in after.items())


def shards_behind(shards: list[dict[str, Any]], leases: Mapping[str, Any]) -> list[str]:
    """The shards holding records that no worker has checkpointed past yet.

    ``shards`` are rows of the emulator's shard table (``shardId``, ``parentShardId``,
    ``lastSequenceNumber``, ``removed``); ``leases`` maps shard id to its lease (a
    :class:`consumer.leases.model.Lease`). A shard is done when its lease is finished or checkpointed
    at or past its last record, or when it has no lease but a leased shard descends from it (a
    finished lease is deleted once its children start, ``cleanup_leases_upon_shard_completion``).
    """
    from consumer.api.leases import ExtendedSequenceNumber

    parent = {row["shardId"]: row.get("parentShardId") for row in shards}
    ancestors_of_leased: set[str] = set()
    for shard_id in leases:
        current = parent.get(shard_id)
        while current is not None and current not in ancestors_of_leased:
            ancestors_of_leased.add(current)
            current = parent.get(current)
    behind = []
    for row in shards:
        last = row.get("lastSequenceNumber")
        if last is None or row.get("removed"):
            continue
        lease = leases.get(row["shardId"])
        if lease is None:
            if row["shardId"] not in ancestors_of_leased:
                behind.append(row["shardId"])
        elif not lease.finished and not ExtendedSequenceNumber(str(last)) <= lease.checkpoint:
            behind.append(row["shardId"])
    return behind
