"""The lease machine's one face: every input the lease side takes, and the conversations it holds.

Inputs, each a step at the time given by the last :meth:`LeaseMachine.tick`, and what comes out:

- :meth:`~LeaseMachine.heartbeat`: PutHeartbeat (again after a resync); leases the fence or a removed
  row dropped announced ``lost``; the row's hand-over requests marked; the taker woken after an outage.
- :meth:`~LeaseMachine.take_round`: ScanWorkers or Scan; Checkpoint (positions not written yet);
  Get + Take (adoptions); Release (overdue hand-overs); GetHeartbeat + Take (the plan's takes);
  AskHandOver + RequestSteal; DeleteHeartbeat (rows long dead); ``taken`` / ``lost``; metrics.
- :meth:`~LeaseMachine.checkpoint`: Checkpoint, up to three tries; ``lost`` / ``finished``; raises
  LeaseLostError or CheckpointRefusedError.
- :meth:`~LeaseMachine.release`, :meth:`~LeaseMachine.give_up_stalled`,
  :meth:`~LeaseMachine.delivery_ended`: Checkpoint (a position not written yet), then Release, a
  DealingView first while stopping; ``released`` / ``lost``.
- :meth:`~LeaseMachine.redeal`, :meth:`~LeaseMachine.retire`: a graceful stop's last steps, a Release
  of each lease dealt to another stopper, DeleteHeartbeat of my row.
- :meth:`~LeaseMachine.delivery_started`, :meth:`~LeaseMachine.may_process`,
  :meth:`~LeaseMachine.held`, :meth:`~LeaseMachine.created`, ...: no request, the state and its
  answers (the fence takes effect at its deadline: past it, everything is dropped, announced ``lost``).

Every step's notes (announcements, log lines, metrics, wake-ups, the round observer) are taken by
the driver with :meth:`LeaseMachine.notes` and performed after the step, outside its lock.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from consumer.leases.decisions import (
    KclExpiryTracker,
    RoundPlan,
    Timing,
    live_workers,
    sync_leader,
    view_time,
)
from consumer.leases.machine import beating, checkpoints, letting_go, taking
from consumer.leases.machine.actions import Conversation, DealingView, Note, Now, Outbox
from consumer.leases.machine.dealing import Dealing
from consumer.leases.machine.holdings import Holdings
from consumer.leases.machine.not_taken import NotTaken
from consumer.leases.machine.reading import RoundReader
from consumer.leases.machine.shortfall import Shortfall
from consumer.leases.machine.state import LeaseState, Row
from consumer.leases.model import ExtendedSequenceNumber, Lease, Snapshot
from consumer.streams.pacing import FleetPosition
from ground.settings import WorkerSettings


class LeaseMachine:
    def __init__(
        self,
        me: str,
        settings: WorkerSettings,
        timing: Timing,
        now: Now,
        *,
        rng: random.Random,
        capacity_advice: str | None = None,
        expected_workers: int = 1,
    ) -> None:
        out = Outbox()
        self.state = LeaseState(
            me=me,
            settings=settings,
            timing=timing,
            rng=rng,
            now=now,
            out=out,
            holdings=Holdings(settings.fence_after_millis),
            row=Row(settings.renewal_interval_millis, settings.expiry_horizon_millis),
            reader=RoundReader(me, settings, timing, self._now, out),
            dealing=Dealing(max(settings.taker_interval_millis // 8, 1), self._now, out),
            not_taken=NotTaken(me, settings, out),
            shortfall=Shortfall(
                me,
                settings=settings,
                timing=timing,
                out=out,
                advice=capacity_advice,
                expected_workers=expected_workers,
                now_mono=now.mono,
            ),
            kcl=KclExpiryTracker(timing.failover_millis),
            expected_workers=expected_workers,
            view_since=now.mono,
        )

    def _now(self) -> Now:
        return self.state.now

    # ------------------------------------------------------------------------ each step

    def tick(self, now: Now) -> None:
        """The time of the step that follows."""
        self.state.now = now

    def notes(self) -> Sequence[Note]:
        """What the last steps have to say: the driver performs it after the step."""
        return self.state.out.drain()

    # ------------------------------------------------------------------- conversations

    def heartbeat(self) -> Conversation[bool]:
        return beating.heartbeat(self.state)

    def take_round(self, stuck: frozenset[str] = frozenset()) -> Conversation[RoundPlan | None]:
        """``stuck``: shards given up as stalled whose call here has not returned, as the stall mover
        counts them now (it alone keeps that count): avoided by this round."""
        self.state.stuck = stuck
        return taking.take_round(self.state)

    def checkpoint(
        self, shard_id: str, position: str | ExtendedSequenceNumber, counter: int | None = None
    ) -> Conversation[None]:
        """Raises ValueError at once for text that is neither a position (digits, or digits.sub
        inside a KPL aggregate) nor a KCL sentinel."""
        target = (
            position
            if isinstance(position, ExtendedSequenceNumber)
            else ExtendedSequenceNumber.parse(position)
        )
        return checkpoints.checkpoint(self.state, shard_id, target, counter)

    def release(self, shard_id: str, counter: int | None = None) -> Conversation[None]:
        return letting_go.release(self.state, shard_id, counter)

    def give_up_stalled(self, shard_id: str, counter: int | None = None) -> Conversation[None]:
        return letting_go.give_up_stalled(self.state, shard_id, counter)

    def delivery_ended(self, shard_id: str) -> Conversation[None]:
        return letting_go.delivery_ended(self.state, shard_id)

    def redeal(self) -> Conversation[None]:
        return letting_go.redeal(self.state)

    def retire(self) -> Conversation[None]:
        return beating.retire(self.state)

    def dealing_read(self, request: DealingView) -> Conversation[Snapshot]:
        return self.state.dealing.read(request.fallback, refresh=request.refresh)

    # -------------------------------------------------------------------------- inputs

    def expire(self) -> None:
        """The clock moved: everything is dropped if the fence deadline has passed."""
        self.state.expire()

    def delivery_started(self, shard_id: str) -> None:
        self.state.holdings.delivering(shard_id, +1)

    def stop_taking(self) -> None:
        """A graceful stop: take nothing more, and say so on the heartbeat row from the next beat on
        (now), so that the others scan every round and adopt what this worker hands them."""
        self.state.taking = False
        self.state.row.stopping = True
        self.state.out.wake("heartbeat")

    def created(self, leases: Sequence[Lease]) -> None:
        """Shard sync created these leases (a shard's children, or new shards): the next round,
        which starts now, scans the whole table for them instead of waiting for the full-scan
        interval, so a child starts within a taking interval of its parent's end; the others are
        told at once when my share has no room for them all (taking.created)."""
        taking.created(self.state, leases)

    # ------------------------------------------------------------------------- answers

    def held(self) -> list[Lease]:
        self.state.expire()
        return self.state.holdings.leases()

    def holding(self) -> list[Lease]:
        """What is held now, without a look at the fence (a graceful stop releases each)."""
        return self.state.holdings.leases()

    def may_process(self, shard_id: str, counter: int | None = None) -> bool:
        """Held, not fenced, no overdue hand-over, and (with ``counter``) still under the ownership
        that counter belongs to: a take-back of an untouched lease continues it, any other take
        (somebody else held the shard meanwhile) starts a new one."""
        s = self.state
        lease, dropped = s.holdings.get(shard_id, s.now.mono)
        s.out.lost(dropped, checkpoints.FENCED, s.me)
        if lease is None or (counter is not None and not s.holdings.within(shard_id, counter)):
            return False
        return not s.hand_over_overdue(shard_id)

    def handoff_requested(self, shard_id: str) -> bool:
        return self.state.holdings.handoff_requested(shard_id)

    def fenced(self) -> bool:
        return self.state.holdings.fenced(self.state.now.mono)

    def hand_over_overdue(self, shard_id: str) -> bool:
        return self.state.hand_over_overdue(shard_id)

    def finished_in_view(self, shard_id: str) -> bool:
        """The latest view shows the shard's lease finished (a finished lease stays finished)."""
        seen = self.state.latest.leases.get(shard_id)
        return seen is not None and seen.finished

    def wait_millis(self) -> int:
        """The taker's pause before its next round (LeaseState.wait_millis)."""
        return self.state.wait_millis()

    def beat_wait_millis(self, last_ok: bool) -> int:
        return self.state.row.next_wait_millis(last_ok)

    @property
    def latest(self) -> Snapshot:
        return self.state.latest

    @property
    def last_plan(self) -> RoundPlan:
        return self.state.last_plan

    @property
    def taking(self) -> bool:
        return self.state.taking

    @property
    def failures(self) -> int:
        return self.state.failures

    def shards_with_children(self) -> frozenset[str]:
        """Shards a lease of the latest full scan names as a parent (worked out once per scan)."""
        s = self.state
        seen, parents = s.children_of
        if seen is not s.latest:
            parents = frozenset(p for lease in s.latest.leases.values() for p in lease.parent_shard_ids)
            s.children_of = (s.latest, parents)
        return parents

    def is_sync_leader(self) -> bool:
        """Whether this worker lists the whole stream for the fleet, judged on its latest view at the
        view's own time (:func:`consumer.leases.decisions.sync_leader`, :func:`view_time`)."""
        s = self.state
        return sync_leader(s.me, s.latest, view_time(s.latest), s.timing) == s.me

    def fleet_position(self) -> FleetPosition | None:
        """Where this worker stands in the fleet's DescribeStream timetable (consumer.streams.pacing):
        its rank among the live workers, their number (at least the group's minimum) and whether it
        is the sync leader -- or None until it has seen itself in a scan and the live workers have
        stayed the same for one taker interval (a fleet starting together would otherwise give one
        slot to several workers while they join)."""
        s = self.state
        if s.me not in s.latest.heartbeats:
            return None
        live = tuple(sorted(live_workers(s.latest, view_time(s.latest), s.timing) | {s.me}))
        if live != s.view:
            s.view, s.view_since = live, s.now.mono
        if s.now.mono - s.view_since < s.settings.taker_interval_millis:
            return None
        return FleetPosition(live.index(s.me), max(len(live), s.expected_workers), live[0] == s.me)
