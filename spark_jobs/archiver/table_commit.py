"""An Iceberg topic's plan committed to its table (``kafkalake.iceberg``): the plan's data files appended in one
commit whose snapshot summary names the plan and its offset ranges, exactly once. An upsert table's plan
(``upsert_plan``) is read back and applied as the latest row per key (``spark_jobs.archiver.upsert``): the rows of the
keys it changes deleted and its winning rows added, in one commit that names it the same way.

The table is made by the first plan that writes to it (no crawler): its schema from that plan's files, partitioned
by the business time's hour, with ``kafkalake.iceberg.TABLE_PROPERTIES``. A later schema version's new columns (and
the type promotions Iceberg allows) are added before its files are. Before each attempt the table's history is
searched for the plan: a redo after a crash at any moment (files written, table committed, receipt stored, offsets
committed) finds it and appends nothing. An attempt that loses the optimistic commit to another writer (Glue's
``VersionId``) reloads the table and looks again; so does a stale run still writing when another took its lease.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TypedDict, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.transforms import HourTransform

from kafkalake.footer import newest_time
from kafkalake.iceberg import PARTITION_FIELD, TABLE_PROPERTIES, TIME_COLUMN, committed_plans, plan_summary
from kafkalake.layout import PARTITION_PATH_RE, Partition
from kafkalake.personal import UPSERT_KEY_COLUMN
from kafkalake.s3_location import parse_s3_uri
from spark_jobs.archiver.upsert import (
    Keying,
    StateChange,
    change_rows,
    fresher_than_held,
    latest,
    state_change,
)

T = TypeVar("T")
COMMIT_ATTEMPTS = 5
"""Attempts of one plan's commit against other writers of the table (the compactor, the erasure job) before the plan
fails and stays stored for the next run."""


class PlanFiles(TypedDict):
    """What both commits (``append_plan``, ``upsert_plan``) take of a carried-out plan, as keyword arguments."""

    location: str
    plan_id: str
    kafka_topic: str
    ranges: Mapping[int, tuple[int, int]]
    files: list[str]
    say: Callable[[str], None]


class TableCommitFailed(RuntimeError):
    """The plan's commit lost to other writers ``COMMIT_ATTEMPTS`` times; nothing of it was applied."""


def plan_committed(table: Table, plan_id: str) -> bool:
    """Whether a snapshot of the table's history appended the plan."""
    return plan_id in committed_plans(dict(s.summary.additional_properties) for s in table.snapshots() if s.summary)


def append_plan(
    catalog: Catalog,
    identifier: tuple[str, str],
    *,
    location: str,
    plan_id: str,
    kafka_topic: str,
    ranges: Mapping[int, tuple[int, int]],
    files: list[str],
    say: Callable[[str], None] = print,
) -> bool:
    """Append ``files`` (s3:// URIs) to the table in one commit naming ``plan_id`` and ``ranges``; True when this
    call appended them, False when the table already held the plan. The table is made first when missing. The
    summary also names the hours the files fill and their newest Kafka time, for the maintainer
    (``kafkalake.iceberg.plan_summary``)."""
    schemas, newest = _footer_facts(catalog, files)
    partitions = [_partition_of(path) for path in files]
    summary = plan_summary(plan_id, kafka_topic, ranges, partitions, newest)

    def attempt() -> bool:
        table = _table(catalog, identifier, location, schemas)
        if plan_committed(table, plan_id):
            return False
        _evolve(table, schemas)
        table.add_files(files, snapshot_properties=summary)
        return True

    return _committed(identifier, plan_id, attempt, say)


def upsert_plan(
    catalog: Catalog,
    identifier: tuple[str, str],
    *,
    location: str,
    plan_id: str,
    kafka_topic: str,
    ranges: Mapping[int, tuple[int, int]],
    files: list[str],
    keying: Keying,
    say: Callable[[str], None] = print,
) -> StateChange | None:
    """Apply the plan's changes (``files``: its change objects, s3:// URIs) to its upsert table in one commit naming
    ``plan_id`` and ``ranges``: the rows of every key it changes deleted (copy-on-write), each key's latest row added
    unless deleted; the StateChange applied, or None when the table already held the plan. The table is made first
    when missing. A plan without a change to apply still commits (an empty append), so its offsets are on record."""
    changes, newest = _changes(catalog, files)
    winners = latest(change_rows(changes, keying), keying.version_field)
    summary = plan_summary(plan_id, kafka_topic, ranges, [_partition_of(path) for path in files], newest)
    schema = state_change(winners).rows.schema  # what a missing table is made with

    def attempt() -> StateChange | None:
        table = _table(catalog, identifier, location, [schema])
        if plan_committed(table, plan_id):
            return None
        fresh = winners
        if keying.version_field is not None and table.current_snapshot() is not None:
            held = table.scan(selected_fields=(UPSERT_KEY_COLUMN, keying.version_field)).to_arrow()
            keys = winners.column(UPSERT_KEY_COLUMN).combine_chunks()
            fresh = fresher_than_held(
                winners, held.filter(pc.is_in(held.column(UPSERT_KEY_COLUMN), value_set=keys)), keying.version_field
            )
        change = state_change(fresh)
        _evolve(table, [change.rows.schema])
        with table.transaction() as transaction:
            if len(change.keys) and table.current_snapshot() is not None:
                _delete_keys(table, transaction, change.keys)
            transaction.append(change.rows, snapshot_properties=summary)
        return change

    return _committed(identifier, plan_id, attempt, say)


def _delete_keys(table: Table, transaction: Transaction, keys: pa.Array) -> None:
    """Copy-on-write delete, in ``transaction``, of the rows whose ``UPSERT_KEY_COLUMN`` is one of ``keys``: each data
    file holding one is replaced by a file of its other rows (none when it keeps none), in one overwrite snapshot.

    What ``Transaction.delete(In(UPSERT_KEY_COLUMN, keys))`` does, without its cost: pyiceberg 0.12 binds the ``In`` of
    every key again for each data file it plans (measured by ``python -m bench upsert``: ~92% of a plan of 100,000
    keys over 168 files, 155 s against 25 s bound once), and the manifests keep no bounds of the key to prune with
    (``kafkalake.iceberg.BOUNDED_COLUMNS``), so every file is read either way. Here each file is read whole and its
    rows kept by one Arrow ``is_in``; the new files are written as pyiceberg's delete writes them (its
    ``_dataframe_to_data_files``: the table's partition spec, properties and metrics), under the transaction's
    write id."""
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    metadata, write_id, counter = transaction.table_metadata, uuid.uuid4(), itertools.count(0)
    replaced: list[tuple[DataFile, list[DataFile]]] = []
    for task in table.scan().plan_files():
        scan = ArrowScan(
            table_metadata=metadata, io=table.io, projected_schema=metadata.schema(), row_filter=AlwaysTrue()
        )
        rows = scan.to_table(tasks=[task])
        kept = rows.filter(pc.invert(pc.is_in(rows.column(UPSERT_KEY_COLUMN), value_set=keys)))
        if kept.num_rows == rows.num_rows:
            continue
        written = _dataframe_to_data_files(
            io=table.io, df=kept, table_metadata=metadata, write_uuid=write_id, counter=counter
        )
        replaced.append((task.file, list(written) if kept.num_rows else []))
    if not replaced:
        return
    with transaction.update_snapshot().overwrite() as overwrite:
        overwrite.commit_uuid = write_id
        for original, files in replaced:
            overwrite.delete_data_file(original)
            for file in files:
                overwrite.append_data_file(file)


def _committed(identifier: tuple[str, str], plan_id: str, attempt: Callable[[], T], say: Callable[[str], None]) -> T:
    """``attempt`` (which looks for the plan in the table's history first) until it does not lose the optimistic
    commit to another writer, ``COMMIT_ATTEMPTS`` times at most (``TableCommitFailed``)."""
    for number in range(1, COMMIT_ATTEMPTS + 1):
        try:
            return attempt()
        except CommitFailedException as exc:
            say(f"{'.'.join(identifier)}: commit of plan {plan_id} lost to another writer ({exc}); attempt {number}")
            time.sleep(0.2 * number)
    raise TableCommitFailed(
        f"{'.'.join(identifier)}: plan {plan_id} could not be committed in {COMMIT_ATTEMPTS} attempts (other writers "
        "kept committing first); nothing of it was applied, and the next run redoes it"
    )


def _changes(catalog: Catalog, files: list[str]) -> tuple[pa.Table, datetime | None]:
    """The plan's change objects as one table (columns of every schema version, by name) and their newest Kafka
    time (from the footers)."""
    io = catalog._load_file_io()
    tables: list[pa.Table] = []
    times: list[datetime] = []
    for path in files:
        with io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            tables.append(parquet.read())
            if (newest := newest_time(parquet.metadata)) is not None:
                times.append(newest)
    return pa.concat_tables(tables, promote_options="permissive"), max(times, default=None)


def _partition_of(path: str) -> Partition:
    """The hour and schema version a data file's path names (``schema_version=…/dt=…/hour=…/``)."""
    match = PARTITION_PATH_RE.search(parse_s3_uri(path).key)
    if match is None:
        raise ValueError(f"{path} is not under a schema_version=<n>/dt=<YYYY-MM-DD>/hour=<HH>/ path: not a plan's file")
    return Partition.from_path(match.group(1))


def _footer_facts(catalog: Catalog, files: list[str]) -> tuple[list[pa.Schema], datetime | None]:
    """The distinct Arrow schemas of ``files`` (one per schema version in a plan) and their newest Kafka time, from
    every file's footer (the footer reads are pyiceberg's too: ``add_files`` reads each for its statistics)."""
    io = catalog._load_file_io()  # the catalog's own S3 client and settings
    found: dict[str, pa.Schema] = {}
    times: list[datetime] = []
    for path in files:
        with io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            schema, metadata = parquet.schema_arrow, parquet.metadata
        found.setdefault(schema.to_string(show_schema_metadata=False), schema)
        if (newest := newest_time(metadata)) is not None:
            times.append(newest)
    return list(found.values()), max(times, default=None)


def _table(catalog: Catalog, identifier: tuple[str, str], location: str, schemas: list[pa.Schema]) -> Table:
    """The table, made from the widest of ``schemas`` when missing (another run making it first is fine)."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    widest = max(schemas, key=len)
    try:
        with (
            catalog.create_table_transaction(
                identifier, schema=widest, location=location, properties=TABLE_PROPERTIES
            ) as creating,
            creating.update_spec() as spec,
        ):
            spec.add_field(TIME_COLUMN, HourTransform(), PARTITION_FIELD)
    except TableAlreadyExistsError:
        pass
    return catalog.load_table(identifier)


def _evolve(table: Table, schemas: list[pa.Schema]) -> None:
    """Add the columns of ``schemas`` the table lacks (and allowed promotions), in one schema commit."""
    current = {field.name for field in table.schema().fields}
    if all(set(schema.names) <= current for schema in schemas):
        return
    with table.update_schema() as update:
        for schema in schemas:
            update.union_by_name(schema)
