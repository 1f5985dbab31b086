"""tests/e2e/in_flight_copies.py: only a frozen worker's object in flight explains a change-log copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from ground.files import write_atomically
from tests.e2e.in_flight_copies import unexplained_copies

SHARD = "shardId-1"
FIRST = f"{SHARD}/01-03.jsonl.gz"  # the frozen worker's object
SECOND = f"{SHARD}/01-09.jsonl.gz"  # the next owner's


@pytest.fixture
def put_in_place(tmp_path: Path) -> float:
    """Both objects written as the sink writes them; the first put in place last: its ctime."""
    for name in (SECOND, FIRST):
        write_atomically(tmp_path / name, b"lines", durable=False)
    return (tmp_path / FIRST).stat().st_ctime


def copies(first_at: float, second_at: float) -> list[tuple[str, str, tuple[tuple[str, float], ...]]]:
    return [(SHARD, "2", ((FIRST, first_at), (SECOND, second_at)))]


def test_a_write_in_flight_through_the_freeze_is_explained(tmp_path: Path, put_in_place: float) -> None:
    # Landed 5 s before it appeared, frozen from 4.9 s to 0.5 s before; the next owner landed at -2 s.
    now = put_in_place
    assert unexplained_copies(copies(now - 5, now - 2), tmp_path, (now - 4.9, now - 0.5)) == []


@pytest.mark.parametrize(
    ("first_at", "second_at", "stopped", "resumed", "why"),
    [
        (-5, -2, -4.9, 5, "put in place before the SIGCONT: the worker was running when it landed"),
        (-4, -2, -4.9, -0.5, "landed after the SIGSTOP: not the frozen worker's"),
        (-5, 1, -4.9, -0.5, "the second copy landed after the first was visible: its writer could see it"),
    ],
)
def test_any_other_copy_is_unexplained(
    tmp_path: Path, put_in_place: float, first_at: float, second_at: float, stopped: float, resumed: float,
    why: str,
) -> None:  # fmt: skip
    now = put_in_place
    found = unexplained_copies(
        copies(now + first_at, now + second_at), tmp_path, (now + stopped, now + resumed)
    )
    assert len(found) == 1, why


def test_three_copies_are_unexplained(tmp_path: Path, put_in_place: float) -> None:
    now = put_in_place
    three = [(SHARD, "2", ((FIRST, now - 5), (SECOND, now - 2), (SECOND, now - 1)))]
    assert len(unexplained_copies(three, tmp_path, (now - 4.9, now - 0.5))) == 1
