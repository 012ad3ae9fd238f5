"""Small Parquet files shaped like the archiver's output, for the compactor's and the maintainer's tests, and every
version of the Parquet objects under a prefix, for the erasure's."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.erasure.purge import versions


def small_file(kafka_partition: int, first: int, rows: int) -> bytes:
    table = pa.table(
        {
            "id": [f"r-{kafka_partition}-{first + i}" for i in range(rows)],
            "payload": [f"{'x' * 60}-{first + i}" for i in range(rows)],
            "_kafka_partition": pa.array([kafka_partition] * rows, pa.int32()),
            "_kafka_offset": pa.array(range(first, first + rows), pa.int64()),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def version_tables(s3: Any, bucket: str, prefix: str, suffix: str = "") -> Iterator[tuple[str, pa.Table]]:
    """(``key@version id``, its rows) of every version of every object under ``prefix`` whose key ends with
    ``suffix`` (delete markers left out): what a reader of old versions would find."""
    for version in versions(s3, bucket, prefix):
        if not version["Marker"] and version["Key"].endswith(suffix):
            body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
            yield f"{version['Key']}@{version['VersionId']}", pq.read_table(io.BytesIO(body))
