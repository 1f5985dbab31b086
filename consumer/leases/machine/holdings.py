"""What one worker holds, and until when it may use it: the held leases, the fence, the hand-over
marks, and the positions processed under them that the table has not recorded yet.

A part of the lease machine (:mod:`consumer.leases.machine`): only machine steps touch it, one at a
time under the driver's lock, so it needs no lock of its own. Every reader of the held set goes
through :meth:`Holdings.expire`, which drops everything the moment the fence deadline has passed:
fencing takes effect at the deadline itself, not at the next heartbeat or scan. That is what makes a
heartbeat that started before the deadline and *landed* after it harmless: by the time it extends the
deadline, the held set is already empty, and the leases come back only through a take that moves
their counter (which fails if another worker took them meanwhile).

Times: ``fence_at`` is on the worker's monotonic clock (which, in production, counts time the host
spent suspended: :class:`ground.clock.SystemClock`); hand-over deadlines are wall-clock ms, because
they are compared with the thief's request time written in the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from consumer.leases.model import ExtendedSequenceNumber, Lease

LET_GO_REMEMBERED = 1024
"""Leases given up that are remembered for a late checkpoint: the latest ones (a checkpoint arrives
within a call's time limit of the release; a worker reading a stream for weeks lets go of thousands)."""


@dataclass
class Holdings:
    fence_after_millis: int
    _held: dict[str, Lease] = field(default_factory=dict)
    _handoff: dict[str, str | None] = field(default_factory=dict)
    # Wall-clock ms after which a lease asked for by a thief may no longer be processed or
    # checkpointed (request time + failover - margin): the thief may force a take at + failover + skew.
    _deadline: dict[str, int] = field(default_factory=dict)
    _fence_at: int | None = None  # monotonic ms; None until the first heartbeat succeeded
    # Checkpoints asked for and not written (the table throttled, timed out): shard -> (the lease as
    # held then, the position). Kept across a fence: see :meth:`unwritten_for`.
    _unwritten: dict[str, tuple[Lease, ExtendedSequenceNumber]] = field(default_factory=dict)
    _fenced: dict[str, Lease] = field(default_factory=dict)  # what the last fence dropped
    # Leases given up since last held (released, handed over, finished, or lost to a refused write),
    # as held then: a checkpoint that arrives after that is about records processed under them (see
    # refused_after_letting_go). A loss found by a scan (reconcile) is not recorded here.
    _let_go: dict[str, Lease] = field(default_factory=dict)
    # Per held shard, the counter its *continuous* ownership began at. A take-back of a lease nobody
    # touched since the fence dropped it (the table still shows the counter I held) continues that
    # ownership: work begun under it may go on. Any other take starts a new one (since = counter).
    _since: dict[str, int] = field(default_factory=dict)
    _fenced_since: dict[str, int] = field(default_factory=dict)
    # Checkpoint writes in flight from this process, per shard, by target: the only other writers
    # that can land under my owner and counter, so recording an unwritten position waits until none
    # is, and a release records at least the furthest of them (position_before_release).
    _in_flight: dict[str, list[ExtendedSequenceNumber]] = field(default_factory=dict)
    # Deliveries to the processor in progress, per shard (lanes included: a flush returns when every
    # lane has stopped). An overdue hand-over waits for them before it releases the lease.
    _delivering: dict[str, int] = field(default_factory=dict)

    # ----------------------------------------------------------------------------- fence

    def fenced(self, now_mono: int) -> bool:
        return self._fence_at is None or now_mono >= self._fence_at

    def fence_at(self) -> int | None:
        return self._fence_at

    def renewed(self, started_mono: int, now_mono: int) -> list[str]:
        """A heartbeat that started at ``started_mono`` succeeded (we learnt it at ``now_mono``).

        If the deadline passed before we learnt it, whatever we held is dropped first (and returned,
        for the caller to announce as lost); only then does the deadline move."""
        dropped = self.expire(now_mono)
        deadline = started_mono + self.fence_after_millis
        self._fence_at = deadline if self._fence_at is None else max(self._fence_at, deadline)
        return dropped

    def expire(self, now_mono: int) -> list[str]:
        """Drop everything if the fence deadline has passed; the dropped shard ids are returned."""
        if self._held and (self._fence_at is None or now_mono >= self._fence_at):
            self._fenced = dict(self._held)  # for a checkpoint that arrives just too late
            self._fenced_since = {s: self._since.get(s, lease.counter) for s, lease in self._held.items()}
            return self._clear()
        return []

    def drop_all(self) -> list[str]:
        return self._clear()

    def _clear(self) -> list[str]:
        dropped = sorted(self._held)
        self._held.clear()
        self._since.clear()
        self._handoff.clear()
        self._deadline.clear()
        return dropped

    # -------------------------------------------------------------------------- leases

    def get(self, shard_id: str, now_mono: int) -> tuple[Lease | None, list[str]]:
        """The lease if I may still use it, plus anything the fence dropped just now."""
        dropped = self.expire(now_mono)
        return self._held.get(shard_id), dropped

    def leases(self) -> list[Lease]:
        """What I hold, each at the furthest position processed under its ownership: a checkpoint the
        table refused for now (throttled, timed out; noted by :meth:`note_unwritten`) is shown, so a
        shard consumer started next — after one stopped by a fence the worker came back from, say —
        resumes after those records rather than replaying them, as a take-back does
        (executing.resume_at). Never SHARD_END, which only the table may say. The held lease itself
        stays as the table has it: conditional writes name owner and counter only, and what a take-back
        or a release records first is judged against it."""
        return [self._with_unwritten(lease) for lease in self._held.values()]

    def _with_unwritten(self, lease: Lease) -> Lease:
        known = self._unwritten.get(lease.shard_id)
        if known is None or known[1].is_shard_end or not lease.checkpoint < known[1]:
            return lease
        if not self._within(lease.shard_id, known[0].counter):
            return lease  # noted under an earlier ownership: the next take-up writes it, if ahead
        return replace(lease, checkpoint=known[1])

    def count(self) -> int:
        return len(self._held)

    def holds(self, shard_id: str) -> bool:
        return shard_id in self._held

    def continuing(self, current: Lease) -> int | None:
        """Where the ownership began if taking ``current`` back continues it: the fence dropped it
        and the table (read consistently) still shows it mine at the counter I held then, so nobody
        took it in between. None: a take of it starts a new ownership."""
        dropped = self._fenced.get(current.shard_id)
        if dropped is None or dropped.counter != current.counter or dropped.owner != current.owner:
            return None
        return self._fenced_since.get(current.shard_id, dropped.counter)

    def within(self, shard_id: str, counter: int) -> bool:
        """Held under the ownership that began at or before ``counter`` (and is still going on)."""
        return self._within(shard_id, counter)

    def _within(self, shard_id: str, counter: int) -> bool:
        held = self._held.get(shard_id)
        return held is not None and self._since.get(shard_id, held.counter) <= counter <= held.counter

    def add(self, lease: Lease, now_mono: int, sent_fence_at: int | None, since: int | None = None) -> bool:
        """Record a lease just taken; refused (False) if the fence has passed meanwhile, in which
        case the caller must not announce it: the counter it wrote is one nobody else can use, and
        the next round re-adopts the lease once the worker is alive again. A finished lease is never
        held (nothing is left to process in it).

        ``sent_fence_at`` is the deadline in force when the take was *sent*: the answer counts only
        if it arrived before it. A take answered after a pause may have committed long ago, and the
        lease may have changed hands since; a heartbeat that succeeded in between moved the deadline
        on, but says nothing about the time the worker spent frozen with the answer in flight."""
        if lease.finished or sent_fence_at is None or now_mono >= sent_fence_at:
            return False
        self._held[lease.shard_id] = lease
        self._let_go.pop(lease.shard_id, None)
        self._since[lease.shard_id] = lease.counter if since is None else since
        self._deadline.pop(lease.shard_id, None)
        return True

    def update(self, lease: Lease) -> None:
        """The lease as a write of mine just left it, if I still hold it under the same ownership:
        a checkpoint answered late (the process stopped with it in flight) must not put an earlier
        ownership's lease back over one taken since."""
        held = self._held.get(lease.shard_id)
        if held is not None and held.counter == lease.counter:
            self._held[lease.shard_id] = lease

    def remove(self, shard_id: str, counter: int | None = None) -> tuple[Lease | None, str | None]:
        """Forget a lease (lost, released or finished); returns it and the pending hand-over target.
        With ``counter``, only if it is still held under the ownership ``counter`` belongs to."""
        if shard_id not in self._held or (counter is not None and not self._within(shard_id, counter)):
            return None, None
        lease = self._held.pop(shard_id)
        self._let_go.pop(shard_id, None)  # re-inserted last: the dict is oldest first
        self._let_go[shard_id] = lease
        while len(self._let_go) > LET_GO_REMEMBERED:
            del self._let_go[next(iter(self._let_go))]  # the oldest: its checkpoints came long ago
        self._since.pop(shard_id, None)
        to = self._handoff.pop(shard_id, None)
        self._deadline.pop(shard_id, None)
        return lease, to

    def reconcile(self, seen: dict[str, Lease | None], me: str) -> list[str]:
        """Drop leases a scan shows changed hands (never on a scan older than my own write); note
        pending-owner marks. ``seen`` maps each held shard to what the scan saw (None: absent)."""
        lost: list[str] = []
        for shard_id, mine in list(self._held.items()):
            if shard_id not in seen:
                continue
            found = seen[shard_id]
            if found is None:
                # A scan older than the lease itself (eventually consistent): a lease I hold is
                # never cleaned up (only finished ones are), and one deleted by hand shows up
                # as a refused checkpoint.
                continue
            if found.owner != me or found.counter != mine.counter:
                if found.counter < mine.counter:
                    continue  # an eventually consistent scan older than my own write
                del self._held[shard_id]
                self._since.pop(shard_id, None)
                self._handoff.pop(shard_id, None)
                self._deadline.pop(shard_id, None)
                lost.append(shard_id)
            elif found.pending_owner != mine.pending_owner:
                self._held[shard_id] = replace(
                    mine, pending_owner=found.pending_owner, pending_since=found.pending_since
                )
        return lost

    # -------------------------------------------------------------- unwritten checkpoints

    def note_unwritten(self, lease: Lease, position: ExtendedSequenceNumber) -> None:
        """A checkpoint of ``lease`` failed for a transient reason: remember the furthest position."""
        known = self._unwritten.get(lease.shard_id)
        if known is None or known[0].counter != lease.counter or known[1] < position:
            self._unwritten[lease.shard_id] = (lease, position)

    def refused_by_fence(self, shard_id: str, position: ExtendedSequenceNumber) -> bool:
        """A checkpoint of a lease the fence dropped: the records up to ``position`` were processed
        under it, so remember the position as unwritten (True) — the lease may come back untouched."""
        lease = self._fenced.get(shard_id)
        return self._noted(lease, position)

    def refused_after_letting_go(self, shard_id: str, position: ExtendedSequenceNumber) -> bool:
        """A checkpoint of a lease this worker gave up (see ``_let_go``) since the records up
        to ``position`` were processed under it: a lane's checkpoint answered late, after an overdue
        hand-over released the lease. Remember the position as unwritten (True): if the lease is free
        and this worker takes it again, it starts after those records (taking._record_unwritten)."""
        lease = self._let_go.get(shard_id)
        return self._noted(lease, position)

    def _noted(self, lease: Lease | None, position: ExtendedSequenceNumber) -> bool:
        if lease is None:
            return False
        self.note_unwritten(lease, position)
        return True

    def unwritten_unheld(self) -> list[tuple[Lease, ExtendedSequenceNumber]]:
        """Positions processed under leases I no longer hold (fenced, lost), not yet recorded, with no
        checkpoint of mine in flight for them (it could land after mine and move the checkpoint back)."""
        return [
            (lease, pos)
            for shard, (lease, pos) in self._unwritten.items()
            if shard not in self._held and shard not in self._in_flight
        ]

    def writing(self, shard_id: str, target: ExtendedSequenceNumber) -> None:
        """A checkpoint write of ``shard_id`` to ``target`` starts."""
        self._in_flight.setdefault(shard_id, []).append(target)

    def answered(self, shard_id: str, target: ExtendedSequenceNumber) -> None:
        """The write :meth:`writing` started has its answer (written, refused, or given up)."""
        targets = self._in_flight[shard_id]
        targets.remove(target)
        if not targets:
            del self._in_flight[shard_id]

    def delivering(self, shard_id: str, delta: int) -> None:
        """A delivery of ``shard_id``'s records to the processor starts (+1) or has returned (-1)."""
        count = self._delivering.get(shard_id, 0) + delta
        if count:
            self._delivering[shard_id] = count
        else:
            self._delivering.pop(shard_id, None)

    def being_delivered(self, shard_id: str) -> bool:
        return bool(self._delivering.get(shard_id))

    def forget_unwritten(self, shard_id: str) -> None:
        self._unwritten.pop(shard_id, None)

    def written(self, shard_id: str, position: ExtendedSequenceNumber | None = None) -> None:
        """A checkpoint of ``shard_id`` was written (at ``position``): an unwritten position it covers
        is forgotten — not one further on, noted meanwhile by another thread (a take-back recording the
        position of its fence while the worker's consumer had a later checkpoint refused)."""
        known = self._unwritten.get(shard_id)
        if known is not None and (position is None or not position < known[1]):
            del self._unwritten[shard_id]

    def position_before_release(self, held: Lease) -> ExtendedSequenceNumber | None:
        """What a release of ``held`` records first: the furthest of the position the table refused
        for now (:meth:`unwritten_for`) and the targets of checkpoint writes still on their way. A
        write on its way may have landed already, its answer late; recording a position behind it
        would move the checkpoint back (a lane's checkpoint timed out while a graceful stop
        released the lease). Its target was asked for, so its records are processed: recording it
        is right whether or not it landed, and it cannot land after the release (the counter moves)."""
        pending = self.unwritten_for(held)
        sent = self._in_flight.get(held.shard_id, ())
        furthest = max(sent, key=lambda position: position.rank, default=None)
        if furthest is None or not held.checkpoint < furthest:
            return pending
        return furthest if pending is None or pending < furthest else pending

    def unwritten_for(self, current: Lease) -> ExtendedSequenceNumber | None:
        """The position I processed to but could not record, for a lease I am taking back
        (``current``, read consistently just before). Writing it is right whoever held the lease
        meanwhile: a checkpoint says the records up to it are processed, and I processed them; it is
        only never written backwards (someone who got further wins). Kept until written."""
        known = self._unwritten.get(current.shard_id)
        if known is None:
            return None
        if not current.checkpoint < known[1]:
            del self._unwritten[current.shard_id]
            return None
        return known[1]

    # ------------------------------------------------------------------------ hand-over

    def handoff_requested(self, shard_id: str) -> bool:
        return shard_id in self._handoff

    def mark_shed(self, shard_id: str) -> None:
        if shard_id in self._held and shard_id not in self._handoff:
            self._handoff[shard_id] = None

    def ask_hand_over(self, shard_id: str, thief: str | None, deadline_wall: int | None) -> bool:
        """Hand the lease over after the batch in flight; with a deadline, stop processing it then
        whatever the lifecycle is doing. True when this is news: a thief's request (with its deadline)
        for a lease that had none (the shard's consumer is to be woken: it hands over now)."""
        if shard_id not in self._held:
            return False
        new = deadline_wall is not None and shard_id not in self._deadline
        if self._handoff.get(shard_id) is None:
            self._handoff[shard_id] = thief
        if deadline_wall is not None:
            self._deadline[shard_id] = min(deadline_wall, self._deadline.get(shard_id, deadline_wall))
        return new

    def forget_thief(self, shard_id: str) -> None:
        if shard_id in self._handoff:
            self._handoff[shard_id] = None

    def thief(self, shard_id: str) -> str | None:
        return self._handoff.get(shard_id)

    def hand_over_deadline(self, shard_id: str) -> int | None:
        return self._deadline.get(shard_id)

    def overdue(self, now_wall: int, grace_millis: int) -> list[str]:
        return [
            shard_id
            for shard_id, deadline in self._deadline.items()
            if shard_id in self._held and now_wall > deadline + grace_millis
        ]
