"""Small Parquet files shaped like the archiver's output, for the compactor's and the maintainer's tests."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq


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
