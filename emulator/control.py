"""Python client of the control API (``/_emulator/*``): deterministic lineage changes on cue.

Tests and demos use it to force a rollover, a split or a trim now, to change fault rates while
clients run, to delete an item "by TTL" and to read the emulator's counters and true shard table.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from emulator.errors import ControlError


class EmulatorControl:
    def __init__(self, endpoint: str, timeout: float = 10.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, route: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps({k: v for k, v in body.items() if v is not None}).encode()
        request = urllib.request.Request(
            f"{self.endpoint}/_emulator/{route}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", str(exc))
            except ValueError:
                message = str(exc)
            raise ControlError(f"{method} /_emulator/{route}: {message}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ControlError(f"emulator at {self.endpoint} is not answering: {exc}") from exc

    def health(self) -> bool:
        try:
            return bool(self._call("GET", "health").get("ok"))
        except ControlError:
            return False

    def rollover(self, table: str | None = None, partition: int | None = None) -> list[str]:
        """Close the open shard of every partition (or one); returns the new shard ids."""
        created: list[str] = self._call("POST", "rollover", {"table": table, "partition": partition})[
            "created"
        ]
        return created

    def split(self, table: str | None = None, partition: int | None = None) -> list[str]:
        """Split one partition (seeded choice when None); returns the two children's ids."""
        created: list[str] = self._call("POST", "split", {"table": table, "partition": partition})["created"]
        return created

    def trim(self, table: str | None = None, older_than_seconds: float = 0.0) -> int:
        """Trim records written more than ``older_than_seconds`` ago (0: everything so far)."""
        trimmed: int = self._call("POST", "trim", {"table": table, "older_than_seconds": older_than_seconds})[
            "trimmed"
        ]
        return trimmed

    def set_faults(self, **changes: float | str) -> dict[str, Any]:
        """Change fault settings live; returns them all. Stream: error_rate, latency_millis,
        reads_per_shard_per_second, describe_stream_per_second, consistency_delay_millis,
        child_visibility_delay_millis. DynamoDB tables: table_throttle_rate, table_error_rate,
        table_latency_millis, table_latency_tail_millis, table_latency_tail_rate,
        table_ambiguous_rate, table_ambiguous_delay_millis, table_stale_scan_millis and
        table_fault_tables (comma-separated globs of the table names they hit; ``*`` = all). Kinesis:
        kinesis_read_bytes_per_second, kinesis_write_records_per_second,
        kinesis_write_bytes_per_second, list_shards_per_second (error_rate, latency_millis and
        reads_per_shard_per_second apply to Kinesis too)."""
        result: dict[str, Any] = self._call("POST", "faults", dict(changes))
        return result

    def faults(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "faults")
        return result

    def ttl_delete(self, table: str, key: dict[str, Any]) -> bool:
        """Delete an item as the TTL process would (its REMOVE carries ``userIdentity``)."""
        deleted: bool = self._call("POST", "ttl-delete", {"table": table, "key": key})["deleted"]
        return deleted

    def counters(self) -> dict[str, int]:
        counters: dict[str, int] = self._call("GET", "counters")
        return counters

    def kinesis_shards(self, stream: str | None = None) -> list[dict[str, Any]]:
        """Every shard of a Kinesis stream (or of all), expired ones included, with its lineage."""
        route = "kinesis/shards" if stream is None else f"kinesis/shards?stream={urllib.parse.quote(stream)}"
        shards: list[dict[str, Any]] = self._call("GET", route)["shards"]
        return shards

    def kinesis_trim(self, stream: str | None = None, older_than_seconds: float = 0.0) -> int:
        """Trim a Kinesis stream's records written more than ``older_than_seconds`` ago (0: all so far)."""
        body = {"stream": stream, "older_than_seconds": older_than_seconds}
        trimmed: int = self._call("POST", "kinesis/trim", body)["trimmed"]
        return trimmed

    def reads(self, table: str) -> list[tuple[int, float, int]]:
        """Every Scan the table served: (the emulator's monotonic ms when it arrived, the units charged, its
        TotalSegments, 0 for a plain Scan)."""
        answer = self._call("GET", f"reads?table={urllib.parse.quote(table)}")
        return [(int(at), float(units), int(segments)) for at, units, segments in answer["reads"]]

    def shards(self, table: str | None = None) -> list[dict[str, Any]]:
        """The true shard table (not DescribeStream's eventually consistent view)."""
        route = "shards" if table is None else f"shards?table={urllib.parse.quote(table)}"
        shards: list[dict[str, Any]] = self._call("GET", route)["shards"]
        return shards
