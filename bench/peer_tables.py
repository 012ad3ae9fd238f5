"""The tables ``bench.peer`` compares: the sink's (in DATABASE) and the archiver's, read through pyiceberg."""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import table_catalog

DATABASE = "bench_peer"
"""The Glue database of the sink's tables."""
PEER_COLUMNS = ("_kafka_metadata_partition", "_kafka_metadata_offset", "_kafka_metadata_timestamp")
"""The Kafka partition, offset and timestamp in the sink's table (its KafkaMetadataTransform's columns)."""
KAFKALAKE_COLUMNS = ("_kafka_partition", "_kafka_offset", "_kafka_timestamp")
"""The same in the archiver's table."""


def ensure_database(endpoints: Endpoints) -> None:
    """The Glue database of the sink's tables (the sink creates tables, not databases)."""
    glue = make_client(endpoints, "glue")
    with contextlib.suppress(glue.exceptions.AlreadyExistsException):
        glue.create_database(DatabaseInput={"Name": DATABASE})


def table_records(endpoints: Endpoints, table: str) -> int:
    """The rows the table's current snapshot holds (0: no table or no snapshot yet)."""
    catalog = table_catalog(endpoints)
    if not catalog.table_exists(table):
        return 0
    snapshot = catalog.load_table(table).current_snapshot()
    return 0 if snapshot is None or snapshot.summary is None else int(snapshot.summary.get("total-records", "0"))


def table_figures(endpoints: Endpoints, table: str, columns: tuple[str, str, str]) -> dict[str, Any]:
    """``exactness`` of ``table``, whose Kafka partition, offset and timestamp are ``columns``, and its data files
    in all and per table-hour."""
    loaded = table_catalog(endpoints).load_table(table)
    figures = exactness(loaded.scan(selected_fields=columns).to_arrow(), columns)
    files = len(loaded.inspect.files())
    return {**figures, "data_files": files, "data_files_per_table_hour": files / max(figures["table_hours"], 1)}


def exactness(rows: pa.Table, columns: tuple[str, str, str]) -> dict[str, int]:
    """The rows, the rows beyond the first of each (partition, offset) pair, and the distinct hours of Kafka time
    (a timestamp column, or epoch milliseconds as the sink's metadata transform writes them)."""
    partition, offset, timestamp = columns
    pairs = rows.group_by([partition, offset]).aggregate([([], "count_all")])
    stamps = rows[timestamp]
    per_hour = 3_600_000
    if pa.types.is_timestamp(stamps.type):
        stamps, per_hour = stamps.cast(pa.timestamp("us", "UTC")).cast(pa.int64()), 3_600_000_000
    hours = pc.unique(pc.floor(pc.divide(stamps.cast(pa.float64()), per_hour)))
    return {
        "rows": rows.num_rows,
        "duplicate_partition_offset_pairs": rows.num_rows - pairs.num_rows,
        "table_hours": len(hours),
    }
