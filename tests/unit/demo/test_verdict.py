"""Load plan and verdict: the arithmetic of "nothing lost, nothing reordered"."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ground.settings import LoadSettings
from tools.demo.load import LoadPlan
from tools.demo.verdict import Delivered, judge


def plan_writes(seed: int, n: int, keys: int = 5) -> list[tuple[str, str, int]]:
    plan = LoadPlan(LoadSettings(seed=seed, keys=keys))
    return [(w.key, w.event, w.w) for _, w in (plan.next_write() for _ in range(n))]


def deliver(writes: list[tuple[str, str, int]], shard: str = "shard-1") -> list[Delivered]:
    return [Delivered(k, e, w, shard, str(100 + i * 7), f"obj-{i}") for i, (k, e, w) in enumerate(writes)]


@given(st.integers(0, 10_000))
@settings(max_examples=50)
def test_plan_never_deletes_a_missing_item_and_every_write_changes_it(seed: int) -> None:
    writes = plan_writes(seed, 200)
    exists: dict[str, int] = {}
    for key, event, w in writes:
        if event == "REMOVE":
            assert exists.pop(key) == w  # deletes only what exists, and names its write number
        else:
            assert (event == "MODIFY") == (key in exists)
            assert w > exists.get(key, 0)
            exists[key] = w


def test_perfect_delivery() -> None:
    writes = plan_writes(1, 100)
    verdict = judge(writes, deliver(writes))
    assert (verdict.written, verdict.delivered, verdict.lost, verdict.order_violations) == (100, 100, 0, 0)
    assert verdict.ok


def test_loss_duplicates_and_reordering_are_each_detected() -> None:
    writes = plan_writes(2, 60)
    changes = deliver(writes)
    lost = judge(writes, changes[:10] + changes[11:])
    assert lost.lost == 1 and not lost.ok

    replayed = [
        *changes,
        Delivered(
            *[getattr(changes[5], f) for f in ("key", "event", "w", "shard_id", "sequence_number")], "other"
        ),
    ]
    dup = judge(writes, replayed)
    assert dup.duplicates == 1 and dup.duplicate_objects == ["other"] and dup.ok

    # Swap the sequence numbers of two changes of the same key: per-item order is broken.
    key = writes[0][0]
    idx = [i for i, (k, _, _) in enumerate(writes) if k == key][:2]
    a, b = changes[idx[0]], changes[idx[1]]
    swapped = list(changes)
    swapped[idx[0]] = Delivered(a.key, a.event, a.w, a.shard_id, b.sequence_number, a.source)
    swapped[idx[1]] = Delivered(b.key, b.event, b.w, b.shard_id, a.sequence_number, b.source)
    assert judge(writes, swapped).order_violations == 1


def test_unknown_changes_are_flagged() -> None:
    writes = plan_writes(3, 10)
    extra = [*deliver(writes), Delivered("ghost", "INSERT", 1, "shard-9", "999999", "x")]
    assert judge(writes, extra).unexpected == 1


def test_a_child_delivered_before_its_parent_is_an_order_violation() -> None:
    writes = [("k", "INSERT", 1), ("k", "MODIFY", 2)]
    parent = Delivered("k", "INSERT", 1, "parent", "100", "parent/obj", landed_at=20.0)
    child = Delivered("k", "MODIFY", 2, "child", "200", "child/obj", landed_at=10.0)  # landed first
    assert judge(writes, [parent, child]).order_violations == 1
    in_order = Delivered("k", "MODIFY", 2, "child", "200", "child/obj", landed_at=30.0)
    assert judge(writes, [parent, in_order]).order_violations == 0


def test_a_late_copy_of_a_change_is_a_duplicate_not_a_reordering() -> None:
    writes = [("k", "INSERT", 1), ("k", "MODIFY", 2)]
    first = Delivered("k", "INSERT", 1, "s", "100", "s/a", landed_at=1.0)
    second = Delivered("k", "MODIFY", 2, "s", "200", "s/b", landed_at=2.0)
    zombie_copy = Delivered("k", "INSERT", 1, "s", "100", "s/zombie", landed_at=9.0)
    verdict = judge(writes, [zombie_copy, first, second])
    assert (verdict.duplicates, verdict.order_violations, verdict.duplicate_objects) == (1, 0, ["s/zombie"])
    # Who landed each copy, and when, in landing order: what tells a redelivery's cause apart.
    assert verdict.duplicate_copies == [("s", "100", (("s/a", 1.0), ("s/zombie", 9.0)))]
