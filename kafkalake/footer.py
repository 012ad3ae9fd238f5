"""Parquet footers read with ranged GETs: a file's schema and row count without reading its data."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

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
