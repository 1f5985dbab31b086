"""Measure the emulator's sustained write and read rates: ``python -m emulator.bench``.

W threads write PutItems through boto3 for a fixed count (writes/s = items / elapsed), then one
reader drains every shard with GetRecords (records/s = records / elapsed). Numbers go to stdout.
"""

from __future__ import annotations

import threading
import time

from emulator.testing import running_emulator

WRITERS = 4
WRITES_EACH = 500


def main() -> None:
    with running_emulator(partitions=4, rollover_seconds=3600, reads_per_shard_per_second=100000) as emu:
        ddb = emu.client("dynamodb")
        arn = ddb.create_table(
            TableName="bench",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )["TableDescription"]["LatestStreamArn"]

        def write(worker: int) -> None:
            client = emu.client("dynamodb")
            for n in range(WRITES_EACH):
                client.put_item(
                    TableName="bench", Item={"pk": {"S": f"{worker}-{n % 200}"}, "v": {"N": str(n)}}
                )

        started = time.monotonic()
        threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        write_seconds = time.monotonic() - started
        emu.control.rollover("bench")
        streams = emu.client("dynamodbstreams")
        started = time.monotonic()
        records = calls = 0
        for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            iterator = streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                response = streams.get_records(ShardIterator=iterator)
                calls += 1
                records += len(response["Records"])
                if not response["Records"] and "EndingSequenceNumber" not in shard["SequenceNumberRange"]:
                    break
                iterator = response.get("NextShardIterator")
        read_seconds = time.monotonic() - started
        total = WRITERS * WRITES_EACH
        print(
            f"writes: {total} PutItem from {WRITERS} threads in {write_seconds:.2f} s = {total / write_seconds:.0f}/s"
        )
        print(
            f"reads: {records} records in {calls} GetRecords in {read_seconds:.2f} s = {records / read_seconds:.0f}/s"
        )


if __name__ == "__main__":
    main()
