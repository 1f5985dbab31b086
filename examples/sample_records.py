"""A few hand-made stream records, so the examples run without AWS or the emulator."""

from __future__ import annotations

from consumer.records import StreamRecord

SHARD_ID = "shardId-00000001700000000000-example"


def sample_records(count: int = 6) -> tuple[StreamRecord, ...]:
    out = []
    for n in range(1, count + 1):
        keys = {"pk": {"S": f"customer#{n % 2}"}, "sk": {"S": f"order#{n}"}}
        body = {
            "Keys": keys,
            "NewImage": {**keys, "total": {"N": f"{n * 10}.25"}, "status": {"S": "PLACED"}},
            "SequenceNumber": str(1000 + n).zfill(21),
            "SizeBytes": 60,
            "ApproximateCreationDateTime": 1_763_798_400.0 + n,
        }
        out.append(StreamRecord({"eventID": f"ev{n}", "eventName": "INSERT", "dynamodb": body}, SHARD_ID))
    return tuple(out)
