"""Parquet footers read with ranged GETs: a file's schema, row count and column statistics without reading its
data."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

KAFKA_TIME_COLUMN: Final = "_kafka_timestamp"
"""The archiver's column with each record's Kafka time (written by pyarrow, so with min/max statistics)."""
MAGIC = b"PAR1"
TAIL_BYTES = 64 * 1024


class NotParquet(ValueError):
    """The object does not end with a Parquet footer."""


def read_footer(s3: Any, bucket: str, key: str) -> pq.FileMetaData:
    """The footer of a Parquet object (one ranged GET, two for huge footers)."""
    tail = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=-{TAIL_BYTES}")["Body"].read()
    if tail[-4:] != MAGIC or len(tail) < 12:
        raise NotParquet(f"s3://{bucket}/{key} is not a Parquet file (no PAR1 trailer)")
    footer_length = int.from_bytes(tail[-8:-4], "little")
    if footer_length + 8 > len(tail):
        tail = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=-{footer_length + 8}")["Body"].read()
    return pq.ParquetFile(pa.BufferReader(MAGIC + tail[-(footer_length + 8) :])).metadata


def newest_time(metadata: pq.FileMetaData, column: str = KAFKA_TIME_COLUMN) -> datetime | None:
    """The largest value of a top-level timestamp column by the row groups' statistics (UTC); None when the file
    has no such column or no statistics for it."""
    chunks = (
        metadata.row_group(group).column(index)
        for group in range(metadata.num_row_groups)
        for index in range(metadata.num_columns)
    )
    found = [
        chunk.statistics.max
        for chunk in chunks
        if chunk.path_in_schema == column and chunk.statistics is not None and chunk.statistics.has_min_max
    ]
    times = [t if t.tzinfo else t.replace(tzinfo=UTC) for t in found if isinstance(t, datetime)]
    return max(times, default=None)
