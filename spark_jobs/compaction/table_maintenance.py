"""An Iceberg table's compaction (``table_format: iceberg``): table operations, no swap and no grace period.

Readers read a snapshot, so a rewrite needs none of the Hive protocol (``spark_jobs.compaction.protocol``): one
run, holding the table's compaction lease (``spark_jobs.compaction.job``), makes three steps on each table, each
after renewing the lease, so a run that lost it changes nothing more:

- **rewrite**: Iceberg's ``rewrite_data_files`` procedure over the closed hours only (``closed_until``, as the Hive
  compactor decides them), with the same knobs: target file size, and the least number of files an hour needs. It
  commits one snapshot; queries already running keep reading the snapshot they started from, whose files stay until
  it expires. An upsert table's (``mode: upsert``) every hour: no hour of a state table closes (a later change of a
  key deletes its row in whichever hour it is), so the knobs alone decide; a rewrite that loses to an archiver's
  commit in between fails the table for this run (Iceberg refuses to replace files a delete rewrote) and the next
  run rewrites again.
- **expiry**: the snapshots older than ``Knobs.snapshot_retention`` (the current one is always kept); Iceberg
  deletes the files only they referenced, the archiver's replaced files among them. The retention keeps the erasure
  deadline (``kafkalake.iceberg.SNAPSHOT_RETENTION``). Nothing expires while an archiver plan of the table lacks its
  receipt (``spark_jobs.iceberg_maintenance.unreceipted_plans``): its redo looks for the plan in the history.
- **orphans**: files under the table's location the table does not reference (a write that crashed before its
  commit), older than ``Knobs.orphan_age`` and not older than the table itself
  (``spark_jobs.iceberg_maintenance.remove_orphans``, shared with the erasure job). An upsert table's change
  objects are such files once their plan is applied (``kafkalake.iceberg.CHANGES_LEAD``).

A table that fails is reported with the reason (``TableCompaction``, ``Action.FAILED``) and the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kafkalake.iceberg import CHANGES_LEAD, TIME_COLUMN
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableMode
from spark_jobs.compaction.selection import closed_until
from spark_jobs.compaction.work import MAX_REASON, Action, PartitionResult, Rewriter, describe, table_name
from spark_jobs.iceberg_maintenance import expire_snapshots, remove_orphans, unreceipted_plans

T = TypeVar("T")


@dataclass
class TableCompaction(PartitionResult):
    """One Iceberg table's compaction, as one JSON line with the Hive compactor's fields (``partition`` empty: the
    whole table; files, bytes and rows of the current snapshot's data files before → after), plus the snapshots
    and what the expiry and orphan removal deleted."""

    snapshot_before: int | None = None
    """The table's current snapshot when the run began."""
    snapshot_after: int | None = None
    """Its current snapshot after the rewrite: the rewrite's own, or the same when nothing was due."""
    rewritten_files: int = 0
    """Data files the rewrite replaced (``files_before - files_after`` when no writer committed in between)."""
    expired_files: int = 0
    """Files the expiry deleted: data files, manifests and manifest lists only expired snapshots referenced."""
    orphan_files: int = 0
    """Files under the table's location it did not reference, deleted."""


def closed_hours_filter(until: datetime) -> str:
    """The rewrite's ``where``: rows of the hours that end at or before ``until`` (a whole hour). Iceberg keeps the
    filter's projection on the hour partition, so no file of a later hour is taken."""
    return f"{TIME_COLUMN} < {timestamp(until)}"


def timestamp(at: datetime) -> str:
    """``at`` as a Spark SQL timestamp literal that names its zone (UTC), whatever the session's zone."""
    return f"TIMESTAMP '{at.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}+00:00'"


def compact_tables(rewriter: Rewriter, topics: Sequence[Topic]) -> list[PartitionResult]:
    """Rewrite, expire and remove orphans of every Iceberg table of ``topics`` (whose leases ``rewriter`` holds),
    one ``TableCompaction`` each; a table's failure is its result, never raised."""
    results: list[PartitionResult] = []
    for topic in topics:
        result = TableCompaction(table_name(topic), [], Action.COMPACTED)
        try:
            _compact(rewriter, topic, result)
        except Exception as exc:  # noqa: BLE001 - one table's failure never stops the others: reported
            result.action, result.reason = Action.FAILED, describe(exc)[:MAX_REASON]
        results.append(result)
    return results


def _compact(rewriter: Rewriter, topic: Topic, result: TableCompaction) -> None:
    table, knobs, spark = result.table, rewriter.knobs, rewriter.spark
    name = f"{ICEBERG_CATALOG}.{table}"
    created = _created(rewriter, topic)
    if created is None:
        result.action, result.reason = Action.SKIPPED, "no Iceberg table yet (nothing archived)"
        rewriter.say(f"{table}: nothing archived yet, nothing to compact")
        return
    now = rewriter.now()
    until = closed_until(knobs, now)
    result.snapshot_before, result.files_before, result.bytes_before, _ = _current(spark, name)

    state = topic.spec.mode == TableMode.UPSERT

    def rewrite() -> list[Any]:
        where = "" if state else f', where => "{closed_hours_filter(until)}"'
        options = {"target-file-size-bytes": knobs.target_file_bytes, "min-input-files": knobs.min_input_files}
        settings = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
        return spark.sql(
            f"CALL {ICEBERG_CATALOG}.system.rewrite_data_files(table => '{table}'{where}, options => map({settings}))"
        ).collect()

    [rewritten] = _step(rewriter, result, "rewrite", rewrite)
    result.rewritten_files = rewritten["rewritten_data_files_count"]
    if not result.rewritten_files:
        result.action = Action.SKIPPED
        result.reason = f"no {'' if state else 'closed '}hour holds {knobs.min_input_files} or more files"
    result.snapshot_after, result.files_after, result.bytes_after, result.rows = _current(spark, name)
    hours = "every hour" if state else f"the hours before {until:%F %H}:00"
    rewriter.say(
        f"{table}: rewrote {result.rewritten_files} data files of {hours} "
        f"into {rewritten['added_data_files_count']}: {result.files_before} files ({result.bytes_before / 2**20:.1f} "
        f"MiB) → {result.files_after} ({result.bytes_after / 2**20:.1f} MiB), {result.rows} rows; snapshot "
        f"{result.snapshot_before} → {result.snapshot_after}"
    )

    waiting = unreceipted_plans(spark, rewriter.s3, rewriter.bucket, table, topic.prefix)
    if waiting:  # a redo of one looks for it in the table's history: its snapshot stays until its receipt is stored
        rewriter.say(f"{table}: no snapshot expires while plans {', '.join(waiting)} lack their receipts")
        return
    expired = _step(rewriter, result, "expire", lambda: expire_snapshots(spark, table, now - knobs.snapshot_retention))
    result.expired_files = expired.data_files + expired.manifests + expired.manifest_lists
    rewriter.say(f"{table}: expired the snapshots older than {knobs.snapshot_retention}: {result.expired_files} files")
    older_than = now - knobs.orphan_age
    orphans = _step(
        rewriter,
        result,
        "orphans",
        lambda: remove_orphans(
            spark,
            rewriter.s3,
            rewriter.bucket,
            table,
            older_than,
            table_created=created - (CHANGES_LEAD if state else timedelta(0)),
        ),
    )
    result.orphan_files = len(orphans)
    rewriter.say(f"{table}: {len(orphans)} orphan files older than {knobs.orphan_age} deleted")


def _step(rewriter: Rewriter, result: TableCompaction, step: str, action: Callable[[], T]) -> T:
    """``action`` after renewing the table's lease (``LeaseLost`` when another run took it), timed."""
    rewriter.leases[result.table].renew()
    started = time.monotonic()
    try:
        return action()
    finally:
        result.seconds[step] = round(time.monotonic() - started, 3)


def _created(rewriter: Rewriter, topic: Topic) -> datetime | None:
    """When the table was made (the archiver's first commit), or None when it is not in Glue yet."""
    try:
        found = rewriter.glue.get_table(DatabaseName=topic.database, Name=topic.table)
    except rewriter.glue.exceptions.EntityNotFoundException:
        return None
    created: datetime = found["Table"]["CreateTime"]
    return created


def _current(spark: SparkSession, name: str) -> tuple[int | None, int, int, int]:
    """The table's current snapshot id, and its data files' count, bytes and rows."""
    spark.sql(f"REFRESH TABLE {name}")
    refs = spark.table(f"{name}.refs").where(F.col("name") == "main").select("snapshot_id").collect()
    sums = [F.coalesce(F.sum(c), F.lit(0)) for c in ("file_size_in_bytes", "record_count")]
    files = spark.table(f"{name}.data_files").agg(F.count(F.lit(1)), *sums).collect()[0]
    return (refs[0][0] if refs else None), files[0], files[1], files[2]
