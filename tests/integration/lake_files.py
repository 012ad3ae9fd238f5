"""Small Parquet files shaped like the archiver's output, for the compactor's and the maintainer's tests, and every
version of the objects under a prefix, and those holding a value, for the erasure's."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import fastavro
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


def holds(value: Any, needles: list[bytes]) -> bool:
    """Whether ``value`` (a decoded record, row or field, nested) holds one of ``needles`` in its text or bytes."""
    if isinstance(value, dict):
        return any(holds(v, needles) for v in value.values())
    if isinstance(value, list | tuple):
        return any(holds(v, needles) for v in value)
    if isinstance(value, str | bytes):
        raw = value.encode() if isinstance(value, str) else value
        return any(n in raw for n in needles)
    return False


def object_versions(s3: Any, bucket: str, prefix: str) -> Iterator[tuple[str, bytes]]:
    """(``key@version``, body) of every version of every object under ``prefix`` (delete markers left out)."""
    for version in versions(s3, bucket, prefix):
        if not version["Marker"]:
            body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])
            yield f"{version['Key']}@{version['VersionId']}", body["Body"].read()


def traces(s3: Any, bucket: str, prefix: str, needles: list[bytes]) -> list[str]:
    """The object versions under ``prefix`` (``""``: the whole bucket) holding a needle: Parquet files row by row,
    Avro files (an Iceberg table's manifests and manifest lists, compressed) record by record, and every object as
    bytes (JSON, metadata files, a Parquet file's statistics)."""
    found = []
    for name, body in object_versions(s3, bucket, prefix):
        key = name.split("@")[0]
        if key.endswith(".parquet"):
            held = holds(pq.read_table(io.BytesIO(body)).to_pylist(), needles)
        elif key.endswith(".avro"):
            held = holds(list(fastavro.reader(io.BytesIO(body))), needles)
        else:
            held = False
        if held or holds(body, needles):
            found.append(name)
    return found
