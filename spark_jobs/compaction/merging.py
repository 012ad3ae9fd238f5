"""The compactor's executor side: merge one bin of input files into one output file, and inspect an output.

Both run as plain Spark tasks over pyarrow and boto3 (as the archiver's writer does), so a task does exactly one
bin or one file and reports what it saw; any error is returned as the task's result rather than raised, so one
partition's bad input fails only that partition. Neither persists anything in Spark: the merge streams files in
key order into row groups, and takes the digest of every key on the way (``spark_jobs.compaction.digest``); the
inspection reads only an output's footer and key columns. The merge inspects its output in the same task, from the
local file it is about to upload (no read back from S3: measured, the ranged GETs of the read-back were 0.35-1.3 s of
a 3-10 s task), and uploads it with a CRC32 of every part (``ChecksumAlgorithm``) computed from that file, which S3
checks against the bytes it stores, so the stored object is the one inspected (verification then holds its listed
size to the inspected one); an output an earlier run wrote is inspected from S3 by a task of its own.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kafkalake.endpoints import Endpoints
from spark_jobs.common import worker_s3_client
from spark_jobs.compaction.digest import KeyDigest, first_disorder, repeats

KEY_COLUMNS = ("_kafka_partition", "_kafka_offset")
ROW_GROUP_BYTES = 128 * 1024 * 1024
"""In-memory bytes buffered per row group: memory stays near this whatever the bin's size (streamed bins)."""


@dataclass(frozen=True)
class MergeTask:
    work: str
    """The partition (its manifest key) the output belongs to."""
    endpoints: Endpoints
    bucket: str
    inputs: tuple[str, ...]
    output: str
    overlapping: bool
    compression: str = "snappy"
    erase: tuple[tuple[int, int], ...] = ()
    """(Kafka partition, offset) keys left out of the output (an erasure), reported as dropped and as erased."""


@dataclass(frozen=True)
class InspectTask:
    work: str
    endpoints: Endpoints
    bucket: str
    key: str


class _Unordered(Exception):
    """A streamed bin whose rows are not in strictly increasing key order, or whose schemas differ."""


def key_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    return table.column(KEY_COLUMNS[0]).to_numpy(), table.column(KEY_COLUMNS[1]).to_numpy()


def read_object(s3: Any, bucket: str, key: str) -> pa.Table:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return pq.ParquetFile(pa.BufferReader(body)).read()


class _Output:
    """A Parquet file in a local temporary path, written one row group per ``ROW_GROUP_BYTES`` buffered."""

    def __init__(self, schema: pa.Schema, compression: str) -> None:
        handle, self.path = tempfile.mkstemp(suffix=".parquet")
        os.close(handle)
        self.schema = schema
        self.writer = pq.ParquetWriter(self.path, schema, compression=compression)
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.pending_bytes += table.nbytes
        if self.pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            table = pa.concat_tables(self.pending)
            self.writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self.pending, self.pending_bytes = [], 0

    def upload(self, s3: Any, bucket: str, key: str) -> tuple[int, dict[str, Any]]:
        """Upload the file under ``key``; its bytes and its inspection (``inspected``), taken from the local file
        before the upload. Every part of the upload carries its CRC32: S3 refuses to store other bytes."""
        self._flush()
        self.writer.close()
        try:
            report = _inspection(key, os.path.getsize(self.path), lambda: self.path)
            if "error" in report:
                raise ValueError(f"the output {key} could not be inspected: {report['error']}")
            s3.upload_file(self.path, bucket, key, ExtraArgs={"ChecksumAlgorithm": "CRC32"})
            return int(report["bytes"]), report
        finally:
            os.unlink(self.path)

    def discard(self) -> None:
        self.writer.close()
        os.unlink(self.path)


def merge(task: MergeTask) -> dict[str, Any]:
    """Write ``task.output`` from ``task.inputs``; report rows, the inputs' and dropped keys' digests, bytes, and the
    output's inspection (``inspected``, of the local file uploaded with its checksum, in the task that wrote it: no
    Spark job of its own, no read back)."""
    started = time.monotonic()
    try:
        s3 = worker_s3_client(task.endpoints)
        outcome = None if task.overlapping else _stream(s3, task)
        if outcome is None:
            outcome = _sort(s3, task)
        seconds = time.monotonic() - started - outcome["inspection"]["seconds"]
        return {"work": task.work, "output": task.output, "seconds": seconds, **outcome}
    except Exception as exc:  # noqa: BLE001 - reported as this partition's failure; the other partitions go on
        return {"work": task.work, "output": task.output, "error": f"{type(exc).__name__}: {exc}"}


def _stream(s3: Any, task: MergeTask) -> dict[str, Any] | None:
    """Inputs concatenated in order, never all in memory; None when they turn out unordered (then sorted)."""
    output: _Output | None = None
    digest, erased, input_rows, last = KeyDigest(), KeyDigest(), {}, None
    try:
        for key in task.inputs:
            table = read_object(s3, task.bucket, key)
            input_rows[key] = table.num_rows
            output = output or _Output(table.schema, task.compression)
            if not table.schema.equals(output.schema):
                raise _Unordered(key)
            if table.num_rows == 0:
                continue
            partitions, offsets = key_arrays(table)
            if not _continues(last, partitions, offsets):
                raise _Unordered(key)
            digest += KeyDigest.of(partitions, offsets)
            last = (partitions[-1], offsets[-1])
            kept, left_out = _leave_out(table, task.erase)
            erased += left_out
            output.add(kept)
        if output is None:
            raise ValueError(f"no inputs for {task.output}")
        written, report = output.upload(s3, task.bucket, task.output)
    except _Unordered:
        if output:
            output.discard()
        return None
    return {
        "rows": digest.keys - erased.keys,
        "bytes": written,
        "input_rows": input_rows,
        "inputs": digest.to_json(),
        "dropped": erased.to_json(),
        "erased": erased.keys,
        "inspection": report,
    }


def _leave_out(table: pa.Table, erase: tuple[tuple[int, int], ...]) -> tuple[pa.Table, KeyDigest]:
    """``table`` without the rows whose (Kafka partition, offset) ``erase`` names, and the digest of those rows."""
    if not erase or table.num_rows == 0:
        return table, KeyDigest()
    partitions, offsets = key_arrays(table)
    doomed = np.array(erase, dtype=np.int64)
    joined = partitions.astype(np.int64) * (1 << 40) + offsets.astype(np.int64)
    mask = np.isin(joined, doomed[:, 0] * (1 << 40) + doomed[:, 1])
    if not mask.any():
        return table, KeyDigest()
    return table.filter(pa.array(~mask)), KeyDigest.of(partitions[mask], offsets[mask])


def _continues(last: tuple[int, int] | None, partitions: np.ndarray, offsets: np.ndarray) -> bool:
    """The rows' keys rise strictly, starting after ``last`` (the key the output ended with so far)."""
    if last is not None:
        partitions, offsets = np.concatenate([[last[0]], partitions]), np.concatenate([[last[1]], offsets])
    return first_disorder(partitions, offsets) is None


def _sort(s3: Any, task: MergeTask) -> dict[str, Any]:
    """All inputs in memory, schemas unified, sorted by key, one row kept per key."""
    tables = [read_object(s3, task.bucket, key) for key in task.inputs]
    input_rows = {key: t.num_rows for key, t in zip(task.inputs, tables, strict=True)}
    merged = pa.concat_tables(tables, promote_options="permissive").sort_by([(k, "ascending") for k in KEY_COLUMNS])
    partitions, offsets = key_arrays(merged)
    repeated = repeats(partitions, offsets)
    kept, erased = _leave_out(merged.filter(pa.array(~repeated)), task.erase)
    output = _Output(kept.schema, task.compression)
    output.add(kept)
    written, report = output.upload(s3, task.bucket, task.output)
    dropped = KeyDigest.of(partitions[repeated], offsets[repeated]) + erased
    return {
        "rows": kept.num_rows,
        "bytes": written,
        "input_rows": input_rows,
        "inputs": KeyDigest.of(partitions, offsets).to_json(),
        "dropped": dropped.to_json(),
        "erased": erased.keys,
        "inspection": report,
    }


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of an S3 object: every read is one ranged GET (footers, single columns)."""

    def __init__(self, s3: Any, bucket: str, key: str) -> None:
        super().__init__()
        self.s3, self.bucket, self.key = s3, bucket, key
        self.size = int(s3.head_object(Bucket=bucket, Key=key)["ContentLength"])
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = min(max(base + offset, 0), self.size)
        return self.position

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        if end <= self.position:
            return b""
        answer = self.s3.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={self.position}-{end - 1}")
        data: bytes = answer["Body"].read()
        self.position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def inspect(task: InspectTask) -> dict[str, Any]:
    """An output's report (``inspected``) as a task of its own: for outputs an earlier run wrote."""
    return {"work": task.work, **inspected(worker_s3_client(task.endpoints), task.bucket, task.key)}


def inspected(s3: Any, bucket: str, key: str) -> dict[str, Any]:
    """A stored output's bytes, rows, schema, key digest, key ranges and rows per Kafka partition and first
    out-of-order row, read back from S3: its footer and key columns only, through ranged GETs."""
    try:
        stored = RangeFile(s3, bucket, key)
    except Exception as exc:  # noqa: BLE001 - an unreadable output fails its partition's verification only
        return {"key": key, "error": f"{type(exc).__name__}: {exc}"}
    return _inspection(key, stored.size, lambda: stored)


def _inspection(key: str, size: int, source: Any) -> dict[str, Any]:
    """``inspected``'s report of the Parquet file ``source()`` opens (an S3 object or a local path) of ``size``
    bytes."""
    started = time.monotonic()
    try:
        parquet = pq.ParquetFile(source())
        partitions, offsets = key_arrays(parquet.read(columns=list(KEY_COLUMNS)))
        ranges = []
        for partition in np.unique(partitions):
            mine = offsets[partitions == partition]
            ranges.append([int(partition), int(mine.min()), int(mine.max()), len(mine)])
        return {
            "key": key,
            "bytes": size,
            "rows": parquet.metadata.num_rows,
            "schema": parquet.schema_arrow.remove_metadata().to_string(),
            "digest": KeyDigest.of(partitions, offsets).to_json(),
            "ranges": ranges,
            "disorder": first_disorder(partitions, offsets),
            "seconds": time.monotonic() - started,
        }
    except Exception as exc:  # noqa: BLE001 - an unreadable output fails its partition's verification only
        return {"key": key, "error": f"{type(exc).__name__}: {exc}"}
