"""Shard sync over random lineages: rollovers and splits, 3+ generations, DescribeStream lagging behind.

Properties, checked against the model fleet's history:
- no shard is left without a lease (every shard whose records the application must read is leased and,
  once closed, finished);
- no descendant ever starts at LATEST (only shards listed open at the first start, without leased
  ancestors; a closed shard that still looked open then may start at LATEST: it has nothing after
  LATEST, and its children start at TRIM_HORIZON);
- no shard is leased twice (a re-created lease would replay a parent after its children);
- every parent that was processed finished before any of its descendants started;
- all of this also with slow syncers that plan on an old scan and apply the plan later
  (create-if-absent, delete-if-present), as several workers do.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.streams.sync import LeaseView
from tests.unit.streams.lineage_model import ModelFleet, ModelStream


def check_history(fleet: ModelFleet) -> None:
    stream = fleet.stream
    for shard_id, started in fleet.started_at.items():
        for ancestor in stream.ancestors(shard_id):
            if ancestor in fleet.started_at:
                assert ancestor in fleet.finished_at, (
                    f"{shard_id} started while its ancestor {ancestor} was unfinished"
                )
                assert fleet.finished_at[ancestor] < started, f"{shard_id} started before {ancestor} finished"
    required = {
        s
        for s, m in stream.shards.items()
        if fleet.initial_position == "TRIM_HORIZON" or s in fleet.open_at_first_start or m.born_at > 0
    }
    # Shards born after the first start (born_at counts evolutions after the first sync, see below).
    missing = sorted(required - set(fleet.ever_leased))
    assert not missing, f"shards never leased: {missing}"
    for shard_id in required:
        if not stream.shards[shard_id].open:
            assert shard_id in fleet.finished_at, f"closed shard {shard_id} never finished"
    for shard_id, checkpoint in fleet.ever_leased.items():
        if shard_id not in fleet.listed_open_at_first_start:
            assert checkpoint == "TRIM_HORIZON", f"{shard_id} (not open at first start) began at {checkpoint}"


step = st.one_of(
    st.tuples(st.just("evolve"), st.integers(0, 1000), st.booleans()),
    st.tuples(st.just("sync"), st.booleans(), st.booleans()),
    st.tuples(st.just("process"), st.integers(0, 1000), st.booleans()),
    st.tuples(st.just("scan"), st.just(0), st.just(False)),  # a slow syncer scans now ...
    st.tuples(st.just("stale_sync"), st.booleans(), st.booleans()),  # ... and applies its plan later
)


@settings(max_examples=120, deadline=None)
@given(
    roots=st.integers(1, 3),
    history=st.lists(st.tuples(st.integers(0, 1000), st.booleans()), max_size=4),
    steps=st.lists(step, min_size=5, max_size=40),
    initial_position=st.sampled_from(["TRIM_HORIZON", "LATEST"]),
    cleanup=st.booleans(),
    split_rounds=st.lists(st.booleans(), min_size=3, max_size=3),
    first_lag=st.tuples(st.booleans(), st.booleans()),
)
def test_random_lineages_lose_nothing_and_keep_parents_first(
    roots: int,
    history: list[tuple[int, bool]],
    steps: list[tuple[str, int | bool, bool]],
    initial_position: str,
    cleanup: bool,
    split_rounds: list[bool],
    first_lag: tuple[bool, bool],
) -> None:
    stream = ModelStream()
    for _ in range(roots):
        stream.add_root()
    for pick, split in history:  # shards closed before the application's first start
        stream.evolve(stream.open_shards()[pick % len(stream.open_shards())], split)
    for shard in stream.shards.values():
        shard.born_at = 0  # "born before the first start"
    fleet = ModelFleet(stream, initial_position, cleanup)
    fleet.sync(hide_newest=first_lag[0], stale_close=first_lag[1])
    scanned: tuple[LeaseView, ...] | None = None
    for kind, a, b in steps:
        if kind == "scan":
            scanned = tuple(fleet.leases.values())
        elif kind == "stale_sync" and scanned is not None:
            fleet.sync(hide_newest=bool(a), stale_close=b, snapshot=scanned)
        elif kind == "evolve":
            opened = stream.open_shards()
            if len(opened) < 12:
                stream.evolve(opened[int(a) % len(opened)], b)
        elif kind in ("sync", "stale_sync"):
            fleet.sync(hide_newest=bool(a), stale_close=b)
        else:
            ready = fleet.processable()
            if ready:
                fleet.process(ready[int(a) % len(ready)])
    for split in split_rounds:  # three more generations of every open shard, synced with lag
        for shard_id in stream.open_shards()[:6]:
            stream.evolve(shard_id, split and len(stream.open_shards()) < 12)
        fleet.sync(hide_newest=True, stale_close=True)
        for shard_id in fleet.processable():
            fleet.process(shard_id)
    fleet.quiesce()
    assert max(len(stream.ancestors(s)) for s in stream.shards) >= 3
    check_history(fleet)
    if cleanup:
        # Settled with cleanup: no finished lease is left that the rules say may go.
        for lease in fleet.leases.values():
            kids = [k for k, m in stream.shards.items() if m.parent == lease.shard_id]
            deletable = (
                lease.checkpoint == "SHARD_END"
                and bool(kids)
                and all(k in fleet.leases and fleet.leases[k].progressed for k in kids)
                and not lease.parent_shard_ids & set(fleet.leases)
            )
            assert not deletable, f"{lease.shard_id} should have been cleaned up"
            if lease.checkpoint == "SHARD_END" and kids:
                assert any(k in fleet.leases for k in kids), (
                    f"{lease.shard_id} leaked: its children went first"
                )
