"""A processor that hangs forever on one shard: how soon the shard moves, over the stall timeout.

Method: the emulator serves a 4-partition stream; 2 ``consumer run`` processes share it at failover
3000 ms with ``worker.stall_timeout_millis`` 20 000 and metrics as EMF on stdout; a writer puts 20
items/s round-robin over one key per partition. The processor (:class:`HangingChangelog`, the
benchmarks' recording processor) hangs forever -- a downstream call with no timeout -- on every
batch holding the record of one key, in whichever worker it runs, so the shard of that key stalls
again on each worker it moves to. For each hang, the time from the processor entering the hanging
call (the marker it writes first) to another worker's consumer of that shard starting, over the stall
timeout; also checked: the stalling worker's SHARD_STALLED line and its ``StalledShards`` EMF document
name the shard, and the other shards go on delivering throughout.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import Ratio
from bench.fleet_records import TABLE, RecordingChangelog
from bench.fleet_support import Stack, bench_stack
from consumer.processing import Batch, BatchResult

PARTITIONS = 4
WORKERS = 2
STALL_TIMEOUT_MILLIS = 20_000
HANGS = 3
GOAL = 1.2
WORKER = {
    "failover_time_millis": 3000,
    "max_clock_skew_millis": 100,
    "stall_timeout_millis": STALL_TIMEOUT_MILLIS,
}
LIMITS = (
    "A stall is seen at the first look (once a second) after the timeout; the lease goes to the least "
    "loaded other worker by name, which adopts it at its next round (half a taking interval) and starts "
    "its consumer: about 1 s + 0.7 s after the timeout here."
)

_forever = threading.Event()


class HangingChangelog(RecordingChangelog):
    """The recording processor, hanging forever on a batch that holds ``hang_key``'s record (after
    writing a marker line: shard, time, pid)."""

    def __init__(
        self, deliveries: str, hang_key: str, destination: str | None = None, table: str = TABLE
    ) -> None:
        super().__init__(deliveries, destination, table)
        self._markers = Path(deliveries) / f"hangs-{os.getpid()}.jsonl"
        self._hang_key = hang_key

    def handle(self, batch: Batch) -> BatchResult | None:
        for record in batch.records:
            if record.raw.get("dynamodb", {}).get("Keys", {}).get("pk", {}).get("S") == self._hang_key:
                with self._markers.open("a") as markers:
                    markers.write(
                        json.dumps({"s": record.shard_id, "at": time.time(), "p": os.getpid()}) + "\n"
                    )
                _forever.wait()  # the downstream call that never returns
        return super().handle(batch)


def _hangs(stack: Stack) -> list[dict[str, Any]]:
    found = []
    for path in (stack.workdir / "deliveries").glob("hangs-*.jsonl"):
        found += [json.loads(line) for line in path.read_text().splitlines() if line]
    return sorted(found, key=lambda h: h["at"])


def _starts(stack: Stack, shard: str) -> list[tuple[float, str]]:
    """When each worker's consumer of ``shard`` started (passed the parent check)."""
    found = []
    for name in stack.fleet.workers:
        for at, _ in stack.log_times(name, f"shard {shard}: WAITING_ON_PARENT_SHARDS -> INITIALIZING"):
            found.append((at, name))
    return sorted(found)


def _named(stack: Stack, shard: str) -> tuple[bool, bool]:
    """Whether a SHARD_STALLED line and a StalledShards EMF document named ``shard``."""
    line = emf = False
    for name in stack.fleet.workers:
        for event in stack.log_events(name):
            message = str(event.get("message", ""))
            line |= "[SHARD_STALLED]" in message and f"Shard {shard} stalled" in message
        path = stack.fleet.workers[name].log_path
        for text in path.read_text(errors="replace").splitlines() if path.exists() else ():
            if '"StalledShards"' in text:
                doc = json.loads(text[text.index("{") :])
                emf |= doc.get("ShardId") == shard and doc.get("StalledShards", 0) >= 1
    return line, emf


def run() -> list[Ratio]:
    with bench_stack(
        "stall-move",
        partitions=PARTITIONS,
        worker=WORKER,
        changelog=False,
        processing={"processor": "bench.stall_move:HangingChangelog"},
    ) as stack:
        from bench.fleet_load import keys_covering

        hang_key = keys_covering(PARTITIONS, stack.seed)[0]
        _set_option(stack, hang_key)
        for _ in range(WORKERS):
            stack.fleet.start_worker()
        writer = stack.writer(20).start()
        try:
            deadline = time.monotonic() + HANGS * (STALL_TIMEOUT_MILLIS / 1000 + 15) + 60
            while len(_hangs(stack)) < HANGS + 1 and time.monotonic() < deadline:
                stack.check_workers()
                time.sleep(1)
            delivered_other = {d.shard for d in stack.deliveries.poll() if d.key != hang_key}
        finally:
            writer.stop()
        hangs = _hangs(stack)
        if len(hangs) < 2:
            raise RuntimeError(f"only {len(hangs)} hang(s) seen; logs in {stack.workdir}")
        shard = hangs[0]["s"]
        starts = _starts(stack, shard)
        moves = []
        for hang in hangs[:-1]:
            later = [at for at, _ in starts if at > hang["at"]]
            if later:
                moves.append((later[0] - hang["at"]) / (STALL_TIMEOUT_MILLIS / 1000))
        line, emf = _named(stack, shard)
    print(f"moves over the stall timeout: {[round(m, 3) for m in moves]}; named in log {line}, in EMF {emf}")
    method = (
        f"{len(moves)} moves of a shard whose processor hangs forever (on every worker), {WORKERS} consumer run "
        f"processes on the emulator, stall_timeout_millis {STALL_TIMEOUT_MILLIS}: processor entering the hang -> "
        f"another worker's consumer of the shard starting; SHARD_STALLED line names it: {line}, StalledShards "
        f"EMF document with ShardId: {emf}; other shards delivering: {len(delivered_other)} of {PARTITIONS - 1}"
    )
    ok = line and emf and bool(moves) and max(moves) <= GOAL
    return [Ratio("stall_to_moved_over_stall_timeout", tuple(moves), f"<={GOAL:g}", ok, method)]


def _set_option(stack: Stack, hang_key: str) -> None:
    """Name the key in the processor's options (the config file the workers read)."""
    import yaml

    path = stack.config_dir / "bench.yaml"
    config = yaml.safe_load(path.read_text())
    config["processing"]["options"]["hang_key"] = hang_key
    config["metrics"] = {"destination": "stdout", "flush_interval_seconds": 1}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
