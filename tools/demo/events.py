"""What the demo learns from its workers' logs: lease events for the screen, and why records were
delivered twice.

The workers write one JSON object per line (consumer.telemetry.logs). :class:`LogTail` reads what
was appended since the last call; :class:`FleetEvents` turns the lines that matter into short
events (taken, taken over, lost, dropped, shard ended, hand-over asked) and keeps, per shard, who
held it before the current owner and which errors its owner saw. When the changelog sink reports
records it had already landed (a redelivery), the redelivery is attributed to a cause:

* the previous owner (the worker the lease was taken from, or the one that freed it: an overdue
  hand-over releases it to nobody) was SIGKILLed, or frozen (SIGSTOP) when the lease was taken over,
  after processing a batch and before checkpointing it — the only source of duplicates the product
  accepts (a worker that released the lease was running then: its release records what it processed);
* the previous owner fenced itself (its heartbeats failed: a throttled or slow leases table) after
  it took the shard and before the new owner took it over — the same window as a frozen process: a
  batch it processed whose checkpoint the table had not recorded is delivered again;
* the previous owner's batch of the shard was in flight past the hand-over's deadline (the chaos
  demo's slow processor sleeps longer than the failover time): the thief took the lease by force,
  and what the batch's other lanes had landed beyond the checkpoint is delivered again -- a batch
  longer than the failover time is outside what the product keeps free of duplicates;
* the same worker retried a batch after an error (a failed checkpoint write, a throttled table);
* anything else is *unexplained*, which the verdict treats as a failure.

Everything here is pure apart from :class:`LogTail`'s file reads, so it is unit-tested on lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

_TOOK = re.compile(r"^worker (\S+) took lease (\S+) from (\S+)$")
_LOST = re.compile(r"^worker (\S+): lease (\S+) was taken by another worker$")
_DROPPED = re.compile(r"^worker (\S+) dropped (\d+) leases: (.*)$")
# consumer/lifecycle/shard_sync.py's INFO line (its wording changed once; both are counted).
# A hand-over: the previous owner names the worker it released the lease to (taken up by re-adoption).
_RELEASED_TO = re.compile(r"^worker (\S+) released lease (\S+) to (\S+)$")
# A release to nobody (a hand-over that was overdue, a stop): the next taker reads "from (nobody)",
# and the releaser stays the previous owner.
_RELEASED = re.compile(r"^worker (\S+) released lease (\S+)$")
_ENDED = re.compile(r"^shard (\S+) ended; (?:syncing shards for|looking up) its children$")
_ASKED = re.compile(r"^worker (\S+) asked (\S+) to hand over (\S+)$")
_FAILED = re.compile(r"^shard (\S+): processor failed on \d+ records \(attempt \d+\): (.*); delivering")
# The Kinesis demo's delivery log (delivery_log.py) says the same of records it recorded before.
_LANDED = re.compile(
    r"^(?:changelog: (\d+) record\(s\) of shard (\S+) already landed"
    r"|delivery log: (\d+) record\(s\) of shard (\S+) delivered before)"
)
# A shard consumer starting: its worker holds the lease (taken, handed over or taken back).
# The namespace of a several-stream lease key: <account>:<table>:<stream creation epoch>:
_NAMESPACE = re.compile(r"\b\d{12}:[A-Za-z0-9_.-]{3,255}:\d+:")
_STARTED = re.compile(r"^shard (\S+): WAITING_ON_PARENT_SHARDS -> ")
# The chaos demo's slow processor (slow.py): a batch of this shard is in flight this long.
_SLOW = re.compile(r"^slow changelog: shard (\S+): a batch sleeps (\d+) ms$")
SLOW_BATCH = "a slow batch"
NOBODY = "(nobody)"
# A slow batch explains a move that came within this long after it ended (the failover time and
# the taker's round that acts on it, at the demo's 3 s failover).
SLOW_MARGIN_SECONDS = 5.0
# A fence said within this long after the take-over explains it (failover and the taker's round, at
# the demo's 3 s failover, with a starved process's delay).
FENCE_LATE_SECONDS = 10.0
# A DynamoDB stream's shard id (shardId-<time>-<hex>) or a Kinesis stream's (shardId-<12 digits>).
_SHARD_ID = re.compile(r"shardId-[0-9]+(?:-[0-9a-f]+)?")


def in_time_order(lines: list[str]) -> list[str]:
    """Lines read from several workers' logs at once, by their timestamps (a line without one keeps
    its place before the stamped ones): a take read before the release it followed, from another
    worker's file, would be judged without the release."""

    def stamp(line: str) -> str:
        try:
            entry = json.loads(line)
        except ValueError:
            return ""
        return str(entry.get("timestamp", "")) if isinstance(entry, dict) else ""

    return sorted(lines, key=stamp)


def _wall_seconds(stamp: object) -> float | None:
    """A log line's ISO timestamp (consumer.telemetry.logs) as epoch seconds, or None."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def process_name(worker_id: str) -> str:
    """``worker-2@host:pid:nonce`` → ``worker-2`` (the demo's name for the process)."""
    return worker_id.split("@", 1)[0]


def short_shard(shard_id: str) -> str:
    return shard_id[-12:]


@dataclass(frozen=True)
class Redelivery:
    """Records a worker received again that an earlier delivery had already landed."""

    worker: str
    shard_id: str
    records: int
    cause: str
    explained: bool
    previous: str = NOBODY  # the process the shard came from
    moved_at: float | None = None  # when it came (the take-over's, the release's or hand-over's line)


@dataclass
class FleetEvents:
    """Folds worker log lines into screen events and attributed redeliveries.

    ``fate`` maps a process name to how the demo ended it (``SIGKILL``, ``SIGTERM``; a test may say
    ``SIGSTOP`` for a process frozen throughout); the demo updates it as it acts, before the lines that
    follow the act are read. A pause is not a fate: it lasts from :meth:`paused` to :meth:`resumed`,
    and a take-over explains a redelivery by a pause only if the previous owner was frozen when the
    taker's line was written -- a mark that outlived the SIGCONT would excuse any later redelivery
    of that worker's shards.
    """

    fate: dict[str, str] = field(default_factory=dict)
    # Per process, the wall-clock spans it was frozen (the end is infinite while it still is).
    pauses: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    redeliveries: list[Redelivery] = field(default_factory=list)
    taken: int = 0
    taken_over: int = 0
    lost: int = 0
    shards_ended: int = 0
    _previous_owner: dict[str, str] = field(default_factory=dict)
    _errors: dict[tuple[str, str], str] = field(default_factory=dict)
    _lines: int = 0
    _took_at: dict[tuple[str, str], int] = field(default_factory=dict)  # (worker, shard) -> line number
    _fenced_at: dict[str, int] = field(default_factory=dict)  # worker -> line of its last fence drop
    _owner_fenced: set[str] = field(default_factory=set)  # shards taken over from a self-fenced owner
    _released_by: dict[str, str] = field(default_factory=dict)  # shard -> who last freed its lease
    # shard -> how its previous owner stood over the ownership that just ended (fate_during)
    _taken_from_fate: dict[str, str | None] = field(default_factory=dict)
    _released_fate: dict[str, str | None] = field(default_factory=dict)  # shard -> its releaser's, likewise
    _owner_since: dict[tuple[str, str], float] = field(default_factory=dict)  # (worker, shard) -> wall s
    _holder: dict[str, str] = field(default_factory=dict)  # shard -> the worker whose ownership runs
    _slow: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)  # slow batches
    _moved_at: dict[str, float] = field(default_factory=dict)  # shard -> when it last changed hands

    def paused(self, name: str, at: float) -> None:
        """The demo froze ``name`` (SIGSTOP) at wall time ``at``."""
        self.pauses.setdefault(name, []).append((at, float("inf")))

    def resumed(self, name: str, at: float) -> None:
        """The demo let ``name`` go on (SIGCONT) at ``at``: its pause mark ends there."""
        spans = self.pauses.get(name)
        if spans and spans[-1][1] == float("inf"):
            spans[-1] = (spans[-1][0], at)

    def fate_during(self, name: str, since: float | None, until: float | None) -> str | None:
        """How ``name`` stood over one ownership of a shard, from ``since`` to ``until`` (wall seconds;
        None: unknown, from the start / now): ended by SIGKILL or SIGTERM for good, or frozen by a
        pause within it -- a batch it processed before the pause may not have been checkpointed, and
        the next owner delivers it again; None when it ran throughout. A pause before the ownership
        began explains nothing of it."""
        ended = self.fate.get(name)
        if ended is not None:
            return ended
        low = float("-inf") if since is None else since
        high = float("inf") if until is None else until
        spans = self.pauses.get(name, [])
        return "SIGSTOP" if any(start <= high and end >= low for start, end in spans) else None

    def _begin_ownership(self, worker: str, shard: str, at: float | None) -> None:
        self._holder[shard] = worker
        self._owner_since[(worker, shard)] = at if at is not None else float("-inf")

    def _fate_of_ownership(self, owner: str, shard: str, until: float | None) -> str | None:
        """fate_during the owner's ownership of ``shard`` -- or, running throughout, SLOW_BATCH when a
        batch of the shard was in flight there (the slow processor) at the end of that ownership: a
        batch longer than the failover time outlasts a hand-over's deadline, the thief takes the
        lease by force, and what the batch's other lanes landed was not checkpointed."""
        if owner == NOBODY:
            return None
        name = process_name(owner)
        since = self._owner_since.get((name, shard))
        fate = self.fate_during(name, since, until)
        # A graceful stop (SIGTERM) waits a bounded time for its shards' batches; one still in flight
        # then is left running and the lease released without its checkpoint: the same case.
        if fate in (None, "SIGTERM") and until is not None:
            low = since if since is not None else float("-inf")
            spans = self._slow.get((name, shard), [])
            if any(
                start >= low and start <= until and end >= until - SLOW_MARGIN_SECONDS for start, end in spans
            ):
                return SLOW_BATCH
        return fate

    def feed(self, line: str, stamp: str = "") -> None:
        try:
            entry = json.loads(line)
        except ValueError:
            return
        if not isinstance(entry, dict):
            return
        # A lease key of several streams (consumer/lease_keys.py) is read as its shard id, as the
        # processors' lines name it: the demo's shard ids are unique across its tables.
        message = _NAMESPACE.sub("", str(entry.get("message", "")))
        worker = process_name(str(entry.get("worker_id") or "?"))
        written = _wall_seconds(entry.get("timestamp"))
        prefix = f"{stamp} " if stamp else ""
        self._lines += 1
        if match := _TOOK.match(message):
            shard, before = match.group(2), match.group(3)
            if before == NOBODY:
                before = self._released_by.pop(shard, NOBODY)
                fate = self._released_fate.pop(shard, None)
            else:
                fate = self._fate_of_ownership(before, shard, written)
            self.taken += 1
            self._previous_owner[shard] = before
            self._taken_from_fate[shard] = fate
            if written is not None:
                self._moved_at[shard] = written
            self._took_at[(worker, shard)] = self._lines
            self._begin_ownership(worker, shard, written)
            was = process_name(before)
            if self._fenced_at.get(was, -1) > self._took_at.get((was, shard), self._lines):
                self._owner_fenced.add(shard)
            else:
                self._owner_fenced.discard(shard)
            self._errors.pop((worker, shard), None)
            if before != NOBODY and process_name(before) != worker:
                self.taken_over += 1
                how = self._taken_from_fate[shard] or "still running: a hand-over or an expired lease"
                self.events.append(
                    f"{prefix}{worker} took {short_shard(shard)} over from {process_name(before)} ({how})"
                )
        elif match := _RELEASED_TO.match(message):
            shard = match.group(2)
            self._previous_owner[shard] = match.group(1)
            self._taken_from_fate[shard] = self._fate_of_ownership(match.group(1), shard, written)
            self._holder.pop(shard, None)
            self._owner_fenced.discard(shard)
            if written is not None:
                self._moved_at[shard] = written
        elif match := _RELEASED.match(message):
            shard = match.group(2)
            self._released_by[shard] = match.group(1)
            self._released_fate[shard] = self._fate_of_ownership(match.group(1), shard, written)
            self._holder.pop(shard, None)
        elif match := _LOST.match(message):
            self.lost += 1
            self.events.append(f"{prefix}{worker} lost {short_shard(match.group(2))} to another worker")
        elif match := _DROPPED.match(message):
            if match.group(3).startswith("fenced"):
                self._fenced_at[worker] = self._lines
                self._fenced_late(worker, set(_SHARD_ID.findall(match.group(3))), written)
            self.lost += int(match.group(2))
            self.events.append(f"{prefix}{worker} dropped {match.group(2)} leases: {match.group(3)}")
        elif match := _ENDED.match(message):
            self.shards_ended += 1
            self.events.append(f"{prefix}{worker}: shard {short_shard(match.group(1))} ended")
        elif match := _ASKED.match(message):
            self.events.append(
                f"{prefix}{worker} asked {process_name(match.group(2))} for {short_shard(match.group(3))}"
            )
        elif match := _FAILED.match(message):
            self._errors[(worker, match.group(1))] = match.group(2)
        elif match := _LANDED.match(message):
            count, shard = (
                (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
            )
            self._redelivered(worker, shard, int(count))
        elif (match := _SLOW.match(message)) and written is not None:
            spans = self._slow.setdefault((worker, match.group(1)), [])
            spans.append((written, written + int(match.group(2)) / 1000))
        elif match := _STARTED.match(message):
            self._took_at[(worker, match.group(1))] = self._lines
            if self._holder.get(match.group(1)) != worker:  # handed over to it: a new ownership
                self._begin_ownership(worker, match.group(1), written)

    def _redelivered(self, worker: str, shard: str, records: int) -> None:
        error = self._errors.get((worker, shard))
        before = self._previous_owner.get(shard, NOBODY)
        fate = self._taken_from_fate.get(shard) if before != NOBODY else None
        if error:
            cause, explained = f"{worker} retried a batch after an error: {error[:120]}", True
        elif fate in ("SIGKILL", "SIGSTOP"):
            cause = (
                f"{process_name(before)} was stopped by {fate} after processing and before checkpointing; "
                f"{worker} took the shard over"
            )
            explained = True
        elif fate == SLOW_BATCH:
            cause = (
                f"{process_name(before)}'s batch of the shard was in flight past the hand-over's "
                f"(or its stop's) deadline (the slow processor); {worker} took the shard over, and what "
                "the batch's other lanes had landed was not checkpointed"
            )
            explained = True
        elif shard in self._owner_fenced and before != NOBODY:
            cause = (
                f"{process_name(before)} fenced itself (its heartbeats failed) after processing and "
                f"before its checkpoint landed; {worker} took the shard over"
            )
            explained = True
        else:
            cause = f"unexplained: previous owner {before}, fate {fate or 'running'}"
            explained = False
        previous = process_name(before) if before != NOBODY else NOBODY
        moved = self._moved_at.get(shard)
        self.redeliveries.append(Redelivery(worker, shard, records, cause, explained, previous, moved))

    def _fenced_late(self, worker: str, shards: set[str], at: float | None) -> None:
        """A worker says it fenced itself (a starved or frozen process finds out when it runs again):
        a redelivery already judged unexplained, of a shard it dropped, that another worker took over
        within a failover time before this line, was the fence's -- its heartbeats had stopped
        landing before the take-over, the same window as a frozen process."""
        if at is None:
            return
        for index, found in enumerate(self.redeliveries):
            if (
                not found.explained
                and found.previous == worker
                and found.shard_id in shards
                and found.moved_at is not None
                and found.moved_at <= at <= found.moved_at + FENCE_LATE_SECONDS
            ):
                self.redeliveries[index] = replace(
                    found,
                    cause=f"{worker} fenced itself (its heartbeats failed; it said so after {found.worker} "
                    "took the shard over) after processing and before its checkpoint landed",
                    explained=True,
                )

    @property
    def duplicate_deliveries(self) -> int:
        return sum(r.records for r in self.redeliveries)


class LogTail:
    """New complete lines of a set of files since the previous call (files may appear later)."""

    def __init__(self) -> None:
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def read(self, paths: list[Path]) -> list[str]:
        lines: list[str] = []
        for path in paths:
            try:
                with path.open("rb") as handle:
                    handle.seek(self._offsets.get(path, 0))
                    chunk = handle.read()
            except OSError:
                continue
            self._offsets[path] = self._offsets.get(path, 0) + len(chunk)
            data = self._partial.pop(path, b"") + chunk
            *complete, rest = data.split(b"\n")
            if rest:
                self._partial[path] = rest
            lines.extend(line.decode(errors="replace") for line in complete if line.strip())
        return lines
