"""An Iceberg table's erasure (``table_format: iceberg``): the batch's rows deleted in one commit, then every trace
of them, in two steps the batch records (``spark_jobs.erasure.batch.TableDelete``):

1. ``delete``: a ``MERGE`` joining the batch's (Kafka partition, offset) keys deletes their rows in one commit (a
   join, as the matching scan's, never a filter of literal values in the plan). Deletes are copy-on-write (the
   table's property): each data file holding such a row is replaced by one without it, so no live data file and no
   delete file holds them. A commit another writer made first (the archiver's) fails it, and it is made again: a
   ``MERGE`` finding nothing left deletes nothing, so a redo after a crash is safe too. Then no key may be left in
   the table; the data files the delete removed are read from its snapshots (those after the one recorded before
   it, ``base_snapshot``).
2. ``clean``, once readers of the older snapshots have had the grace period, and no archiver plan of an older
   snapshot lacks its receipt (``unreceipted_plans``: a redo of a plan looks for it in the table's history, so
   expiring the snapshot of a plan that crashed before its receipt would have the redo append it again): the
   manifests are rewritten when they still carry entries of removed files (a manifest keeps a removed file's entry,
   with its column metrics, until it is rewritten); every snapshot but the current one expires, which deletes the
   files only they reference (the removed data files, old manifests and manifest lists); removed data files the
   table no longer reaches that are still objects (a crashed expiry's) are removed as orphans, whatever their age,
   as nothing writes them again (a sweep of every orphan must wait until no commit can be in flight: that is the
   compactor's); then every noncurrent version and delete marker under the table's location is deleted by version
   id (``spark_jobs.erasure.purge.purge_noncurrent``), and no removed data file may still be a current object.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from kafkalake.s3_location import parse_s3_uri
from spark_jobs.erasure.purge import purge_noncurrent
from spark_jobs.iceberg_maintenance import (
    catalog_name,
    deleted_entries,
    each,
    expire_snapshots,
    load,
    remove_orphans,
    rewrite_manifests,
)

COMMIT_ATTEMPTS = 5
"""Attempts of the delete against other writers' commits before the table fails, for the next run to redo."""
CONFLICTS = ("CommitFailedException", "ValidationException")
"""What Iceberg raises when another writer committed first (the catalog's optimistic commit, or a conflicting
append under the table's isolation level)."""
KEYS_VIEW = "kafkalake_erased_keys"


def delete(
    spark: SparkSession,
    table: str,
    keys: list[list[int]],
    base_snapshot: int | None,
    say: Callable[[str], None] = print,
) -> list[str]:
    """Delete the rows of ``keys`` ([Kafka partition, offset]) in one commit and check none is left; the URIs of the
    data files the table's delete commits since ``base_snapshot`` removed."""
    erased = spark.createDataFrame([tuple(k) for k in keys], "_kafka_partition int, _kafka_offset long")
    erased.createOrReplaceTempView(KEYS_VIEW)
    name = catalog_name(table)
    statement = (
        f"MERGE INTO {name} AS t USING {KEYS_VIEW} AS e "
        "ON t._kafka_partition = e._kafka_partition AND t._kafka_offset = e._kafka_offset WHEN MATCHED THEN DELETE"
    )
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            spark.sql(statement)
            break
        except Exception as exc:
            if attempt == COMMIT_ATTEMPTS or not any(name in str(exc) for name in CONFLICTS):
                raise
            say(f"{table}: the delete lost to another writer's commit; attempt {attempt}")
            time.sleep(0.5 * attempt)
    spark.sql(f"REFRESH TABLE {name}")
    left = spark.table(name).join(erased, ["_kafka_partition", "_kafka_offset"]).count()
    if left:
        raise RuntimeError(f"{table}: {left} rows to erase are still in the table after its delete commit")
    return removed_files(spark, table, base_snapshot)


def removed_files(spark: SparkSession, table: str, base_snapshot: int | None) -> list[str]:
    """The data files (URIs) that the overwrite and delete commits after ``base_snapshot`` in the current snapshot's
    history removed."""
    loaded = load(spark, table)
    snapshot, found = loaded.currentSnapshot(), set()
    while snapshot is not None and snapshot.snapshotId() != base_snapshot:
        if snapshot.operation() in ("overwrite", "delete"):
            found |= {str(f.path()) for f in each(snapshot.removedDataFiles(loaded.io()))}
        parent = snapshot.parentId()
        snapshot = None if parent is None else loaded.snapshot(parent)
    return sorted(found)


def clean(
    spark: SparkSession,
    s3: Any,
    bucket: str,
    table: str,
    *,
    removed: list[str],
    table_created: datetime,
    now: datetime,
    changes_until: datetime | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Every trace of the rows a delete removed with the data files ``removed`` (URIs): manifests rewritten if need
    be, snapshots expired, removed files left behind deleted as orphans, every noncurrent version and delete marker
    under the table's location deleted; versions deleted. Raises when a removed file is still a current object.
    ``changes_until``, an upsert table's: its change objects written before then (every object under its location it
    does not reference; ``table_created`` counts ``kafkalake.iceberg.CHANGES_LEAD`` earlier) go too, as they hold the
    rows of every plan applied before the delete, the erased ones among them. A plan still in flight whose objects go
    fails its commit, and its redo writes them again."""
    if deleted_entries(spark, table):
        say(f"{table}: {rewrite_manifests(spark, table)} manifests rewritten without the removed files' entries")
    expired = expire_snapshots(spark, table, now)
    orphans = remove_orphans(spark, s3, bucket, table, now, table_created=table_created, only=set(removed))
    if changes_until is not None:
        orphans += remove_orphans(spark, s3, bucket, table, changes_until, table_created=table_created)
    location = parse_s3_uri(load(spark, table).location())
    current, deleted = purge_noncurrent(s3, bucket, location.key.rstrip("/") + "/")
    still = sorted(current & {parse_s3_uri(uri).key for uri in removed})
    if still:
        raise RuntimeError(f"{table}: removed data files are still objects after expiry: {', '.join(still)}")
    say(
        f"{table}: snapshots expired ({expired.data_files} data files, {expired.manifests} manifests, "
        f"{expired.manifest_lists} manifest lists deleted), {len(orphans)} orphan files removed, {deleted} object "
        "versions deleted"
    )
    return deleted
