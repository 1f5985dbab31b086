"""The fixes scripts/revert_check.py can revert: each one's name, and the edits that undo it in a copy
of the tree -- (path, the text there now, what it becomes with the fix undone). An entry that no
longer matches stops the check with an AssertionError naming it, so drift is loud."""

# ruff: noqa: E501  (the entries quote lines of code as they stand)
from __future__ import annotations

from reverts_fleet import FLEET_REVERTS  # scripts/ is on sys.path when revert_check runs

REVERTS = {
    "fence_at_deadline": [
        (
            "consumer/leases/machine/holdings.py",
            "        dropped = self.expire(now_mono)\n        deadline = started_mono",
            "        dropped: list[str] = []\n        deadline = started_mono",
        ),
    ],
    "consistent_reread": [
        (
            "consumer/leases/machine/executing.py",
            "        checked[owner] = seen_at is None or asked - seen_at > horizon",
            "        checked[owner] = True",
        ),
    ],
    "ambiguous_heartbeat": [
        (
            "consumer/leases/machine/beating.py",
            "        s.row.counter = row.counter if row is not None else None",
            "        s.row.counter = None",
        ),
    ],
    "fence_full": [
        (
            "consumer/leases/machine/holdings.py",
            "        if self._held and (self._fence_at is None or now_mono >= self._fence_at):",
            "        if False:",
        ),
        (
            "consumer/leases/machine/holdings.py",
            "        return self._held.get(shard_id), dropped",
            "        return (None if self._fence_at is None or now_mono >= self._fence_at else self._held.get(shard_id)), dropped",
        ),
    ],
    "no_readopt_while_fenced": [
        (
            "consumer/leases/machine/taking.py",
            "            if s.fenced_now():\n                return\n",
            "",
        ),
        (
            "consumer/leases/machine/taking.py",
            "        _reconcile(s, snapshot)\n    if s.holdings.fenced(s.now.mono) or not s.taking:\n",
            "        _reconcile(s, snapshot)\n        yield from _adopt(s, snapshot)\n    if s.holdings.fenced(s.now.mono) or not s.taking:\n",
        ),
    ],
    "scan_before_list": [
        (
            "consumer/lifecycle/shard_sync.py",
            "            generation = self._coordinator.lineage_generation()  # before the scan: module docstring\n            snapshot = self._coordinator.scan()  # before the listing: module docstring\n            shards = tuple(self._list_shards())\n",
            "            shards = tuple(self._list_shards())\n            generation = self._coordinator.lineage_generation()\n            snapshot = self._coordinator.scan()\n",
        )
    ],
    "lineage_through_leases": [
        (
            "consumer/streams/sync.py",
            "        for child in sorted({*listed, *lease_children.get(current, ())}):",
            "        for child in sorted({*listed}):",
        )
    ],
    "cleanup_delay": [
        (
            "consumer/lifecycle/shard_sync.py",
            "        return [s for s in candidates if scanned_at - self._finished_since.get(s, scanned_at) >= delay]",
            "        return list(candidates)",
        )
    ],
    "lineage_generation": [
        (
            "consumer/lifecycle/shard_sync.py",
            '                created += self._coordinator.create_leases([lease], generation)\n            except LineageChangedError as exc:\n                log.info("shard sync: %s", exc)',
            '                created += self._coordinator.create_leases([lease])\n            except LineageChangedError as exc:\n                log.info("shard sync: %s", exc)',
        )
    ],
    "ownership_binding": [
        (
            "consumer/leases/machine/machine.py",
            "        if lease is None or (counter is not None and not s.holdings.within(shard_id, counter)):\n            return False",
            "        if lease is None:\n            return False",
        ),
    ],
    "take_sent_deadline": [
        (
            "consumer/leases/machine/holdings.py",
            "        if lease.finished or sent_fence_at is None or now_mono >= sent_fence_at:",
            "        if lease.finished or self._fence_at is None or now_mono >= self._fence_at:",
        ),
    ],
    "owner_judged_at_read": [
        (
            "consumer/leases/machine/executing.py",
            "        asked = s.now.wall\n        beat = yield from ask(GetHeartbeat(owner))\n",
            "        beat = yield from ask(GetHeartbeat(owner))\n        asked = s.now.wall\n",
        ),
    ],
    "fenced_take_check": [
        (
            "consumer/leases/machine/state.py",
            "        return self.holdings.fenced(self.now.mono)\n\n    def expire",
            "        return False\n\n    def expire",
        ),
    ],
    "update_same_ownership": [
        (
            "consumer/leases/machine/holdings.py",
            "        if held is not None and held.counter == lease.counter:\n            self._held[lease.shard_id] = lease",
            "        if held is not None:\n            self._held[lease.shard_id] = lease",
        ),
    ],
    "take_back_checkpoint_retry": [
        (
            "consumer/leases/machine/checkpoints.py",
            "        return True\n    if held_now is None:\n",
            "        return False\n    if held_now is None:\n",
        ),
    ],
    "absent_lease_not_lost": [
        (
            "consumer/leases/machine/holdings.py",
            "            if found is None:\n",
            "            if found is None and False:\n",
        ),
        (
            "consumer/leases/machine/holdings.py",
            "            if found.owner != me or found.counter != mine.counter:\n                if found.counter < mine.counter:",
            "            if found is None or found.owner != me or found.counter != mine.counter:\n                if found is not None and found.counter < mine.counter:",
        ),
    ],
    "record_before_release": [
        (
            "consumer/leases/machine/letting_go.py",
            "    lease = yield from _record_before_release(s, lease)\n",
            "",
        ),
    ],
    # ---------------------------------------------------------------- delivery (issue 35)
    "lanes_carry": [
        (
            "consumer/lifecycle/scheduler.py",
            "        done = self._carried.pop(lease.shard_id, None)  # what this worker finished: module docstring\n",
            "        done = None\n",
        )
    ],
    "lanes_report": [
        (
            "consumer/processing/lanes.py",
            "            if ahead:\n                self._finished_out_of_order(ahead)\n",
            "",
        )
    ],
    "lanes_buffer": [
        (
            "consumer/processing/function_processor.py",
            "if int(r.sequence_number) > last and r.sequence_number not in ahead",
            "if int(r.sequence_number) > last",
        )
    ],
    "failed_batch_taken_back": [
        (
            "consumer/lifecycle/shard_consumer.py",
            "            self.checkpointer.taken_back(before)  # delivered again later: not done until then\n",
            "            pass\n",
        )
    ],
    "taken_back_keeps_declared": [
        (
            "consumer/lifecycle/checkpointer.py",
            "            known = [p for p in (previous, floor, self.declared) if p is not None]\n",
            "            known = [p for p in (previous, floor) if p is not None]\n",
        )
    ],
    "deferred_not_redelivered": [
        (
            "consumer/lifecycle/shard_consumer.py",
            "                        declared=self.checkpointer.declared,\n",
            "                        declared=None,\n",
        )
    ],
    "held_lease_processed": [
        (
            "consumer/leases/machine/holdings.py",
            "        return [self._with_unwritten(lease) for lease in self._held.values()]\n",
            "        return list(self._held.values())\n",
        ),
    ],
    "processed_same_ownership": [
        (
            "consumer/leases/machine/holdings.py",
            "        if not self._within(lease.shard_id, known[0].counter):\n",
            "        if known[0].counter != lease.counter:\n",
        ),
    ],
    "written_covers_only": [
        (
            "consumer/leases/machine/holdings.py",
            "        if known is not None and (position is None or not position < known[1]):\n",
            "        if known is not None:\n",
        ),
    ],
    "window_versions_kept": [
        (
            "consumer/processing/windows.py",
            "            if checkpoint(sequence_number) is False:\n",
            "            checkpoint(sequence_number)\n            if False:\n",
        )
    ],
    "overdue_position_noted": [
        (
            "consumer/leases/machine/checkpoints.py",
            '        s.holdings.note_unwritten(lease, target)\n        raise LeaseLostError("checkpoint (a hand-over to another worker is overdue)", shard_id, None)\n',
            '        raise LeaseLostError("checkpoint (a hand-over to another worker is overdue)", shard_id, None)\n',
        ),
    ],
    "window_start_keeps_later": [
        (
            "consumer/processing/windows.py",
            "if checkpoint.isdigit() and v < start]",
            "if v != start]",
        )
    ],
    # The mechanism that covers lanes_buffer in the whole worker: the scheduler tells a consumer its
    # lease is lost as soon as the fence drops it, before a take-back can land, so no consumer carries
    # on with a buffer its lanes ran ahead of. Its own test: tests/unit/lifecycle/test_take_back.py;
    # with lanes_buffer reverted too, the directed lanes history fails as well.
    "reconcile_tells_lost": [
        (
            "consumer/lifecycle/scheduler.py",
            "                if (mine is None or later) and not consumer.lease_lost_signalled:\n",
            "                if False:\n",
        )
    ],
    "adopted_take_back_resumes": [  # own test (no directed history reaches it): tests/unit/leases/test_unwritten_checkpoints.py
        (
            "consumer/leases/machine/checkpoints.py",
            "    elif held_now.counter == now.counter and not held_now.finished:\n",
            "    elif False:\n",
        ),
    ],
    "free_lease_keeps_position": [  # own test (no directed history reaches it): tests/unit/leases/test_overdue_hand_over.py
        (
            "consumer/leases/machine/taking.py",
            "            if now is not None and now.owner in (s.me, None) and not now.finished:\n",
            "            if now is not None and now.owner == s.me:\n",
        ),
        (
            "consumer/leases/machine/executing.py",
            "            unwritten = s.holdings.unwritten_for(got)\n",
            "            unwritten = None\n",
        ),
    ],
    "given_up_position_noted": [  # own test: tests/unit/leases/test_overdue_hand_over.py
        (
            "consumer/leases/machine/checkpoints.py",
            "    if s.holdings.refused_after_letting_go(shard_id, target):\n",
            "    if False:\n",
        ),
    ],
    # Issue 46. overdue_waits_for_delivery's own test: tests/unit/leases/test_overdue_hand_over.py.
    "overdue_waits_for_delivery": [
        (
            "consumer/leases/machine/letting_go.py",
            "        if s.holdings.being_delivered(shard_id) or not s.holdings.holds(shard_id):\n",
            "        if not s.holdings.holds(shard_id):\n",
        ),
    ],
    "created_scanned_at_once": [
        (
            "consumer/leases/machine/reading.py",
            "                new_leases=new_leases or self.created != self.created_at_full,\n",
            "                new_leases=new_leases,\n",
        ),
    ],
    "free_leases_announced": [
        (
            "consumer/leases/machine/reading.py",
            "            why = reason(live, self.handing, self._unanswered(announced))\n",
            "            why = reason(live, self.handing)\n",
        ),
    ],
    "stalls_moved": [
        (
            "consumer/lifecycle/stall_mover.py",
            "        return list(self._found)\n",
            "        return []\n",
        )
    ],
    "fenced_delivery_drops": [
        (
            "consumer/leases/machine/letting_go.py",
            "    s.expire()\n    if s.hand_over_overdue(shard_id)",
            "    if s.hand_over_overdue(shard_id)",
        ),
    ],
    "judge_in_time_order": [
        (
            "tools/demo/events.py",
            "    return sorted(lines, key=stamp)\n",
            "    return lines\n",
        )
    ],
    "stalled_not_adopted_back": [
        (
            "consumer/leases/machine/taking.py",
            "        if seen.shard_id in avoided:\n            yield from hand_on_stalled(s, seen.shard_id)\n            continue\n",
            "",
        )
    ],
    "asked_wakes_consumer": [
        (
            "consumer/lifecycle/scheduler.py",
            "                if shard_id not in self._in_flight:\n                    self._schedule(shard_id, now)\n",
            "                pass\n",
        )
    ],
    "quick_parent_polls": [
        (
            "consumer/lifecycle/polling.py",
            "    if polls <= QUICK_PARENT_POLLS:\n",
            "    if False:\n",
        )
    ],
    "lineage_refusal_asks_again": [
        (
            "consumer/lifecycle/shard_sync.py",
            '            log.info("children of %s: %s; asking again", parent_id, exc)\n            return 0\n',
            '            log.info("children of %s: %s; asking again", parent_id, exc)\n            return None\n',
        )
    ],
    "scan_request_announced": [
        (
            "consumer/leases/machine/executing.py",
            "            s.hand_over_asked(lease.shard_id, to)\n",
            "            pass\n",
        )
    ],
    "pause_mark_cleared": [
        (
            "tools/demo/events.py",
            '        return "SIGSTOP" if any(start <= high and end >= low for start, end in spans) else None\n',
            '        return "SIGSTOP" if spans else None\n',
        )
    ],
    "transaction_capacity_list": [
        (
            "consumer/leases/table_requests.py",
            "        entries = capacity if isinstance(capacity, list) else [capacity]\n",
            "        entries = [capacity]\n",
        )
    ],
    "forced_take_only_overdue": [
        (
            "consumer/leases/machine/executing.py",
            "    if lease.pending_owner == s.me and hand_over_overdue(lease, s.now.wall, s.timing):\n",
            "    if lease.pending_owner == s.me and lease.pending_since is not None:\n",
        )
    ],
    "split_announced_at_creation": [
        (
            "consumer/leases/machine/taking.py",
            "    if len(s.created) > _room_for(s, s.created, frozenset(s.ended_parents)):\n",
            "    if False:\n",
        )
    ],
    **FLEET_REVERTS,
    "none": [],
}
