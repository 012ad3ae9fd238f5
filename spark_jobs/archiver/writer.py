"""A plan's objects, written from one pass over its records: data objects per (schema version, Kafka partition,
hour), the delete log, and quarantine objects per (how they are kept, Kafka partition, date), each split by a
record bound and named by the layout module from the offsets it holds.

Spark's part-file names are not deterministic, so executors write with pyarrow and boto3 themselves
(``mapInArrow``): rows arrive in Kafka order (the Kafka source reads each Kafka partition as one Spark partition,
in offset order), so each group's rows, and therefore its objects' keys and bytes, depend only on the plan. That
is what makes a redo after a crash harmless. No shuffle and no sort in Spark: each task splits its batches with
Arrow compute and keeps a buffer per group, bounded by the plan's records. Its objects are uploaded a few at a time
in the background (``spark_jobs.archiver.uploads``), and it returns once all are stored.
"""

from __future__ import annotations

import io
import itertools
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import SCHEMA_VERSION_COLUMN, TIME_COLUMN
from kafkalake.layout import DataKey, Partition, TablePrefix, restricted_encryption
from kafkalake.personal import KAFKA_KEY_COLUMN, Keyring, QuarantineMode
from kafkalake.undeclared import UNDECLARED_VERSION
from spark_jobs.archiver.transform import (
    DECODED_KEY_COLUMN,
    KAFKA_TIME_SOURCE,
    MEMBER_COLUMN,
    META_COLUMNS,
    QUARANTINE_COLUMNS,
    RAW_COLUMNS,
    TIME_SOURCE_COLUMN,
    TOMBSTONE,
    TOMBSTONE_KEY_COLUMN,
)
from spark_jobs.archiver.uploads import UPLOADS, Uploads
from spark_jobs.common import worker_s3_client, worker_s3_retries

OUTCOME_SCHEMA = (
    "member int, kind string, key string, key_id string, kafka_partition int, error string, rows long, "
    "first_offset long, last_offset long, bytes long, seconds double"
)
"""One row per object written (kind data or quarantine), per (Kafka partition, error) counted (kind count: error
null for data rows), per task timing (kind waited: seconds spent waiting for Spark's read and decode; kind
wrote: seconds spent splitting, encoding and uploading), and per task the S3 calls botocore retried (kind retried,
in rows); ``member``: the place of the row's plan in its pass (null on a task's timings and retries)."""
DATA, QUARANTINE, COUNT, WAITED, WROTE, RETRIED = "data", "quarantine", "count", "waited", "wrote", "retried"
ERASE = "erase"
"""An outcome row per tombstone of a ``by_key`` topic and key the archiver holds: the keyed hash of its Kafka key
(``key``) under that key (``key_id``), its Kafka partition and offset (``first_offset``), for the plan's erasure
request (``kafkalake.erasure.tombstone_request``)."""
TOMBSTONE_COLUMN = "_tombstone"
DATA_GROUP = ("_kafka_partition", "dt", "hour")
QUARANTINE_GROUP = ("_kafka_partition", "dt")
"""A quarantined record's own bytes: left out of its quarantine row when the topic keeps offsets only."""
_OUTCOME_ARROW = pa.schema(
    [
        ("member", pa.int32()),
        ("kind", pa.string()),
        ("key", pa.string()),
        ("key_id", pa.string()),
        ("kafka_partition", pa.int32()),
        ("error", pa.string()),
        ("rows", pa.int64()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("bytes", pa.int64()),
        ("seconds", pa.float64()),
    ]
)


@dataclass(frozen=True)
class PlanLayout:
    """Where and how a topic's plan is written."""

    endpoints: Endpoints
    """Where to write: ``endpoints.bucket``."""
    prefix: TablePrefix
    versions: tuple[tuple[int, str], ...]
    """(schema version, the column holding its values) for every version the plan may hold."""
    extra_columns: tuple[str, ...]
    """``_key`` and/or ``_headers`` when the topic archives them, ``_pseudonym_key_id`` when it hashes fields, the key
    or headers."""
    keep_tombstones: bool
    max_records_per_file: int
    compression: str = "snappy"
    quarantine: QuarantineMode = QuarantineMode.PLAIN
    """Where quarantined records go, and whether with their raw bytes (``kafkalake.personal``)."""
    erasure_keys: Keyring | None = None
    """A ``by_key`` topic's pseudonym keys: each tombstone's key (``TOMBSTONE_KEY_COLUMN``) is reported hashed under
    each of them (``ERASE``), never in clear."""
    version_column: bool = False
    """Whether data objects hold their schema version as a column (an Iceberg table's), not only in their path."""
    changes_only: bool = False
    """Whether data objects are the plan's changes, which its commit reads and then deletes (an upsert table's), not
    rows of the table: a tombstone's row then keeps its key, which the commit deletes by."""

    @property
    def newest(self) -> int:
        return max(v for v, _ in self.versions)


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


def constant(table: pa.Table, columns: Sequence[str]) -> bool:
    """Every row has the same non-null value in each of ``columns``."""
    for name in columns:
        column = table.column(name)
        if column.null_count:
            return False
        bounds = pc.min_max(column)
        if bounds["min"] != bounds["max"]:
            return False
    return True


def split_groups(table: pa.Table, columns: Sequence[str]) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """(group values, rows) per distinct ``columns``, each group's rows in their original (Kafka) order. A batch
    of one group (the common case: one Kafka partition, one hour) is passed through unsorted."""
    if table.num_rows == 0:
        return
    if constant(table, columns):
        yield tuple(table.column(c)[0].as_py() for c in columns), table
        return
    ordered = table.take(pc.sort_indices(table, [(c, "ascending") for c in [*columns, "_kafka_offset"]]))
    for start, end in itertools.pairwise(group_starts(ordered, columns)):
        yield tuple(ordered.column(c)[start].as_py() for c in columns), ordered.slice(start, end - start)


def selected(table: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
    """The rows ``mask`` (without nulls) selects; the table itself when it selects every row (the common batch: one
    version, no errors), which ``filter`` would copy whole (measured: a third of the writer's CPU)."""
    return table if pc.all(mask).as_py() else table.filter(mask)


def utc_date(times: pa.ChunkedArray) -> pa.ChunkedArray:
    """The UTC date of each instant, whatever zone Spark's Arrow batches name (the session's): the wall time in UTC
    is the instant itself."""
    return times.cast(pa.timestamp("us")).cast(pa.date32())


def utc_hour(times: pa.ChunkedArray) -> pa.ChunkedArray:
    """The UTC hour (0-23) of each instant, whatever zone Spark's Arrow batches name."""
    return pc.hour(times.cast(pa.timestamp("us"))).cast(pa.int32())


def business_time(rows: pa.Table) -> tuple[tuple[pa.Field, pa.ChunkedArray], tuple[pa.Field, pa.ChunkedArray]]:
    """The rows' ``_business_time`` and ``_time_source`` (field and values): Spark's, or, where Spark left them out
    since every row's is its Kafka time (``transform.plan_rows``), the Kafka time and ``KAFKA_TIME_SOURCE``, as
    Spark would have given them. ``_time_source`` is non-null whatever Spark says (every data row has one): Spark
    makes it nullable in a pass that mixes topics with and without a time field, non-null in a plan alone, and a
    member's objects must not depend on its pass-mates."""
    source = pa.field(TIME_SOURCE_COLUMN, pa.string(), nullable=False)
    if TIME_COLUMN in rows.column_names:
        time = rows.schema.field(TIME_COLUMN)
        return (time, rows.column(time.name)), (source, rows.column(source.name))
    kafka = rows.schema.field("_kafka_timestamp")
    sources = pa.chunked_array([pa.repeat(pa.scalar(KAFKA_TIME_SOURCE), rows.num_rows)], pa.string())
    return (kafka.with_name(TIME_COLUMN), rows.column(kafka.name)), (source, sources)


def data_rows(rows: pa.Table, value_column: str, layout: PlanLayout, tombstones: pa.Array | None) -> pa.Table:
    """One version's rows as written: its fields (nullable, as a struct's fields are), the Kafka metadata, the
    business time, the wanted extras (a ``key_format`` topic's ``_key`` decoded: ``DECODED_KEY_COLUMN``),
    ``_tombstone`` when the version carries the delete log, and dt/hour (UTC, of the business time) for the path.
    Tombstone rows have null fields; in a ``by_key`` topic a null ``_key`` too: the tombstone asks to erase that key,
    so its own row must not keep it in clear (the plan's erasure request holds its keyed hash with the same Kafka
    partition and offset)."""
    values = rows.column(value_column)
    struct = values.type
    columns: dict[str, pa.ChunkedArray | pa.Array] = {}
    fields = []
    for index in range(struct.num_fields):
        child = struct.field(index)
        fields.append(pa.field(child.name, child.type))
        columns[child.name] = pc.struct_field(values, [index])
    for name in META_COLUMNS:
        columns[name] = rows.column(name)
        fields.append(rows.schema.field(name))
    for time_field, values in business_time(rows):
        columns[time_field.name] = values
        fields.append(time_field)
    for name in layout.extra_columns:
        source = DECODED_KEY_COLUMN if name == KAFKA_KEY_COLUMN and DECODED_KEY_COLUMN in rows.column_names else name
        columns[name] = rows.column(source)
        fields.append(rows.schema.field(source).with_name(name))
    if tombstones is not None:
        columns[TOMBSTONE_COLUMN] = tombstones
        fields.append(pa.field(TOMBSTONE_COLUMN, pa.bool_(), nullable=False))
        if KAFKA_KEY_COLUMN not in layout.extra_columns:
            columns[KAFKA_KEY_COLUMN] = rows.column(KAFKA_KEY_COLUMN)
            fields.append(rows.schema.field(KAFKA_KEY_COLUMN))
        if layout.erasure_keys is not None and not layout.changes_only:  # the erasure request says whose key it was
            columns[KAFKA_KEY_COLUMN] = pc.if_else(
                tombstones, pa.scalar(None, rows.schema.field(KAFKA_KEY_COLUMN).type), columns[KAFKA_KEY_COLUMN]
            )
    columns["dt"], columns["hour"] = utc_date(columns[TIME_COLUMN]), utc_hour(columns[TIME_COLUMN])
    fields += [pa.field("dt", pa.date32()), pa.field("hour", pa.int32())]
    return pa.Table.from_arrays(list(columns.values()), schema=pa.schema(fields))


def quarantine_rows(rows: pa.Table, mode: QuarantineMode) -> pa.Table:
    """Rows with an error other than a tombstone: raw bytes (key and value; not when ``offsets_only``), offsets,
    Kafka time, the error, and dt (UTC date of the Kafka time) for the path."""
    kept = [c for c in QUARANTINE_COLUMNS if mode != QuarantineMode.OFFSETS_ONLY or c not in RAW_COLUMNS]
    return rows.select(kept).append_column(pa.field("dt", pa.date32()), utc_date(rows.column("_kafka_timestamp")))


def quarantine_modes(rows: pa.Table, mode: QuarantineMode) -> Iterator[tuple[QuarantineMode, pa.Table]]:
    """The quarantined rows by how they are kept: held records (``UNDECLARED_VERSION``) with their raw bytes under
    the restricted prefix whatever the topic's ``mode`` (their version may hold personal fields no one has
    declared, and they are kept to be archived once it is); the others as ``mode`` says. With ``mode``
    restricted, one table: its objects hold both, in Kafka order."""
    if mode == QuarantineMode.RESTRICTED:
        yield mode, rows
        return
    held = pc.fill_null(pc.equal(rows.column("_error"), UNDECLARED_VERSION), False)
    yield mode, rows.filter(pc.invert(held))
    yield QuarantineMode.RESTRICTED, rows.filter(held)


@dataclass
class _Buffer:
    tables: list[pa.Table] = field(default_factory=list)
    rows: int = 0


class PlanWriter:
    """A task's records → its data and quarantine objects, and its counts (one outcome row each); ``layouts``: each
    member's of the pass, by its place (``MEMBER_COLUMN``); ``uploads``: how many of its objects are put at a time."""

    def __init__(self, layouts: Sequence[PlanLayout], uploads: int = UPLOADS) -> None:
        self.layouts, self.in_flight = tuple(layouts), uploads

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        endpoints = self.layouts[0].endpoints
        retries = worker_s3_retries(endpoints)
        retried_before = retries.total
        self.outcome: list[dict[str, Any]] = []
        self.buffers: dict[tuple[Any, ...], _Buffer] = {}
        self.counts: Counter[tuple[int, int, str | None]] = Counter()
        waited = wrote = 0.0
        batches = iter(batches)
        with Uploads(worker_s3_client(endpoints), endpoints.bucket, uploads=self.in_flight) as self.uploads:
            while True:
                started = time.monotonic()
                batch = next(batches, None)
                waited += time.monotonic() - started
                if batch is None:
                    break
                started = time.monotonic()
                table = pa.Table.from_batches([batch])
                one = MEMBER_COLUMN not in table.column_names  # a pass of one plan (``transform.plan_rows``)
                for (member,), rows in [((0,), table)] if one else split_groups(table, [MEMBER_COLUMN]):
                    self._route(member, rows)
                wrote += time.monotonic() - started
            started = time.monotonic()
            for group in list(self.buffers):
                self._flush(group)
        wrote += time.monotonic() - started  # the uploads' end included
        self.outcome += [
            {"member": m, "kind": COUNT, "kafka_partition": p, "error": e, "rows": n}
            for (m, p, e), n in self.counts.items()
        ]
        self.outcome += [{"kind": WAITED, "seconds": waited}, {"kind": WROTE, "seconds": wrote}]
        self.outcome.append({"kind": RETRIED, "rows": retries.total - retried_before})
        yield pa.RecordBatch.from_pylist(self.outcome, schema=_OUTCOME_ARROW)

    def _route(self, member: int, table: pa.Table) -> None:
        layout = self.layouts[member]
        self._count(member, table)
        error = table.column("_error")
        good = pc.is_null(error)
        tombstone = pc.fill_null(pc.equal(error, TOMBSTONE), False)
        for version, column in layout.versions:
            mine = pc.and_(good, pc.fill_null(pc.equal(table.column("_schema_version"), version), False))
            carries_log = layout.keep_tombstones and version == layout.newest
            rows = selected(table, pc.or_(mine, tombstone) if carries_log else mine)
            flags = pc.fill_null(pc.equal(rows.column("_error"), TOMBSTONE), False) if carries_log else None
            written = data_rows(rows, column, layout, flags)
            if layout.version_column:
                written = written.append_column(
                    pa.field(SCHEMA_VERSION_COLUMN, pa.int32(), nullable=False),
                    pa.array([version] * written.num_rows, pa.int32()),
                )
            for group, part in split_groups(written, DATA_GROUP):
                self._add((member, DATA, version, *group), part)
        if layout.erasure_keys is not None and pc.any(tombstone).as_py():
            self._erasures(member, layout.erasure_keys, table.filter(tombstone))
        if error.null_count < table.num_rows:
            quarantined = table.filter(pc.and_(pc.invert(good), pc.invert(tombstone)))
            for mode, rows in quarantine_modes(quarantined, layout.quarantine):
                for group, part in split_groups(quarantine_rows(rows, mode), QUARANTINE_GROUP):
                    self._add((member, QUARANTINE, mode, *group), part)

    def _erasures(self, member: int, keys: Keyring, tombstones: pa.Table) -> None:
        """Each tombstone's clear key digested under every key (the rows before it may have been hashed under any)."""
        names = (TOMBSTONE_KEY_COLUMN, "_kafka_partition", "_kafka_offset")
        for raw, part, offset in zip(*(tombstones.column(c).to_pylist() for c in names), strict=True):
            if raw is not None:
                self.outcome += [
                    {
                        "member": member,
                        "kind": ERASE,
                        "key": k.digest_bytes(raw),
                        "key_id": k.key_id,
                        "kafka_partition": part,
                        "first_offset": offset,
                    }
                    for k in keys.keys
                ]

    def _count(self, member: int, table: pa.Table) -> None:
        """Rows per (Kafka partition, error)."""
        if table.column("_error").null_count == table.num_rows and constant(table, ["_kafka_partition"]):
            self.counts[(member, table.column("_kafka_partition")[0].as_py(), None)] += table.num_rows
            return
        counted = table.group_by(["_kafka_partition", "_error"]).aggregate([("_kafka_offset", "count")])
        columns = (counted.column(c).to_pylist() for c in ("_kafka_partition", "_error", "_kafka_offset_count"))
        for partition, error, n in zip(*columns, strict=True):
            self.counts[(member, partition, error)] += n

    def _add(self, group: tuple[Any, ...], rows: pa.Table) -> None:
        buffer = self.buffers.setdefault(group, _Buffer())
        buffer.tables.append(rows)
        buffer.rows += rows.num_rows
        while buffer.rows >= self.layouts[group[0]].max_records_per_file:
            self._flush(group)

    def _flush(self, group: tuple[Any, ...]) -> None:
        """Write the group's first ``max_records_per_file`` rows (or all it has) as one object."""
        buffer = self.buffers[group]
        if not buffer.rows:
            return
        member, kind = group[0], group[1]
        layout = self.layouts[member]
        table = pa.concat_tables(buffer.tables)
        bound = layout.max_records_per_file
        rest = table.slice(bound)
        table = table.slice(0, bound)
        buffer.tables, buffer.rows = ([rest] if rest.num_rows else []), rest.num_rows
        offsets = table.column("_kafka_offset")
        first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
        key = object_key(layout.prefix, group[1:], first, last)
        path_columns = ["dt", "hour"] if kind == DATA else ["dt"]
        body = io.BytesIO()
        pq.write_table(table.drop_columns(path_columns), body, compression=layout.compression)
        self.uploads.put(key, body.getvalue(), **restricted_encryption(key, layout.endpoints.restricted_key_arn))
        self.outcome.append(
            {
                "member": member,
                "kind": kind,
                "key": key,
                "kafka_partition": table.column("_kafka_partition")[0].as_py(),
                "rows": table.num_rows,
                "first_offset": first,
                "last_offset": last,
                "bytes": body.tell(),
            }
        )


def object_key(prefix: TablePrefix, group: tuple[Any, ...], first: int, last: int) -> str:
    """The key of a data object (group: DATA, version, Kafka partition, dt, hour) or a quarantine object (group:
    QUARANTINE, how it is kept, Kafka partition, dt) holding offsets ``first`` to ``last``; dt is a UTC date."""
    if group[0] == DATA:
        _, version, partition, dt, hour = group
        return DataKey(prefix, Partition(version, dt, int(hour)), partition, first, last).key()
    _, mode, partition, dt = group
    restricted = mode == QuarantineMode.RESTRICTED
    return prefix.quarantine_key(dt, partition, first, last, restricted=restricted)
