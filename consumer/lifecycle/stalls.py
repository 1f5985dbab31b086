"""Stalls: a shard whose lease is held, whose work waits and whose checkpoint does not move.

A worker can hold a lease and make no progress while everything about it looks healthy: its
heartbeats land, its lease-taking rounds succeed, the instance's health checks pass. Users of other
stream consumers report exactly this ("RUNNING with dead data paths for days"): a processor call
that never returns, or a reader that never reaches the end of a shard that has ended. Moving the
shard to another worker is what an operator would do by hand, so the worker does it, loudly.

A shard is *stalled* once its checkpoint has not moved for ``worker.stall_timeout_millis`` while one
of these holds:

* ``call``: a step of its consumer -- a delivery to the processor (every lane of it: a flush returns
  when every lane has stopped), a stream read, a checkpoint -- has been running for that long;
* ``end``: the shard ended (a lease names it as a parent: its children exist) that long ago, and its
  consumer has not reached the end.

A processor that is slow but makes progress moves its checkpoint and is never stalled; a quiet open
shard has no call running and is never stalled either. A batch retried until an operator acts (the
failure policy's default) does stall: nothing else can make it progress, and the page that follows
persistent stalls is the operator's cue.

:class:`StallWatch` decides, from observations passed in with the time; the scheduler acts (logs the
stuck call's stack, publishes ``StalledShards``, releases the lease).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

StallKind = Literal["call", "end"]


@dataclass(frozen=True)
class Observed:
    """One shard consumer at one look: when its running step began (None: none is running), the
    checkpoint it has now, and whether the shard is known to have ended while it is not finished."""

    shard_id: str
    step_started: int | None
    checkpoint: str | None
    ended_unfinished: bool


@dataclass(frozen=True)
class Stall:
    shard_id: str
    kind: StallKind
    stalled_millis: int  # since the checkpoint last moved, or since the shard was seen ended

    def describe(self) -> str:
        seconds = self.stalled_millis / 1000
        if self.kind == "call":
            return f"a call for it has not returned and its checkpoint has not moved for {seconds:.0f} s"
        return f"it ended {seconds:.0f} s ago and its reading has not reached the end"


@dataclass
class _Progress:
    checkpoint: str | None
    since: int  # when the checkpoint was last seen to move (or the consumer was first seen)
    ended_at: int | None = None  # when the shard was first seen ended while unfinished


@dataclass
class StallWatch:
    timeout_millis: int
    _progress: dict[str, _Progress] = field(default_factory=dict)

    def look(self, now: int, consumers: list[Observed]) -> list[Stall]:
        """The consumers stalled at ``now``; shards no longer observed are forgotten."""
        seen: dict[str, _Progress] = {}
        stalled: list[Stall] = []
        for item in consumers:
            progress = self._progress.get(item.shard_id)
            if progress is None or progress.checkpoint != item.checkpoint:
                progress = _Progress(item.checkpoint, now)
            if item.ended_unfinished:
                progress.ended_at = progress.ended_at if progress.ended_at is not None else now
            else:
                progress.ended_at = None
            seen[item.shard_id] = progress
            still = now - progress.since
            if still < self.timeout_millis:
                continue
            if item.step_started is not None and now - item.step_started >= self.timeout_millis:
                stalled.append(Stall(item.shard_id, "call", still))
            elif progress.ended_at is not None and now - progress.ended_at >= self.timeout_millis:
                stalled.append(Stall(item.shard_id, "end", now - progress.ended_at))
        self._progress = seen
        return stalled

    def forget(self, shard_id: str) -> None:
        """The shard's consumer was replaced: a new one starts its own clock."""
        self._progress.pop(shard_id, None)
