"""Failover: a SIGKILLed worker's shards processing again, over failover_time; and a graceful stop.

Method: the emulator serves a 64-partition stream (64 open shards; no rollovers during the run);
4 ``consumer run`` processes share it (failover 3000 ms, skew 100 ms, idle between reads 500 ms,
taker interval failover/3 = 1000 ms) with a processor that notes every record it is given (shard,
sequence, arrival time, pid) and lands it with the product's changelog sink. A writer puts up to 64
items/s round-robin over one key per partition (every shard gets records throughout), and right
after each stop it writes one item to each of the victim's shards, so every one of them has a record
waiting when a survivor picks it up, however sparse the steady load is on a busy machine. Once the
4 workers hold 16 leases each:

- SIGKILL one worker; the time until *every* shard it held has delivered a record to a surviving
  worker's processor (first arrival after the kill, per shard, then the slowest shard), over
  failover_time. The leases table is scanned meanwhile to confirm it: each of the victim's leases
  owned by a live worker and its checkpoint past where it was at the kill. Goal <= 1.5 (the Java KCL:
  ~3, an expired lease is noticed by its counter not moving for failover, then taken at the next
  scan every 2 x failover).
- SIGTERM one worker (graceful: finish the batch, checkpoint, release, retire the heartbeat); the
  same resume time over the taker interval (docs/leases.md promises "within one taking interval").
- duplicates: a (shard, sequence number) twice in the change log whose second copy landed while a
  stop was being recovered from (goal 0 for SIGTERM). Records delivered twice *to the processor*
  (which the sink's own de-duplication may hide from the change log) are counted too and shown.

After each stop a new worker joins and the fleet re-balances to 16 each before the next repeat; the
victim rotates. At the end the writer stops and every acknowledged write must have reached a
processor (lost writes are reported).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from bench.common import Ratio, at_most
from bench.fleet_load import Writer, spread
from bench.fleet_records import read_landed, repeated_after
from bench.fleet_support import (
    Stack,
    bench_stack,
    drain_lost,
    lost_writes_ratio,
    worker_name,
)

SHARDS = 64
WORKERS = 4
REPEATS = 3
FAILOVER_MILLIS = 3000
WORKER = {
    "failover_time_millis": FAILOVER_MILLIS,
    "max_clock_skew_millis": 100,
    "idle_time_between_reads_millis": 500,
    "shard_sync_interval_millis": 60_000,
    "parent_shard_poll_interval_millis": 500,
    "task_backoff_time_millis": 100,
}
WRITES_PER_SECOND = 64
KILL_GOAL = 1.5
TERM_GOAL = 1.0
LIMITS = (
    "SIGTERM (goal: within one taking interval): since 66c4f3a the stopping worker takes nothing after the "
    "signal, a consumer in flight shuts down at once and the process exits +0.6-0.9 s (was 6-8 s); leases "
    "are released by +0.1-0.4 s. What is left is structural: the survivors take freed leases at their "
    "next round, which is anywhere within one interval of the release, and a round (scan + sequential "
    "conditional takes) lasts 0.1-0.7 s on this loaded emulator; the slowest of 3 survivors counts, so "
    "1.4-2.2 intervals. Meeting 1 needs a push: the stopping worker handing each lease to a named survivor "
    "(the hand-over path exists) instead of releasing it to whoever scans next. SIGKILL (median 1.2-1.55 "
    "across runs, goal 1.5) is bounded by failover + skew after the victim's last heartbeat (up to one "
    "renewal before the kill), then the next scan (<= 1 interval), then 16 sequential conditional takes "
    "shared by 3 racing survivors (0.3-1 s under load)."
)


@dataclass
class Stop:
    how: str
    victim: str
    shards: int
    stop_at: float
    resumed: float  # seconds from the signal to the last shard's first delivery elsewhere
    confirmed: float | None  # seconds until the leases table showed all owned + checkpoints advanced
    taken: float | None  # seconds until the survivors' logs show the last take
    consumers: float | None  # seconds until the survivors' consumers of all those shards were reading
    last_beat: float | None  # seconds from the victim's last heartbeat to the signal
    released: float | None  # SIGTERM: seconds until the victim's last release (its log)
    exited: float | None  # SIGTERM: seconds until the process exited
    window_end: float = 0.0
    join_window: tuple[float, float] = (0.0, 0.0)


def _victim(stack: Stack, index: int) -> tuple[str, list[str], dict[str, str], str]:
    snapshot = stack.snapshot()
    held, _ = stack.holdings(snapshot)
    names = sorted(held, key=lambda n: int(n.rsplit("-", 1)[1]))
    victim = names[index % len(names)]
    shards = sorted(held[victim])
    checkpoints = {s: snapshot.leases[s].checkpoint.sequence for s in shards}
    worker_id = snapshot.leases[shards[0]].owner
    return victim, shards, checkpoints, worker_id


def _advanced(before: str, now: str) -> bool:
    if not now.isdigit():
        return False
    return not before.isdigit() or int(now) > int(before)


def _stop(stack: Stack, writer: Writer, index: int, how: str) -> Stop:
    victim, shards, checkpoints, worker_id = _victim(stack, index)
    nudge = stack.keys_for(shards)
    pid = stack.fleet.workers[victim].pid
    stack.deliveries.poll()
    stop_at = time.time()
    exit_codes: list[int] = []
    exited_at: list[float] = []
    stopper: threading.Thread | None = None
    if how == "SIGKILL":
        stack.fleet.kill(victim)
    else:
        # terminate() waits for the exit; the survivors are watched meanwhile from this thread.
        def terminate() -> None:
            exit_codes.append(stack.fleet.terminate(victim, timeout=30))
            exited_at.append(time.time())

        stopper = threading.Thread(target=terminate, name="bench-terminate", daemon=True)
        stopper.start()
    # One record for each of the victim's shards right after the signal, so that every one of them
    # has something to deliver when a survivor picks it up, however sparse the steady load is.
    writer.put_now(nudge)
    first: dict[str, float] = {}
    confirmed_at: float | None = None
    deadline = time.monotonic() + 10 * stack.failover_millis / 1000
    next_scan = 0.0
    while time.monotonic() < deadline and (len(first) < len(shards) or confirmed_at is None):
        for d in stack.deliveries.poll():
            if d.shard in checkpoints and d.pid != pid and d.arrived > stop_at and d.shard not in first:
                first[d.shard] = d.arrived
        if confirmed_at is None and time.monotonic() >= next_scan:
            next_scan = time.monotonic() + 0.5
            snapshot = stack.try_snapshot()
            if snapshot is not None:
                live = stack.live_names()
                ok = all(
                    worker_name(snapshot.leases[s].owner) in live
                    and _advanced(checkpoints[s], snapshot.leases[s].checkpoint.sequence)
                    for s in shards
                    if s in snapshot.leases
                )
                if ok:
                    confirmed_at = time.time()
        time.sleep(0.05)
    if len(first) < len(shards):
        missing = sorted(set(shards) - set(first))
        raise RuntimeError(
            f"{how} {victim}: {len(missing)} of its {len(shards)} shards not processed again within "
            f"{10 * stack.failover_millis} ms: {missing[:5]}; logs in {stack.workdir}"
        )
    resumed = max(first.values()) - stop_at
    # What the logs say: the survivors' takes of the victim's leases, the victim's own releases.
    takes = [
        at
        for name in stack.fleet.workers
        if name != victim
        for at, message in stack.log_times(name, "took lease")
        if at >= stop_at - 0.5 and any(f"lease {s} " in message for s in shards)
    ]
    taken = (max(takes) - stop_at) if takes else None
    # When a survivor's consumer for each of the victim's shards was ready to read (its log), whether
    # or not a record was waiting: separates the lease protocol from the write pattern.
    ready: dict[str, float] = {}
    for name in stack.fleet.workers:
        if name == victim:
            continue
        for at, message in stack.log_times(name, "INITIALIZING -> PROCESSING"):
            shard = message.split()[1].rstrip(":")
            if shard in checkpoints and at >= stop_at:
                ready[shard] = min(at, ready.get(shard, at))
    consumers = (max(ready.values()) - stop_at) if len(ready) == len(shards) else None
    releases = [at for at, _ in stack.log_times(victim, "released lease") if at >= stop_at - 0.5]
    released = (max(releases) - stop_at) if releases and how == "SIGTERM" else None
    snapshot = stack.snapshot()
    beat = snapshot.heartbeats.get(worker_id)
    last_beat = stop_at - beat.at_wall_millis / 1000 if beat is not None else None
    result = Stop(
        how=how,
        victim=victim,
        shards=len(shards),
        stop_at=stop_at,
        resumed=resumed,
        confirmed=None if confirmed_at is None else confirmed_at - stop_at,
        taken=taken,
        consumers=consumers,
        last_beat=last_beat,
        released=released,
        exited=None,
    )
    result.window_end = time.time() + 0.5
    time.sleep(0.5)
    # A new worker joins; the fleet re-balances to 16 each before the next repeat.
    join_at = time.time()
    stack.fleet.start_worker()
    stack.wait_balanced(60, SHARDS)
    time.sleep(0.5)
    result.join_window = (join_at, time.time())
    if stopper is not None:
        stopper.join(timeout=40)
        if not exit_codes or exit_codes[0] != 0:
            raise RuntimeError(
                f"{victim} did not exit cleanly after SIGTERM ({exit_codes}); logs in {stack.workdir}"
            )
        result.exited = exited_at[0] - stop_at
    return result


def _describe(stop: Stop, failover: float, taker: float) -> str:
    parts = [f"{stop.how} {stop.victim} ({stop.shards} shards):"]
    if stop.last_beat is not None and stop.how == "SIGKILL":
        expiry = failover + 0.1 - stop.last_beat
        parts.append(f"last heartbeat {stop.last_beat:.2f} s before the kill -> expired at +{expiry:.2f} s;")
    if stop.exited is not None:
        parts.append(f"exited +{stop.exited:.2f} s;")
    if stop.released is not None:
        parts.append(f"last release +{stop.released:.2f} s;")
    if stop.taken is not None:
        parts.append(f"last take +{stop.taken:.2f} s;")
    if stop.consumers is not None:
        parts.append(f"all consumers reading +{stop.consumers:.2f} s;")
    parts.append(f"all processing again +{stop.resumed:.2f} s")
    if stop.confirmed is not None:
        parts.append(
            f"(leases table: all owned by live workers, checkpoints advanced, by +{stop.confirmed:.2f} s)"
        )
    base = failover if stop.how == "SIGKILL" else taker
    parts.append(
        f"=> {stop.resumed / base:.2f} x {'failover' if stop.how == 'SIGKILL' else 'taker interval'}"
    )
    return " ".join(parts)


def run() -> list[Ratio]:
    print(__doc__)
    began = time.monotonic()
    with bench_stack("failover", partitions=SHARDS, worker=WORKER) as stack:
        failover = stack.failover_millis / 1000
        taker = stack.taker_millis / 1000
        print(
            f"parameters: {SHARDS} shards, {WORKERS} workers, failover {stack.failover_millis} ms, "
            f"taker interval {stack.taker_millis} ms, renewal {stack.settings.worker.renewal_interval_millis} ms, "
            f"skew {stack.settings.worker.max_clock_skew_millis} ms, writes {WRITES_PER_SECOND}/s, "
            f"{REPEATS} repeats of each stop"
        )
        started = time.monotonic()
        for _ in range(WORKERS):
            stack.fleet.start_worker()
            time.sleep(1.0)  # staggered: four simultaneous start-ups overload this 2-core machine
        stack.wait_balanced(90, SHARDS)
        print(
            f"fleet of {WORKERS} balanced at {SHARDS // WORKERS} leases each after {time.monotonic() - started:.1f} s"
        )
        writer = stack.writer(WRITES_PER_SECOND, threads=2).start()
        try:
            time.sleep(2.0)
            stops: list[Stop] = []
            for i in range(REPEATS):
                stops.append(_stop(stack, writer, i, "SIGKILL"))
                print("  " + _describe(stops[-1], failover, taker), flush=True)
            for i in range(REPEATS):
                stops.append(_stop(stack, writer, i + REPEATS, "SIGTERM"))
                print("  " + _describe(stops[-1], failover, taker), flush=True)
        finally:
            writer.stop()
        lost = drain_lost(stack, writer)  # every acknowledged write must reach a processor
        deliveries = stack.deliveries.all
        landed = read_landed(stack.changelog)
        delivered_copies = [(d.shard, d.seq, d.arrived) for d in deliveries]
        landed_copies = [(x.shard, x.seq, x.landed) for x in landed]
        problems = stack.problems()

    kills = [s for s in stops if s.how == "SIGKILL"]
    terms = [s for s in stops if s.how == "SIGTERM"]

    def dupes(copies: list[tuple[str, str, float]], group: list[Stop]) -> list[float]:
        return [float(repeated_after(copies, s.stop_at, s.window_end)) for s in group]

    def join_dupes(copies: list[tuple[str, str, float]]) -> int:
        return sum(repeated_after(copies, *s.join_window) for s in stops)

    kill_ratio = tuple(s.resumed / failover for s in kills)
    term_ratio = tuple(s.resumed / taker for s in terms)
    term_dupes = tuple(dupes(landed_copies, terms))
    print(
        f"writes: {len(writer.acked)} acknowledged ({writer.achieved_rate():.1f}/s, {writer.errors} errors); "
        f"{len(deliveries)} deliveries to processors, {len(landed)} change-log lines; lost {len(lost)}"
        + (f" e.g. {lost[:3]}" if lost else "")
    )
    print(f"SIGKILL resume / failover: {spread(kill_ratio)}")
    confirmed = [s.confirmed / failover for s in kills if s.confirmed is not None]
    print(f"  (leases-table confirmation / failover: {spread(confirmed)})")
    print(f"SIGTERM resume / taker interval: {spread(term_ratio)}")
    print(
        "duplicates in the change log, per repeat: "
        f"SIGKILL {dupes(landed_copies, kills)}, SIGTERM {list(term_dupes)}, re-joins {join_dupes(landed_copies)}"
    )
    print(
        "records delivered twice to the processor, per repeat: "
        f"SIGKILL {dupes(delivered_copies, kills)}, SIGTERM {dupes(delivered_copies, terms)}, "
        f"re-joins {join_dupes(delivered_copies)}"
    )
    if problems:
        print(f"ERROR lines in worker logs ({len(problems)}): {problems[:5]}")
    print(f"(failover benchmark took {time.monotonic() - began:.0f} s)")
    method = (
        f"{SHARDS} shards, {WORKERS} worker processes on the emulator, failover {stack.failover_millis} ms; "
        f"{REPEATS} repeats"
    )
    return [
        at_most(
            "failover_sigkill_over_failover_time",
            kill_ratio,
            KILL_GOAL,
            method + "; SIGKILL -> last of the victim's shards delivering at a survivor",
        ),
        at_most(
            "failover_sigterm_over_taker_interval",
            term_ratio,
            TERM_GOAL,
            method
            + f"; SIGTERM -> last shard delivering elsewhere, over the taker interval ({stack.taker_millis} ms)",
        ),
        at_most(
            "failover_sigterm_duplicates",
            term_dupes,
            0,
            method + "; (shard, sequence) landed twice in the change log during a graceful stop",
        ),
        lost_writes_ratio("failover_lost_writes", lost),
    ]


if __name__ == "__main__":
    for ratio in run():
        print(ratio.line())
