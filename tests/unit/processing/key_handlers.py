"""Handlers for the key-parking tests: a per-record handler that answers as Powertools does (or per
key, or by raising), a dead letter in memory, and the per-key order check over what they logged."""

from __future__ import annotations

import threading
from collections import Counter

from consumer.processing import Batch, BatchResult
from consumer.processing.dead_letter import FailedRecords
from consumer.records import StreamRecord


def key(r: StreamRecord) -> str:
    return str(r.keys["pk"])


class DeadLetters:
    description = "memory"

    def __init__(self, log: list[tuple[str, int, str]], lock: threading.Lock) -> None:
        self._log, self._lock = log, lock
        self.sent: list[int] = []

    def send(self, failed: FailedRecords) -> None:
        with self._lock:
            for r in failed.records:
                self.sent.append(int(r.sequence_number))
                self._log.append(("dead", int(r.sequence_number), key(r)))


class PerRecord:
    """A handler that applies each record on its own, as Powertools' batch utility does:

    * ``answer="named"``: reports the failed records only (Powertools' ``BatchProcessor``);
    * ``answer="per_key"``: after a key's record fails, reports that key's later records failed too
      without applying them (Powertools' stop-on-first-failure, per key);
    * ``answer="raise"``: raises when the batch holds a failing record, applying nothing.

    A ``poison`` record always fails; a ``flaky`` one fails its first N attempts.
    """

    def __init__(self, answer: str, poison: set[int], flaky: dict[int, int] | None = None) -> None:
        self.answer = answer
        self.poison = poison
        self.flaky = dict(flaky or {})
        self.lock = threading.Lock()
        self.log: list[tuple[str, int, str]] = []  # ("applied" | "dead", seq, key) in time order
        self.given: Counter[int] = Counter()
        self.calls: list[list[int]] = []

    def fails(self, seq: int) -> bool:
        if seq in self.poison:
            return True
        if self.flaky.get(seq, 0) > 0:
            self.flaky[seq] -= 1
            return True
        return False

    def __call__(self, batch: Batch) -> BatchResult | None:
        with self.lock:
            numbers = [int(r.sequence_number) for r in batch.records]
            self.calls.append(numbers)
            self.given.update(numbers)
            if self.answer == "raise":
                if any(self.fails(n) for n in numbers):
                    raise RuntimeError("the downstream refused the batch")
                self.log.extend(("applied", int(r.sequence_number), key(r)) for r in batch.records)
                return None
            failed: list[StreamRecord] = []
            stopped: set[str] = set()
            for r in batch.records:
                if key(r) in stopped:
                    failed.append(r)
                elif self.fails(int(r.sequence_number)):
                    failed.append(r)
                    if self.answer == "per_key":
                        stopped.add(key(r))
                else:
                    self.log.append(("applied", int(r.sequence_number), key(r)))
            return BatchResult.failed(*failed, error="refused") if failed else None


def first_done_in_key_order(log: list[tuple[str, int, str]]) -> list[str]:
    """Keys whose records were first done (applied or dead-lettered) out of sequence order."""
    seen: set[int] = set()
    last: dict[str, int] = {}
    wrong = []
    for _, seq, item in log:
        if seq in seen:
            continue
        seen.add(seq)
        if last.get(item, -1) > seq:
            wrong.append(f"{item}: {seq} after {last[item]}")
        last[item] = max(last.get(item, -1), seq)
    return wrong
