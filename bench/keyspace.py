"""A table's keys as a benchmark changes them: every key inserted once, then ``count`` keys at a
time modified, removed or inserted again, landed as change-log objects in the sink's layout (8
shards, objects of at most 10 000 changes)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import orjson

from bench.spark_snapshot import T0

BATCH = 10_000


def _object(root: Path, shard: int, lines: list[bytes]) -> None:
    first = orjson.loads(lines[0])["sequenceNumber"]
    last = orjson.loads(lines[-1])["sequenceNumber"]
    path = root / f"shardId-{shard:04d}" / f"{int(first):040d}-{int(last):040d}.jsonl.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(b"\n".join(lines) + b"\n")


class KeySpace:
    """A table of ``size`` keys, built with one INSERT each, then changed ``count`` keys at a time."""

    def __init__(self, root: Path, size: int, seed: int = 11) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.size = size
        self.alive = [True] * size
        self.seqs = [10**20 * (s + 1) for s in range(8)]
        self.clock = 0

    def _record(self, key: int, event: str) -> bytes:
        shard = key % 8
        self.seqs[shard] += self.rng.randrange(1, 1000)
        self.clock += 1
        keys = {"pk": {"S": f"customer-{key}"}, "sk": {"S": "order"}}
        image = None
        if event != "REMOVE":
            image = {
                **keys,
                "amount": {"N": f"{self.rng.randrange(10**6)}.{self.rng.randrange(100):02d}"},
                "status": {"S": self.rng.choice(("new", "paid", "shipped"))},
                "tags": {"SS": ["a", "b"]},
                "paid": {"BOOL": self.rng.random() < 0.5},
                "lines": {"L": [{"M": {"sku": {"S": "x"}, "qty": {"N": "2"}}}]},
            }
        created = T0 + self.clock / 1000
        return orjson.dumps(
            {
                "v": 1,
                "shardId": f"shardId-{shard:04d}",
                "eventName": event,
                "sequenceNumber": str(self.seqs[shard]),
                "approximateCreationDateTime": created,
                "keys": keys,
                "newImage": image,
                "landedAt": created + 0.8,
            }
        )

    def _land(self, keyed: list[tuple[int, str]]) -> None:
        per_shard: dict[int, list[bytes]] = {}
        for key, event in keyed:
            lines = per_shard.setdefault(key % 8, [])
            lines.append(self._record(key, event))
            if len(lines) >= BATCH:
                _object(self.root, key % 8, lines)
                per_shard[key % 8] = []
        for shard, lines in per_shard.items():
            if lines:
                _object(self.root, shard, lines)

    def initial(self) -> None:
        self._land([(key, "INSERT") for key in range(self.size)])

    def changes(self, count: int) -> None:
        keyed = []
        for key in self.rng.sample(range(self.size), count):
            removed = self.rng.random() < 0.1
            event = ("REMOVE" if removed else "MODIFY") if self.alive[key] else "INSERT"
            self.alive[key] = event != "REMOVE"
            keyed.append((key, event))
        self._land(keyed)
