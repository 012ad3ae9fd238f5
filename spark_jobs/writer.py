"""Deterministic Parquet objects from Spark: one object per group (Kafka partition, output partition), split
by a record bound, named by the layout module from the offsets it holds. Spark's part-file names are not
deterministic, so executors write with pyarrow and boto3 themselves (``mapInArrow``): the same input always
gives the same keys and the same bytes, which is what makes a re-run after a crash harmless.
"""

from __future__ import annotations

import functools
import io
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kafkalake.settings import Endpoints

WRITTEN_SCHEMA = "key string, kafka_partition int, rows long, first_offset long, last_offset long, bytes long"
KeyFor = Callable[[dict[str, Any], int, int], str]
"""(group values, first offset, last offset) -> object key."""


@dataclass(frozen=True)
class WriteSpec:
    endpoints: Endpoints
    bucket: str
    group_columns: tuple[str, ...]
    """Columns that pick the object; all are in its key."""
    path_columns: tuple[str, ...]
    """Group columns that are Hive partition values in the path, so they are left out of the file."""
    key_for: KeyFor
    max_records_per_file: int
    compression: str = "snappy"


def write_groups(frame: DataFrame, spec: WriteSpec, *, colocated: bool = False) -> DataFrame:
    """Write every group's rows (ordered by Kafka offset) and return one row per object written.

    ``colocated``: every group's rows are already in one Spark partition, so no shuffle is needed. True for frames
    derived row by row from one Kafka read (the Kafka source reads each Kafka partition as one Spark partition, and
    every group holds one Kafka partition); not for unions of such frames."""
    grouped = frame if colocated else frame.repartition(*spec.group_columns)
    ordered = grouped.sortWithinPartitions(*spec.group_columns, "_kafka_offset")
    return ordered.mapInArrow(_GroupWriter(spec), WRITTEN_SCHEMA)


def group_starts(table: pa.Table, columns: Sequence[str]) -> list[int]:
    """Row indices where a run of equal ``columns`` values starts (rows are sorted by them), plus the row count."""
    if table.num_rows == 0:
        return [0]
    changed = pa.array([False] * (table.num_rows - 1), pa.bool_())
    for name in columns:
        column = table.column(name)
        differs = pc.fill_null(pc.not_equal(column.slice(1), column.slice(0, table.num_rows - 1)), True)
        changed = pc.or_(changed, differs)
    return [0, *(int(i) + 1 for i in pc.indices_nonzero(changed).to_pylist()), table.num_rows]


_WRITTEN_ARROW = pa.schema(
    [
        ("key", pa.string()),
        ("kafka_partition", pa.int32()),
        ("rows", pa.int64()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("bytes", pa.int64()),
    ]
)


@functools.cache
def worker_s3_client(endpoints: Endpoints) -> Any:
    """One client per Python worker process (workers are reused across tasks; building a client costs ~0.1 s)."""
    from kafkalake.aws import make_client

    return make_client(endpoints, "s3")


class _GroupWriter:
    """Streams sorted batches, cutting an object whenever the group changes or the record bound is reached."""

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        self.s3 = worker_s3_client(self.spec.endpoints)
        self.written: list[dict[str, Any]] = []
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.current: tuple[Any, ...] | None = None
        for batch in batches:
            table = pa.Table.from_batches([batch])
            starts = group_starts(table, self.spec.group_columns)
            for start, end in itertools.pairwise(starts):
                group = tuple(table.column(c)[start].as_py() for c in self.spec.group_columns)
                self._add(table.slice(start, end - start), group)
        self._flush()
        if self.written:
            yield pa.RecordBatch.from_pylist(self.written, schema=_WRITTEN_ARROW)

    def _add(self, rows: pa.Table, group: tuple[Any, ...]) -> None:
        if group != self.current:
            self._flush()
            self.current = group
        while rows.num_rows:
            room = self.spec.max_records_per_file - self.pending_rows
            self.pending.append(rows.slice(0, room))
            self.pending_rows += min(room, rows.num_rows)
            rows = rows.slice(room)
            if self.pending_rows >= self.spec.max_records_per_file:
                self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        table = pa.concat_tables(self.pending)
        self.pending, self.pending_rows = [], 0
        group = {c: table.column(c)[0].as_py() for c in self.spec.group_columns}
        offsets = table.column("_kafka_offset")
        first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
        body = io.BytesIO()
        pq.write_table(table.drop_columns(list(self.spec.path_columns)), body, compression=self.spec.compression)
        key = self.spec.key_for(group, first, last)
        self.s3.put_object(Bucket=self.spec.bucket, Key=key, Body=body.getvalue())
        self.written.append(
            {
                "key": key,
                "kafka_partition": group["_kafka_partition"],
                "rows": table.num_rows,
                "first_offset": first,
                "last_offset": last,
                "bytes": body.tell(),
            }
        )


def total(written: DataFrame) -> dict[str, int]:
    row = written.agg(F.count("*").alias("objects"), F.coalesce(F.sum("rows"), F.lit(0)).alias("rows")).first()
    return {"objects": int(row["objects"]), "rows": int(row["rows"])} if row else {"objects": 0, "rows": 0}
