"""The driver's rewrite through the file IO PyIceberg uses on S3, against moto's S3 server on
127.0.0.1: the copy streams into an S3 object, older deletes are read from S3, and the folded
file of Spark's is deleted there (what a run on EMR does; locally every path is a file)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from pipeline import rewrite
from pipeline.deletes import POSITION_DELETE_ARROW
from pipeline.stored import BUCKET, FileTask
from tests.support import moto_server

SCHEMA = pa.schema([pa.field("pk", pa.string()), pa.field(BUCKET, pa.int32())])
BUCKET_NAME = "snapshots"


@pytest.fixture
def s3() -> Iterator[tuple[PyArrowFileIO, object]]:
    with moto_server() as endpoint:
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        client.create_bucket(Bucket=BUCKET_NAME)
        file_io = PyArrowFileIO(
            {
                "s3.endpoint": endpoint,
                "s3.region": "us-east-1",
                "s3.access-key-id": "test",
                "s3.secret-access-key": "test",
            }
        )
        yield file_io, client


def put(client: object, key: str, table: pa.Table) -> str:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    client.put_object(Bucket=BUCKET_NAME, Key=key, Body=buffer.getvalue())  # type: ignore[attr-defined]
    return f"s3://{BUCKET_NAME}/{key}"


def test_a_bucket_is_rewritten_into_one_s3_object(s3: tuple[PyArrowFileIO, object]) -> None:
    file_io, client = s3
    rows = {"pk": [f"a{i}" for i in range(6)], BUCKET: pa.array([3] * 6, pa.int32())}
    data = put(client, "warehouse/data/a.parquet", pa.table(rows))
    fresh = put(
        client,
        "warehouse/runs/r1/kind=items/b=3/part-0.parquet",
        pa.table({"pk": ["n0"], BUCKET: pa.array([3], pa.int32())}),
    )
    older = put(
        client,
        "warehouse/data/delete-b3.parquet",
        pa.table({"file_path": [data], "pos": [0]}).cast(POSITION_DELETE_ARROW),
    )
    replaced = pa.table({"file_path": [data, data], "pos": [2, 5]}).cast(POSITION_DELETE_ARROW)

    location = rewrite.rewrite_bucket(
        type("Table", (), {"io": file_io})(),
        [FileTask(data, 3, 6, ((older, 1),))],
        replaced,
        fresh=[fresh],
        schema=SCHEMA,
        keys=["pk"],
        folder=f"s3://{BUCKET_NAME}/warehouse/runs/r1/kind=items/b=3",
    )

    assert location is not None and location.startswith(
        f"s3://{BUCKET_NAME}/warehouse/runs/r1/kind=items/b=3/"
    )
    key = location.removeprefix(f"s3://{BUCKET_NAME}/")
    body = client.get_object(Bucket=BUCKET_NAME, Key=key)["Body"].read()  # type: ignore[attr-defined]
    assert pq.read_table(io.BytesIO(body)).column("pk").to_pylist() == ["a1", "a3", "a4", "n0"]
    file_io.delete(fresh)  # what jobs._rewrite does with the file it folded
    listed = client.list_objects_v2(Bucket=BUCKET_NAME, Prefix="warehouse/runs/")  # type: ignore[attr-defined]
    # PyArrow's S3 file system leaves an empty "folder/" marker object when it deletes a file; the
    # run never lists its folder again, and Hadoop's listing (pipeline/storage.py) takes it for a folder.
    assert [o["Key"] for o in listed["Contents"] if not o["Key"].endswith("/")] == [key]
