"""Recorded-style GetRecords responses, and a transport that serves them to a real boto3 client.

``generate`` writes DynamoDB Streams GetRecords response bodies exactly as the service sends them
(compact JSON; ``Records`` of NEW_AND_OLD_IMAGES records plus ``NextShardIterator``): per shard, a
run of responses of ``records_per_response`` records each, seeded. Items look like an orders table:
string keys, numbers, a nested map (shipping, with a nested geo map), a list of maps (order lines),
a string set, sometimes a number set, a binary, a BOOL and a NULL; each image is about 0.5 KB and a
record about 1.2 KB on the wire (0.8-1.6 KB), metadata included.
Events are 70 % MODIFY (both images), 20 % INSERT (new image only), 10 % REMOVE (old image only,
a third of them TTL deletes carrying ``userIdentity``). Sequence numbers rise within a shard, and
every number of shard ``s`` is above every number of shard ``s - 1``.

Full size is 256 shards x 1000 records (one full response per shard). ``BENCH_SCALE`` (a fraction
of that full size, default 0.125 = 32 shards) keeps ``make bench`` within its time budget; a
benchmark that needs more leases than there are canned shards serves shard ``i % shards`` to
lease ``i`` (the bytes are shared, every lease parses its own copy).

``CannedTransport`` answers GetShardIterator and GetRecords for a real ``dynamodbstreams`` client
from botocore's ``before-send`` event: botocore still serialises and signs the request, runs its
retry handler and hands the response to its parser (and so to the worker's ``before-parse`` hook),
but no socket is opened. An iterator names the canned shard and the response it points at; past
the last response the shard is open and idle (empty ``Records``, the same iterator) — or, with
``chain=True``, the lease goes on with the next canned shard's responses (whose sequence numbers
are all higher), so a lease has backlog beyond its own canned shard.

``canned_worker`` wires what ``consumer run`` wires, over an in-memory leases table and this
transport, for the benchmarks that drive the worker's record path.
"""

from __future__ import annotations

import base64
import functools
import os
import random
from dataclasses import dataclass
from typing import Any

import orjson

FULL_SHARDS = 256
RECORDS_PER_RESPONSE = 1000
DEFAULT_SCALE = 0.125
REGION = "eu-west-1"
STREAM_ARN = f"arn:aws:dynamodb:{REGION}:123456789012:table/orders/stream/2026-11-23T00:00:00.000"
T0 = 1_763_798_400.0
_ITERATOR_PAD = "AAAAAAAAAAH" + "x" * 180  # real iterators are ~250 opaque characters


def scale_from_env(default: float = DEFAULT_SCALE) -> float:
    """``BENCH_SCALE``: a fraction of the full 256 x 1000 records (1 = full size)."""
    text = os.environ.get("BENCH_SCALE", "").strip()
    scale = float(text) if text else default
    if not 0 < scale <= 1:
        raise ValueError(f"BENCH_SCALE is a fraction of the full 256 x 1000 records, in (0, 1]; got {text!r}")
    return scale


def shards_for(scale: float) -> int:
    return max(1, round(FULL_SHARDS * scale))


def shard_id(index: int) -> str:
    return f"shardId-00000001763798400000-{index:08x}"


def iterator(shard: int, response: int) -> str:
    return f"{STREAM_ARN}|1|{shard:06d}.{response:06d}.{_ITERATOR_PAD}"


def parse_iterator(text: str) -> tuple[int, int]:
    shard, response, _ = text.rsplit("|", 1)[1].split(".", 2)
    return int(shard), int(response)


@dataclass(frozen=True)
class CannedStream:
    """``bodies[s][r]``: response ``r`` of canned shard ``s``; ``last_sequence[s]``: its last record's."""

    bodies: tuple[tuple[bytes, ...], ...]
    last_sequence: tuple[str, ...]
    records_per_response: int
    seed: int

    @property
    def shards(self) -> int:
        return len(self.bodies)

    @property
    def records(self) -> int:
        return sum(len(b) for b in self.bodies) * self.records_per_response

    @property
    def size(self) -> int:
        return sum(len(body) for bodies in self.bodies for body in bodies)

    def all_bodies(self) -> list[bytes]:
        return [body for bodies in self.bodies for body in bodies]

    def describe(self) -> str:
        responses = sum(len(b) for b in self.bodies)
        return (
            f"{self.shards} shards x {responses // self.shards} response(s) x {self.records_per_response} "
            f"NEW_AND_OLD_IMAGES records = {self.records:,} records, {self.size / 2**20:.1f} MiB, "
            f"{self.size / self.records:.0f} B/record on the wire (seed {self.seed})"
        )


# ------------------------------------------------------------------------------------ records

_WORDS = ("linen", "shirt", "wool", "socks", "boots", "mug", "bowl", "desk", "lamp", "ink", "cable")
_CITIES = ("Lyon", "Dublin", "Porto", "Gdansk", "Leeds", "Ghent", "Bergen", "Turin", "Graz", "Aarhus")
_STATUSES = ("PENDING", "PAID", "PACKED", "SHIPPED", "DELIVERED")
_TAGS = ("gift", "priority", "fragile", "b2b", "promo", "repeat", "eco", "express")


def _s(value: str) -> dict[str, Any]:
    return {"S": value}


def _n(value: float | int) -> dict[str, Any]:
    return {"N": str(value)}


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _item(rng: random.Random, customer: int, order: int) -> dict[str, Any]:
    lines = []
    total = 0.0
    for _ in range(rng.randint(1, 2)):
        price = round(rng.uniform(2, 250), 2)
        qty = rng.randint(1, 4)
        total += price * qty
        lines.append(
            {"M": {"sku": _s(f"SKU-{rng.randrange(10**6):06d}"), "qty": _n(qty), "price": _n(price)}}
        )
    item: dict[str, Any] = {
        "pk": _s(f"CUSTOMER#{customer:08d}"),
        "sk": _s(f"ORDER#{order:010d}"),
        "status": _s(rng.choice(_STATUSES[:2])),
        "total": _n(round(total, 2)),
        "version": _n(1),
        "paid": {"BOOL": rng.random() < 0.6},
        "coupon": {"NULL": True} if rng.random() < 0.7 else _s(f"SAVE{rng.randint(5, 30)}"),
        "lines": {"L": lines},
        "shipping": {
            "M": {
                "city": _s(rng.choice(_CITIES)),
                "country": _s(rng.choice(("FR", "IE", "PT", "PL", "GB", "BE", "NO", "IT", "AT", "DK"))),
                "geo": {
                    "M": {"lat": _n(round(rng.uniform(36, 62), 4)), "lon": _n(round(rng.uniform(-9, 24), 4))}
                },
            }
        },
        "tags": {"SS": rng.sample(_TAGS, rng.randint(1, 2))},
    }
    if rng.random() < 0.2:
        item["note"] = _s(_text(rng, rng.randint(2, 8)))
    if rng.random() < 0.2:
        item["ratings"] = {"NS": sorted({str(rng.randint(1, 5)) for _ in range(3)})}
    if rng.random() < 0.2:
        item["receipt"] = {"B": base64.b64encode(rng.randbytes(rng.randint(8, 24))).decode()}
    return item


def _modified(rng: random.Random, item: dict[str, Any]) -> dict[str, Any]:
    new = dict(item)
    new["status"] = _s(rng.choice(_STATUSES[1:]))
    new["version"] = _n(int(item["version"]["N"]) + rng.randint(1, 3))
    new["updatedAt"] = _s(f"2026-11-23T01:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z")
    if rng.random() < 0.3:
        new["paid"] = {"BOOL": True}
    return new


def _size(value: Any) -> int:
    """DynamoDB's item-size accounting, roughly: names and values in bytes, numbers ~ digits / 2."""
    if isinstance(value, dict):
        if len(value) == 1:
            ((kind, raw),) = value.items()
            if kind in ("S", "B"):
                return len(raw)
            if kind == "N":
                return len(raw) // 2 + 1
            if kind in ("BOOL", "NULL"):
                return 1
            if kind in ("SS", "NS"):
                return sum(len(v) for v in raw)
            if kind == "L":
                return 3 + sum(1 + _size(v) for v in raw)
            if kind == "M":
                return 3 + sum(len(k) + 1 + _size(v) for k, v in raw.items())
        return sum(len(k) + _size(v) for k, v in value.items())
    return 0


def _record(rng: random.Random, sequence: int, created: float, customer: int, order: int) -> dict[str, Any]:
    roll = rng.random()
    event = "MODIFY" if roll < 0.7 else "INSERT" if roll < 0.9 else "REMOVE"
    item = _item(rng, customer, order)
    keys = {"pk": item["pk"], "sk": item["sk"]}
    body: dict[str, Any] = {"ApproximateCreationDateTime": created, "Keys": keys}
    if event == "MODIFY":
        body["NewImage"] = _modified(rng, item)
        body["OldImage"] = item
    elif event == "INSERT":
        body["NewImage"] = item
    else:
        body["OldImage"] = item
    body["SequenceNumber"] = str(sequence)
    body["SizeBytes"] = _size(keys) + _size(body.get("NewImage", {})) + _size(body.get("OldImage", {}))
    body["StreamViewType"] = "NEW_AND_OLD_IMAGES"
    record: dict[str, Any] = {
        "eventID": f"{rng.getrandbits(128):032x}",
        "eventName": event,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": body,
    }
    if event == "REMOVE" and rng.random() < 1 / 3:
        record["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return record


def generate(
    shards: int,
    *,
    records_per_response: int = RECORDS_PER_RESPONSE,
    responses_per_shard: int = 1,
    seed: int = 11,
) -> CannedStream:
    """Seeded GetRecords bodies; shard ``s``'s sequence numbers all lie above shard ``s - 1``'s."""
    bodies: list[tuple[bytes, ...]] = []
    last: list[str] = []
    for shard in range(shards):
        rng = random.Random(f"{seed}/{shard}")
        sequence = 4_900_000_000_000_000_000_000 + shard * 10**15
        created = T0 + shard
        responses: list[bytes] = []
        for response in range(responses_per_shard):
            records = []
            for _ in range(records_per_response):
                sequence += rng.randint(1, 5_000)
                created += rng.randint(0, 40) / 1000
                records.append(
                    _record(rng, sequence, round(created, 3), rng.randrange(50_000), rng.randrange(10**9))
                )
            document = {"Records": records, "NextShardIterator": iterator(shard, response + 1)}
            responses.append(orjson.dumps(document))
        bodies.append(tuple(responses))
        last.append(str(sequence))
    return CannedStream(tuple(bodies), tuple(last), records_per_response, seed)


@functools.lru_cache(maxsize=2)
def load(scale: float | None = None, seed: int = 11) -> CannedStream:
    """The canned stream at ``scale`` (default: ``BENCH_SCALE``, else 1/8 of full size); generated
    once per process, so the benchmarks run by one ``python -m bench`` share it."""
    return generate(shards_for(scale if scale is not None else scale_from_env()), seed=seed)


def write(canned: CannedStream, path: str) -> None:
    """Save the bodies for a fresh process (length-prefixed, one response after another)."""
    with open(path, "wb") as out:
        out.write(
            orjson.dumps(
                {
                    "shards": [len(b) for b in canned.bodies],
                    "last": canned.last_sequence,
                    "records_per_response": canned.records_per_response,
                    "seed": canned.seed,
                }
            )
            + b"\n"
        )
        for body in canned.all_bodies():
            out.write(len(body).to_bytes(8, "little"))
            out.write(body)


def read(path: str) -> CannedStream:
    """What :func:`write` saved; each body is read into a bytes object of its own exact size."""
    with open(path, "rb") as source:
        header = orjson.loads(source.readline())
        bodies = tuple(
            tuple(source.read(int.from_bytes(source.read(8), "little")) for _ in range(count))
            for count in header["shards"]
        )
    return CannedStream(bodies, tuple(header["last"]), header["records_per_response"], header["seed"])


# ---------------------------------------------------------------------------------- transport


class _Raw:
    """What botocore's AWSResponse reads the body from (``raw.stream()``)."""

    __slots__ = ("_body",)

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


class CannedTransport:
    """Serves a :class:`CannedStream` to a boto3 ``dynamodbstreams`` client; see the module docstring.

    The lease ``shard_id(i)`` reads canned shard ``i % canned.shards``.
    """

    def __init__(self, canned: CannedStream, *, chain: bool = False) -> None:
        self.canned = canned
        self.chain = chain
        self._idle = [
            orjson.dumps({"Records": [], "NextShardIterator": iterator(s, len(b))})
            for s, b in enumerate(canned.bodies)
        ]
        self.get_records_calls = 0
        self.empty_responses = 0

    def attach(self, client: Any) -> Any:
        client.meta.events.register("before-send.dynamodb-streams", self._send, unique_id="bench-canned")
        return client

    def canned_shard(self, lease_shard_id: str) -> int:
        return int(lease_shard_id.rsplit("-", 1)[1], 16) % self.canned.shards

    def _send(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        payload = orjson.loads(request.body)
        if operation == "GetRecords":
            self.get_records_calls += 1
            shard, response = parse_iterator(payload["ShardIterator"])
            if payload.get("Limit", 1000) < self.canned.records_per_response:
                raise ValueError("canned responses hold more records than this GetRecords Limit allows")
            if self.chain and response >= len(self.canned.bodies[shard]) and shard + 1 < self.canned.shards:
                shard, response = shard + 1, 0
            bodies = self.canned.bodies[shard]
            if response < len(bodies):
                body = bodies[response]
            else:
                body = self._idle[shard]
                self.empty_responses += 1
        elif operation == "GetShardIterator":
            if payload["ShardIteratorType"] != "TRIM_HORIZON":
                raise ValueError(
                    f"the canned stream serves TRIM_HORIZON only, not {payload['ShardIteratorType']}"
                )
            body = orjson.dumps({"ShardIterator": iterator(self.canned_shard(payload["ShardId"]), 0)})
        else:
            raise ValueError(f"the canned stream does not answer {operation}")
        headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "bench"}
        return AWSResponse(request.url, 200, headers, _Raw(body))


def streams_client(transport: CannedTransport) -> Any:
    """A boto3 ``dynamodbstreams`` client configured as the worker's (consumer.runtime.clients) on the
    canned transport."""
    import boto3

    from consumer.api.aws import stream_client_config

    session = boto3.session.Session(
        aws_access_key_id="bench", aws_secret_access_key="bench", region_name=REGION
    )
    return transport.attach(session.client("dynamodbstreams", config=stream_client_config()))


# ------------------------------------------------------------------ the worker over the canned stream
