"""One failing key kept apart (``processing.on_failure: park_key``): the shard's other keys delivered
as if nothing failed, per-key order kept, and what bisection costs in records handled twice.

Method: the emulator serves a 1-partition stream (one shard); one ``consumer run`` process reads it
(idle time between reads 200 ms, empty calls on) with a function-form handler written as
Powertools' batch utility is: it applies each record on its own, and its answer names the records
that failed (``BatchResult``, Lambda's ``batchItemFailures``); one line per record given to it
(sequence number, key, the writer's time, when it was given, applied or failed). A writer puts
``RATE`` items/s for ``SECONDS`` s, round-robin over ``KEYS`` keys, each item carrying ``t`` (the
writer's clock just before its PutItem; same machine). Two more keys get a **poison** change
(refused every time) at 1.5 s and 4 s, then a change every 0.5 s after it, which must wait behind
it. A parked poison is retried (back-off 300 ms to 1.5 s, 6 retries) and then dead-lettered, so
each key stays parked a few seconds while the others flow.

Each repeat runs the same writes three times on fresh emulators and workers: without the poison
(``clean``), with it under ``park_key``, and with it under ``block`` (the default, shown for
comparison: the other keys wait behind the poison). Figures:

* ``poison_key_other_keys_delay_over_idle_time``: p99 of write -> applied of the other keys' records
  written while a poison key was parked (from the first poison write to its last failed attempt),
  over ``idle_time_between_reads``, under park_key. Goal <= 2, what a shard with nothing failing
  achieves (bench/latency.py's goal); the clean run's p99 over the same window is printed beside it.
* ``poison_key_order_violations``: keys whose records were first done (applied, or the poison's
  last failure before its dead letter) out of sequence order, over the park_key and clean runs. Goal
  0. Under block the count is printed for comparison, each key with its first pair out of order and
  whether the later record was applied in the very call where the earlier one failed (the handler
  applies every record it is given, as Powertools' batch utility does).
* ``bisect_redeliveries_per_poison``: records given again after the handler had already applied
  them, per poison record, under park_key (stated); and
  ``bisect_redeliveries_per_succeeded_record_max``: the most times one such record was given again
  (goal <= 2; the design gives 1: the records after a failure in its batch come once more, at once,
  because an answer may stop at its first failure).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import Ratio, at_most, stated
from bench.fleet_load import percentile, spread
from bench.fleet_records import TABLE
from bench.fleet_support import bench_stack

RATE = 40  # writes per second
SECONDS = 12.0
KEYS = 20
POISON_AT = (1.5, 4.0)  # seconds into the writes: the poison change of key poisoned-<n>
FOLLOW_EVERY = 0.5  # the poisoned keys' later changes, which must wait behind the poison
REPEATS = int(os.environ.get("POISON_KEY_REPEATS", "3"))
WORKER = {
    "failover_time_millis": 10_000,
    "idle_time_between_reads_millis": 200,
    "shard_sync_interval_millis": 60_000,
    "task_backoff_time_millis": 100,
    "call_process_records_even_for_empty_record_list": True,
}
RETRY = {
    "max_retry_attempts": 6,
    "base_backoff_millis": 300,
    "max_backoff_millis": 1500,
    "bisect_on_error": True,
}
LIMITS = (
    "the writer's clock and the worker's are the same machine's; a record waits up to one idle time "
    "for its shard's next poll, then for the handler calls in front of it in that poll, which under "
    "park_key include the parked key's due retry (one call of one record); the emulator, the worker "
    "and the writer share this 2-core machine."
)

_fds: dict[str, int] = {}
_lock = threading.Lock()


class PoisonRecorder:
    """The benchmark's handler: applies each record on its own, names the failed ones (a poison
    item, ``poison`` set, always fails); one line per record given to it."""

    def __init__(self, deliveries: str, table: str = TABLE) -> None:
        with _lock:
            fd = _fds.get(deliveries)
            if fd is None:
                Path(deliveries).mkdir(parents=True, exist_ok=True)
                path = Path(deliveries) / f"given-{os.getpid()}.jsonl"
                fd = _fds[deliveries] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fd = fd
        self._calls = 0

    def handle(self, batch: Any) -> Any:
        from consumer.processing import BatchResult

        self._calls += 1  # one instance per shard, called on one thread at a time
        call = f"{os.getpid()}-{id(self)}-{self._calls}"
        failed = []
        lines = []
        for record in batch.records:
            image = record.raw.get("dynamodb", {}).get("NewImage", {})
            ok = "poison" not in image
            if not ok:
                failed.append(record)
            lines.append(
                {
                    "q": record.sequence_number,
                    "k": image.get("pk", {}).get("S"),
                    "t": float(image.get("t", {}).get("N", "0")),
                    "a": time.time(),
                    "ok": ok,
                    "c": call,
                }
            )
        os.write(self._fd, b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        return BatchResult.failed(*failed, error="poison") if failed else None


def _given(directory: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(directory.glob("given-*.jsonl")):
        found += [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return sorted(found, key=lambda line: line["a"])


def _write(stack: Any, poison: bool) -> tuple[float, int]:
    """The writes (the same in every run); returns when they started and how many were made."""
    client = stack.emulator.client("dynamodb")
    plan: list[tuple[float, str, bool]] = []
    step = 1.0 / RATE
    for n in range(int(SECONDS * RATE)):
        plan.append((n * step, f"item-{n % KEYS:02d}", False))
    for p, at in enumerate(POISON_AT):
        plan.append((at, f"poisoned-{p}", True))
        follow = at + FOLLOW_EVERY
        while follow < SECONDS:
            plan.append((follow, f"poisoned-{p}", False))
            follow += FOLLOW_EVERY
    plan.sort()
    started = time.time()
    for n, (at, key, is_poison) in enumerate(plan):
        wait = started + at - time.time()
        if wait > 0:
            time.sleep(wait)
        item: dict[str, dict[str, Any]] = {
            "pk": {"S": key},
            "n": {"N": str(n)},
            "t": {"N": repr(time.time())},
        }
        if poison and is_poison:
            item["poison"] = {"BOOL": True}
        client.put_item(TableName=TABLE, Item=item)
    return started, len(plan)


def measure(policy: str, poison: bool) -> dict[str, Any]:
    dead = Path(tempfile.mkdtemp(prefix="bench-poison-dead-"))
    processing = {
        "processor": "bench.poison_key:PoisonRecorder",
        "on_failure": policy,
        "retry": RETRY,
        "dead_letter": {"type": "local", "uri": str(dead)},
        "batching": {"batch_size": 100},
    }
    try:
        with bench_stack(
            f"poison-{policy}", partitions=1, worker=WORKER, changelog=False, processing=processing
        ) as stack:
            stack.fleet.start_worker()
            stack.wait_balanced(60, 1)
            time.sleep(1.0)
            started, writes = _write(stack, poison)
            directory = stack.workdir / "deliveries"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                stack.check_workers()
                given = _given(directory)
                done = {line["q"] for line in given if line["ok"]}
                lettered = sum(1 for _ in dead.rglob("*.json"))
                if len(done) + (len(POISON_AT) if poison else 0) >= writes and (not poison or lettered >= 2):
                    break
                time.sleep(0.5)
            given = _given(directory)
    finally:
        for path in sorted(dead.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        dead.rmdir()
    return {
        "started": started,
        "writes": writes,
        "given": given,
        "idle": WORKER["idle_time_between_reads_millis"],
    }


def parked_window(run: dict[str, Any]) -> tuple[float, float]:
    """From the first poison write to the last failed attempt of a poison (offsets from the start)."""
    failures = [line["a"] for line in run["given"] if not line["ok"]]
    return POISON_AT[0], max(failures) - run["started"]


def other_keys_p99(run: dict[str, Any], window: tuple[float, float]) -> tuple[float, int]:
    first: dict[str, dict[str, Any]] = {}
    for line in run["given"]:
        if line["ok"] and not line["k"].startswith("poisoned-"):
            first.setdefault(line["q"], line)
    latencies = [
        line["a"] - line["t"]
        for line in first.values()
        if window[0] <= line["t"] - run["started"] <= window[1]
    ]
    return percentile(latencies, 99), len(latencies)


def order_violations(run: dict[str, Any]) -> list[str]:
    """Keys whose records were first done out of sequence order (a poison's last failure counts as
    its done: its dead letter follows it), each described by its first pair out of order and whether
    the later record was applied in a call where the earlier one failed (the handler applies every
    record it is given, as Powertools' batch utility does) or in a call of its own (the runner gave
    it too early)."""
    done: dict[str, dict[str, Any]] = {}
    failed_in: dict[str, set[str]] = defaultdict(set)
    for line in run["given"]:
        if line["ok"]:
            done.setdefault(line["q"], line)
        else:
            failed_in[line["q"]].add(line["c"])
    for line in run["given"]:  # in time order: a record never applied is done at its last failure
        if not line["ok"] and (line["q"] not in done or not done[line["q"]]["ok"]):
            done[line["q"]] = line
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in done.values():
        by_key[line["k"]].append(line)
    found = []
    for key, lines in sorted(by_key.items()):
        in_time = sorted(lines, key=lambda line: (line["a"], int(line["q"])))
        for earlier_index, earlier in enumerate(in_time):
            later = next((x for x in in_time[:earlier_index] if int(x["q"]) > int(earlier["q"])), None)
            if later is not None:
                where = (
                    "in a call where the earlier one failed"
                    if later["c"] in failed_in[earlier["q"]]
                    else "in a call of its own"
                )
                found.append(f"{key}: {int(later['q'])} done before {int(earlier['q'])}, {where}")
                break
    return found


def redeliveries(run: dict[str, Any]) -> tuple[int, int]:
    """(records given again after they were applied, the most times one record was)."""
    applied: set[str] = set()
    again: dict[str, int] = defaultdict(int)
    for line in run["given"]:
        if line["q"] in applied:
            again[line["q"]] += 1
        if line["ok"]:
            applied.add(line["q"])
    return sum(again.values()), max(again.values(), default=0)


def run() -> list[Ratio]:
    print(__doc__)
    began = time.monotonic()
    print(
        f"parameters: 1 shard, {RATE} writes/s for {SECONDS:g} s over {KEYS} keys, poison changes at "
        f"{POISON_AT} s on 2 more keys (then one every {FOLLOW_EVERY} s each), retry {RETRY}, "
        f"worker {WORKER}; {REPEATS} repeats"
    )
    delays: list[float] = []
    clean_delays: list[float] = []
    block_delays: list[float] = []
    violations: dict[str, list[str]] = {"clean": [], "park_key": [], "block": []}
    per_poison: list[float] = []
    most: list[float] = []
    for _ in range(REPEATS):
        clean = measure("park_key", poison=False)
        parked = measure("park_key", poison=True)
        blocked = measure("block", poison=True)
        idle = parked["idle"] / 1000
        window = parked_window(parked)
        p99, count = other_keys_p99(parked, window)
        clean_p99, clean_count = other_keys_p99(clean, window)
        block_p99, block_count = other_keys_p99(blocked, parked_window(blocked))
        delays.append(p99 / idle)
        clean_delays.append(clean_p99 / idle)
        block_delays.append(block_p99 / idle)
        for name, result in (("clean", clean), ("park_key", parked), ("block", blocked)):
            violations[name] += order_violations(result)
        total, worst = redeliveries(parked)
        per_poison.append(total / len(POISON_AT))
        most.append(float(worst))
        block_total, block_worst = redeliveries(blocked)
        print(
            f"  parked window {window[0]:.1f}-{window[1]:.1f} s: other keys' write -> applied p99 "
            f"{p99 * 1000:.0f} ms over {count} records (clean run, same window: {clean_p99 * 1000:.0f} ms "
            f"over {clean_count}; block: {block_p99 * 1000:.0f} ms over {block_count}); "
            f"records given again after applied: park_key {total} (at most {worst} each), "
            f"block {block_total} (at most {block_worst} each)"
        )
    print(
        f"  other keys' p99 / idle time: park_key {spread(delays)}; clean {spread(clean_delays)}; "
        f"block {spread(block_delays)}"
    )
    for name, found in violations.items():
        print(f"  keys done out of order under {name}: {len(found)}" + "".join(f"\n    {v}" for v in found))
    print(f"(poison_key benchmark took {time.monotonic() - began:.0f} s)")
    window_method = (
        f"p99 write -> applied of the other keys' records written while a poison key was parked, over "
        f"idle_time_between_reads (200 ms), 1 shard, {RATE} writes/s, park_key; the same window without "
        f"the poison: median {statistics.median(clean_delays):.2f}; under block: median "
        f"{statistics.median(block_delays):.2f}"
    )
    return [
        at_most("poison_key_other_keys_delay_over_idle_time", tuple(delays), 2.0, window_method),
        at_most(
            "poison_key_order_violations",
            (float(len(violations["clean"]) + len(violations["park_key"])),),
            0,
            "keys whose records were first done out of sequence order, the park_key and clean runs; "
            f"under block (for comparison) {len(violations['block'])}",
        ),
        stated(
            "bisect_redeliveries_per_poison",
            tuple(per_poison),
            "records given again after the handler applied them (Powertools-style answers naming the "
            "failed records), per poison record, park_key",
        ),
        at_most(
            "bisect_redeliveries_per_succeeded_record_max",
            tuple(most),
            2.0,
            "the most times one applied record was given again, park_key",
        ),
    ]


if __name__ == "__main__":
    for ratio in run():
        print(ratio.line())
