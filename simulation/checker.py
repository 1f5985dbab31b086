"""The checker: the promises of the lease protocol and of delivery, judged on a recorded history.

The lease protocol's:

1. **One owner at a time.** Per shard, the records handled under one ownership (worker, lease
   counter) span a real-time interval; no two such intervals overlap. And a worker handles records
   only while the table names it as the lease's owner: once a take (or a release) has committed, the
   old owner handles nothing more, however the two workers' threads happen to interleave.
2. **Checkpoints never move back**, in the order the table committed them (a finished shard whose
   lease is re-created at TRIM_HORIZON is a move back too).
3. **A finished shard is never leased again.**
4. **Progress**: after the faults stop, every shard finishes within the bound the caller ran for.
5. **A fenced worker takes nothing.** It could not use the lease, and the take moves the counter
   under a worker that may be taking it. A take decided while unfenced and
   held up by a stop before it goes out is the fault model's, not the worker's, and is allowed.

Delivery's:

6. **Nothing lost**: every record of every shard is handled, or is in a dead letter, or was trimmed
   from the stream before anyone read it.
7. **Per-item order**: an item's changes are first handled in the order they were written — across
   a shard's parents and children too (a child handled before its parent finished shows up here).
8. **Nothing handled twice while a shard stays with one worker** — however often the worker fences
   itself, is paused and takes the lease back untouched, and over every lane: a worker handles a
   record again only if another worker owned the shard in between. (A window's records are counted
   through its state instead: 10.)
9. **No checkpoint past a record not done**: when the table commits a checkpoint, every record up to
   it (every record of the shard, for SHARD_END) has been handled, dead-lettered or trimmed.
10. **A window's totals are counted once in its state**: no record twice in one window's final
    state, and each record of the shard in exactly one window's last final state.
11. **The dead letters hold exactly the records that exhausted their retries**: every poison record
    (each fails every time), and no record that failed no more often than the retries allow (a
    record the change-log sink could not land, its bucket refusing, may exhaust them too); no
    poison record is ever handled.

And the simulation itself: no simulated thread crashed (an exception out of the product's code).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from simulation.processors import Handled
from simulation.world import World

INFINITY = 1 << 62


@dataclass
class Verdict:
    overlaps: list[str] = field(default_factory=list)
    usurped: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    fenced_takes: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    replays: list[str] = field(default_factory=list)
    early_checkpoints: list[str] = field(default_factory=list)
    windows: list[str] = field(default_factory=list)
    dead_letters: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(vars(self).values())

    def __str__(self) -> str:
        parts = [
            f"{name}: {values[:3]}{' …' if len(values) > 3 else ''}"
            for name, values in vars(self).items()
            if values
        ]
        return "; ".join(parts) or "ok"


def check(world: World, finished: bool) -> Verdict:
    verdict = Verdict()
    verdict.crashes = [f"{name}: {exc!r}" for name, exc in world.kernel.errors]
    _one_owner(world, verdict)
    _checkpoints(world, verdict)
    verdict.fenced_takes = [
        f"{worker} sent a take of {shard_id} at {at} while fenced"
        for at, worker, shard_id in world.table.history.fenced_takes
    ]
    if not finished:
        verdict.unfinished = sorted(
            s for s in world.shards if s not in world.table.history.finished_at and not _gone(world, s)
        )
    done = _done_times(world)
    _nothing_lost(world, verdict, done)
    _order(world, verdict)
    _no_replay_by_one_owner(world, verdict)
    _no_early_checkpoint(world, verdict, done)
    _windows(world, verdict)
    _dead_letters(world, verdict)
    return verdict


def _gone(world: World, shard_id: str) -> bool:
    return world.stream.gone(shard_id, world.kernel.now) and world.table.get(shard_id) is None


def _exact(world: World) -> list[Handled]:
    return [h for h in world.ledger.handled if h.exact]


def _one_owner(world: World, verdict: Verdict) -> None:
    spans: dict[str, dict[tuple[str, int | None], list[int]]] = defaultdict(dict)
    for h in _exact(world):
        span = spans[h.shard_id].setdefault((h.worker, h.counter), [h.at, h.at])
        span[1] = h.at
    for shard_id, owners in spans.items():
        ordered = sorted(owners.items(), key=lambda item: item[1][0])
        for (owner_a, (_, end_a)), (owner_b, (start_b, _)) in itertools.pairwise(ordered):
            if start_b < end_a or (start_b == end_a and owner_a[0] != owner_b[0]):
                verdict.overlaps.append(
                    f"{shard_id}: {owner_b[0]} (counter {owner_b[1]}) began at {start_b} while "
                    f"{owner_a[0]} (counter {owner_a[1]}) still handled records until {end_a}"
                )
    for h in _exact(world):
        if h.table_owner != h.worker:
            verdict.usurped.append(
                f"{h.shard_id}: {h.worker} handled {h.sequence_number} at {h.at} while the table named "
                f"{h.table_owner or 'nobody'} as its owner"
            )


def _checkpoints(world: World, verdict: Verdict) -> None:
    history = world.table.history
    for shard_id, marks in history.checkpoints.items():
        for (t0, before), (t1, after) in itertools.pairwise(marks):
            if after < before:
                verdict.regressions.append(f"{shard_id}: {before} at {t0} then {after} at {t1}")
    for at, shard_id in history.created:
        finished = history.finished_at.get(shard_id)
        if finished is not None and at > finished:
            verdict.releases.append(f"{shard_id}: finished at {finished}, leased again at {at}")


def _done_times(world: World) -> dict[tuple[str, int], int]:
    """When each record was first done: handled (a window's: counted), dead-lettered or trimmed."""
    done: dict[tuple[str, int], int] = {}
    for h in world.ledger.handled:
        done.setdefault((h.shard_id, h.sequence_number), h.at)
    for put in world.bucket.puts:
        if put.key.startswith("dead-letters/"):
            for record in _records_of(put.body):
                key = (record[0], record[1])
                done[key] = min(done.get(key, INFINITY), put.at)
    for shard_id, written in world.stream.written.items():
        for w in written:
            trimmed = world.stream.trimmed_at(w)
            if trimmed is not None and trimmed <= world.kernel.now:
                key = (shard_id, w.sequence_number)
                done[key] = min(done.get(key, INFINITY), trimmed)
    return done


def _records_of(body: bytes) -> list[tuple[str, int]]:
    import orjson

    document = orjson.loads(body)
    return [(document["shardId"], int(raw["dynamodb"]["SequenceNumber"])) for raw in document["records"]]


def _nothing_lost(world: World, verdict: Verdict, done: dict[tuple[str, int], int]) -> None:
    for shard_id, written in world.stream.written.items():
        if shard_id not in world.table.history.finished_at:
            continue  # reported as unfinished (or gone with its records trimmed)
        missing = [w.sequence_number for w in written if (shard_id, w.sequence_number) not in done]
        if missing:
            verdict.losses.append(
                f"{shard_id}: records {missing[:5]} never handled, dead-lettered or trimmed"
            )


@dataclass(frozen=True, order=True)
class _Done:
    """A record done, in execution order: handled, or dead-lettered (its turn taken too)."""

    at: int
    rank: int  # a dead letter lands before anything its answer lets run in the same millisecond
    shard_id: str
    sequence_number: int
    worker: str
    final: bool
    dead_letter: bool = False
    # The lease's owner in the table at the moment of handling (None for dead letters and trims):
    # exact, where the owners' history has only a millisecond, which a take can share.
    table_owner: str | None = field(default=None, compare=False)


def _done_events(world: World) -> list[_Done]:
    events = [
        _Done(h.at, h.index, h.shard_id, h.sequence_number, h.worker, h.final, table_owner=h.table_owner)
        for h in world.ledger.handled
    ]
    for put in world.bucket.puts:
        if put.key.startswith("dead-letters/"):
            events += [
                _Done(put.at, 0, shard_id, n, put.worker, True, True) for shard_id, n in _records_of(put.body)
            ]
    for shard_id, written in world.stream.written.items():  # trimmed unread: its turn went by too
        for w in written:
            trimmed = world.stream.trimmed_at(w)
            if trimmed is not None and trimmed <= world.kernel.now:
                events.append(_Done(trimmed, 0, shard_id, w.sequence_number, "", False, True))
    return sorted(events)


def _order(world: World, verdict: Verdict) -> None:
    """Per item, the first time each change is done (handled, dead-lettered, or trimmed before anyone
    read it: a fenced worker landing it late, after its children, is a zombie's write) follows the
    versions (write order)."""
    version = {
        (w.shard_id, w.sequence_number): (w.key, w.version)
        for ws in world.stream.written.values()
        for w in ws
    }
    seen: set[tuple[str, int]] = set()
    last: dict[str, tuple[int, str, int]] = {}  # item -> (version, shard, sequence number) done last
    for e in _done_events(world):
        record = (e.shard_id, e.sequence_number)
        if record in seen:
            continue
        seen.add(record)
        key, v = version[record]
        before = last.get(key)
        if before is not None and before[0] > v:
            verdict.order.append(
                f"item {key}: version {v} ({e.shard_id}/{e.sequence_number}) first done at {e.at} "
                f"after version {before[0]} ({before[1]}/{before[2]})"
            )
        if before is None or before[0] < v:
            last[key] = (v, e.shard_id, e.sequence_number)


def _owner_at(owners: list[tuple[int, str | None]], at: int) -> str | None:
    current = None
    for t, owner in owners:
        if t > at:
            break
        current = owner
    return current


def _no_replay_by_one_owner(world: World, verdict: Verdict) -> None:
    """A worker handles a record again only if another worker owned the shard when it was done
    before or in between (and may not have recorded it): while the lease stays with one worker,
    however often it is fenced, paused and taken back, what that worker handled or dead-lettered is
    never handled again."""
    first: dict[tuple[str, int], _Done] = {}
    for e in _done_events(world):
        if not e.final:
            continue
        key = (e.shard_id, e.sequence_number)
        if key not in first:
            first[key] = e
            continue
        if e.dead_letter:
            continue  # a dead letter written again (its answer lost) hands the handler nothing
        before = first[key]
        first[key] = e
        at, worker = before.at, before.worker
        if worker != e.worker:
            continue
        owners = world.table.history.owners.get(e.shard_id, [])
        # Who owned the shard when it was done before: as the ledger saw the table then, or (a dead
        # letter) by the owners' history.
        then = before.table_owner if before.table_owner is not None else _owner_at(owners, at)
        others = {then} | {o for t, o in owners if at < t <= e.at}
        if not others - {None, worker}:
            verdict.replays.append(
                f"{e.shard_id}: {worker} did {e.sequence_number} at {at} and again at {e.at}"
            )


def _no_early_checkpoint(world: World, verdict: Verdict, done: dict[tuple[str, int], int]) -> None:
    for shard_id, marks in world.table.history.checkpoints.items():
        written = world.stream.written.get(shard_id, [])
        numbers = [w.sequence_number for w in written]
        latest = list(itertools.accumulate((done.get((shard_id, n), INFINITY) for n in numbers), max))
        for at, mark in marks:
            if mark.is_shard_end:
                upto = len(numbers)
            elif mark.sequence.isdigit():
                upto = sum(1 for n in numbers if n <= int(mark.sequence))
            else:
                continue
            if upto and latest[upto - 1] > at:
                undone = next(n for n in numbers[:upto] if done.get((shard_id, n), INFINITY) > at)
                verdict.early_checkpoints.append(
                    f"{shard_id}: checkpoint {mark.sequence} committed at {at} before record {undone} was done"
                )


def _windows(world: World, verdict: Verdict) -> None:
    finals = world.ledger.finals
    if not finals:
        return
    last: dict[tuple[str, float], tuple[int, ...]] = {}
    for final in finals:
        doubled = {n for n, times in Counter(final.sequence_numbers).items() if times > 1}
        if doubled:
            verdict.windows.append(
                f"{final.shard_id}: window {final.window_start} counted {sorted(doubled)[:5]} twice "
                f"({final.worker} at {final.at})"
            )
        last[(final.shard_id, final.window_start)] = final.sequence_numbers
    counted: dict[str, list[int]] = defaultdict(list)
    for (shard_id, _), closed in last.items():
        counted[shard_id].extend(closed)
    dead = world.bucket.dead_lettered()
    for shard_id, written in world.stream.written.items():
        if shard_id not in world.table.history.finished_at:
            continue
        numbers = counted[shard_id]
        twice = sorted(n for n, times in Counter(numbers).items() if times > 1)
        if twice:
            verdict.windows.append(f"{shard_id}: records {twice[:5]} counted in two windows")
        expected = {
            w.sequence_number
            for w in written
            if (shard_id, w.sequence_number) not in dead and not _trimmed(world, w)
        }
        missing = sorted(expected - set(numbers))
        if missing:
            verdict.windows.append(f"{shard_id}: records {missing[:5]} in no window's final state")


def _trimmed(world: World, written: object) -> bool:
    trimmed = world.stream.trimmed_at(written)  # type: ignore[arg-type]
    return trimmed is not None and trimmed <= world.kernel.now


def _dead_letters(world: World, verdict: Verdict) -> None:
    dead = world.bucket.dead_lettered()
    poison = world.ledger.poison
    finished = world.table.history.finished_at
    expected = {
        (shard_id, w.sequence_number)
        for shard_id, written in world.stream.written.items()
        if shard_id in finished
        for w in written
        if w.sequence_number in poison and not _trimmed(world, w)
    }
    retries = world.settings.processing.retry.max_retry_attempts
    extra = sorted(
        (shard_id, n)
        for shard_id, n in dead
        if n not in poison and world.ledger.failures.get(n, 0) <= retries
    )
    if extra:
        verdict.dead_letters.append(f"dead-lettered without exhausting their retries: {extra[:5]}")
    missing = sorted(expected - dead)
    if missing:
        verdict.dead_letters.append(f"exhausted their retries but are in no dead letter: {missing[:5]}")
    handled = sorted(
        {(h.shard_id, h.sequence_number) for h in world.ledger.handled if h.sequence_number in poison}
    )
    if handled:
        verdict.dead_letters.append(f"poison records handled: {handled[:5]}")
