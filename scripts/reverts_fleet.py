"""The deployed fleet's fixes scripts/revert_check.py can revert (issue 46: the watchdog and its
peers, the boot, the alarms and scaling, stalled shards), in the form of scripts/reverts.py: each
one's name, and the edits that undo it in a copy of the tree."""

from __future__ import annotations

FLEET_REVERTS = {
    "stuck_not_taken_back": [
        (
            "consumer/leases/machine/state.py",
            "        return frozenset(self.avoid) | self.stuck\n",
            "        return frozenset(self.avoid)\n",
        )
    ],
    "stalled_call_spare_thread": [
        (
            "consumer/lifecycle/scheduler.py",
            'self._pool = threads.pool(2 * settings.max_worker_threads, "shard")',
            'self._pool = threads.pool(settings.max_worker_threads, "shard")',
        )
    ],
    "stalled_recounted": [
        (
            "consumer/lifecycle/stall_mover.py",
            "        self._count_still_stuck(now)\n",
            "",
        )
    ],
    "peer_marks_silent": [
        (
            "deploy/watchdog.py",
            "            self._look_at_peers(now)\n",
            "            pass\n",
        )
    ],
    "peer_waits_after_outage": [
        (
            "deploy/peers.py",
            "            if now - self._fine_since < self._limit:\n",
            "            if False:\n",
        )
    ],
    "metadata_lost_powers_off": [
        (
            "infra/user_data.py",
            '        "  shutdown -h now",\n',
            "",
        )
    ],
    "peer_finds_never_reported": [
        (
            "deploy/peers.py",
            "            and (m.host in beats or matched)\n",
            "            and m.host in beats\n",
        )
    ],
    "health_from_both_tables": [
        ("deploy/watchdog.py", "            and round_ok is not None\n", "            and True\n"),
        (
            "deploy/watchdog.py",
            "            and now - int(round_ok) / 1000 <= self._round_horizon\n",
            "            and True\n",
        ),
    ],
    "failed_boot_marked": [
        (
            "infra/user_data.py",
            "{SIGNALLED_FAILURE}) mark_unhealthy ;; ",
            "{SIGNALLED_FAILURE}) ;; ",
        )
    ],
    "scale_in_to_min": [
        (
            "infra/scaling.py",
            'f"{self.multiplier:g} * {self.n}, 1, 0)"',
            'f"{3 * self.multiplier:g} * {self.n}, 1, 0)"',
        )
    ],
    "alarms_persist": [
        (
            "infra/monitoring.py",
            "PERSIST_PERIODS, PERSIST_DATAPOINTS = 5, 3\n",
            "PERSIST_PERIODS, PERSIST_DATAPOINTS = 1, 1\n",
        )
    ],
    "agent_flushed_before_hand_off": [
        (
            "deploy/watchdog.py",
            "        stop=lambda: hand_off(plan, stop=stop_workers, sleep=time.sleep),\n",
            "",
        )
    ],
    "announcement_read_before_scan": [
        (
            "consumer/leases/machine/reading.py",
            "        if announced is not None:\n            self.new_leases_seen.update(announced)\n",
            "        self.new_leases_seen.update(self._announcements(snapshot))\n",
        )
    ],
    "leases_ceiling_catching_up": [
        (
            "infra/leases_table.py",
            'writes = math.ceil((plan.value("lease_table_write_units_catching_up") + 2 * n) / target)',
            'writes = math.ceil((plan.value("lease_table_write_units") + 2 * n) / target)',
        )
    ],
    "announcements_per_worker": [
        (
            "consumer/leases/machine/reading.py",
            "        return any(at and at != self.new_leases_seen.get(w) for w, at in announced.items())\n",
            "        newest = max(announced.values(), default=0)\n"
            "        return newest > max(self.new_leases_seen.values(), default=0)\n",
        )
    ],
    "peer_own_rows_fresh": [
        (
            "deploy/peers.py",
            "            if now - beats.get(self._own, 0.0) > LOOK_SECONDS:\n",
            "            if now - beats.get(self._own, 0.0) > self._limit:\n",
        )
    ],
    "scale_out_carried_over_deploy": [
        (
            "infra/fleet_size_handler.py",
            "    if not older:  # no replacement",
            "    if True:  # no replacement",
        )
    ],
}
