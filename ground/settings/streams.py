"""Several tables' streams served by one fleet: the optional ``streams:`` list.

Without ``streams:`` an environment processes one table (``table:``) with one processor
(``processing:``), exactly as before. With it, each entry names its own table and processing::

    streams:
      - table: {name: orders}
        processing: {options: {destination: var/changelog/orders}}
      - table: {name: customers, partition_key: {name: id, type: S}}
        processing: {processor: "lambda:handlers.customers", dead_letter: {type: none}}

An entry starts from the top-level ``table:`` and ``processing:`` (the environment's defaults,
``config/base.yaml`` sets them) with its own keys layered over them, as ``<env>.yaml`` is layered
over ``base.yaml``: a nested mapping merges key by key, an entry that names another processor
starts from no options (options belong to the processor they were written for). The top-level
``table`` and ``processing`` then mean the first entry's, so everything that reads one table (the
pipeline, a single table's tooling) reads the first.

One leases table serves every stream; each lease key is namespaced by its stream
(:mod:`consumer.streams.namespace`), and one fleet balances all of them together.

An entry may read a Kinesis data stream instead of its table's stream, with a ``source:`` of its
own (:mod:`ground.settings.source`; the top-level ``source:`` stays the table's with ``streams:``)::

    streams:
      - table: {name: orders}
      - source: {kind: kinesis, stream_name: clicks, shard_count: 2}
        processing: {processor: "handlers.clicks:handle", dead_letter: {type: none}}

Such an entry's ``table`` is the top-level one, read by nothing; its leases are namespaced as the
Java KCL's multi-stream application names them (``<account>:<stream>:<creation epoch>:<shard id>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError

from ground.settings.base import SettingsModel
from ground.settings.locations import fill_locations
from ground.settings.processing import ProcessingSettings
from ground.settings.source import SourceSettings
from ground.settings.table import TableSettings


class StreamSettings(SettingsModel):
    """One table whose stream the fleet processes, with the processing of its records."""

    table: TableSettings = Field(description="The table (the keys of the top-level table:, layered over it).")
    processing: ProcessingSettings = Field(
        default_factory=ProcessingSettings,
        description="Its processor and processing options (layered over the top-level processing:).",
    )
    source: SourceSettings = Field(
        default_factory=SourceSettings,
        description="kind: kinesis reads this Kinesis data stream instead of the table's stream.",
    )


def _layered(below: Any, above: Any) -> Any:
    """``above`` merged over ``below`` key by key (nested mappings merged, everything else replaced)."""
    if not isinstance(below, Mapping) or not isinstance(above, Mapping):
        return above
    merged = dict(below)
    for key, value in above.items():
        merged[key] = _layered(merged[key], value) if key in merged and value else value
    return merged


def _entry_processing(default: Any, own: Any) -> Any:
    """An entry's processing over the default, forgetting the default's options when the entry
    names another processor (the loader's rule for one file over another)."""
    if not isinstance(default, Mapping) or not isinstance(own, Mapping):
        return own if own is not None else default
    start = dict(default)
    if "processor" in own and own["processor"] != default.get("processor", "changelog"):
        start.pop("options", None)
    return _layered(start, own)


def expand_streams(data: Any, default_region: str) -> Any:
    """The raw configuration with every ``streams:`` entry layered over the top-level ``table:``
    and ``processing:`` (module docstring), ``{account}``/``{region}`` filled in each entry's
    locations, and the top-level ``table``/``processing`` set to the first entry's. Unchanged
    without ``streams:``; a ``streams:`` that is not a non-empty list is left for the model to
    refuse, with its key named."""
    if not isinstance(data, Mapping) or data.get("streams") is None:
        return data
    entries = data["streams"]
    if not isinstance(entries, list) or not entries:
        return data
    table, processing = data.get("table") or {}, data.get("processing") or {}
    expanded: list[Any] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            expanded.append(entry)
            continue
        layered = dict(entry)
        layered["table"] = _layered(table, entry.get("table") or {})
        layered["processing"] = _entry_processing(processing, entry.get("processing"))
        located = {
            "account": data.get("account"),
            "region": data.get("region"),
            "processing": layered["processing"],
        }
        layered["processing"] = fill_locations(located, default_region)["processing"]
        expanded.append(layered)
    result = dict(data)
    result["streams"] = expanded
    first = expanded[0]
    # Only a valid first entry stands for the top level: an invalid one is reported once, under
    # streams.0, not again under table: with the file of the default it was layered over.
    if isinstance(first, Mapping) and _valid(first):
        result["table"], result["processing"] = first["table"], first["processing"]
    return result


def _valid(entry: Mapping[str, Any]) -> bool:
    try:
        StreamSettings.model_validate(entry)
    except ValidationError:
        return False
    return True


def stream_problems(streams: tuple[StreamSettings, ...], default_destination: str | None) -> list[str]:
    """What makes a list of streams unusable together: a table listed twice (its shards would be
    leased twice), two streams' change logs in one place (a change log is one table's: the
    pipeline builds that table from it) or their dead letters in one place (a dead-lettered
    document names its shard, not its table). ``default_destination``: where a changelog without a
    destination writes (``pipeline.changelog_uri``)."""
    if not streams:
        return ["streams: is an empty list: list at least one stream, or drop streams: for table:"]
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, stream in enumerate(streams):
        kinesis = stream.source.is_kinesis
        # A Kinesis entry's table is the top level's, read by nothing: its stream is what counts.
        name = f"kinesis:{stream.source.kinesis_stream}" if kinesis else stream.table.source_table_name
        if name in seen:
            what = f"Kinesis stream {stream.source.kinesis_stream!r}" if kinesis else f"table {name!r}"
            problems.append(
                f"streams.{index}.{'source' if kinesis else 'table'}: {what} is already "
                f"streams.{seen[name]}'s: list each {'stream' if kinesis else 'table'} once"
            )
        seen.setdefault(name, index)
    places: dict[tuple[str, str], int] = {}
    for index, stream in enumerate(streams):
        processing = stream.processing
        owned: list[tuple[str, str | None, str]] = [
            (
                "dead_letter.uri",
                processing.dead_letter.uri,
                "a dead-lettered document names its shard, not its table",
            )
        ]
        if processing.processor == "changelog":
            destination = processing.options.get("destination", default_destination)
            owned.append(("options.destination", destination, "a change log is one table's"))
        for key, value, why in owned:
            if not isinstance(value, str) or not value:
                continue
            if (key, value) in places:
                problems.append(
                    f"streams.{index}.processing.{key}: {value!r} is also streams.{places[key, value]}'s: "
                    f"give each stream its own ({why})"
                )
            places.setdefault((key, value), index)
    return problems
