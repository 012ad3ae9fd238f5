"""Maintenance of an Iceberg table (``kafkalake.iceberg``) shared by the jobs that rewrite one (the erasure job, the
compactor's schedule): expiring snapshots, removing orphan files and rewriting manifests, through Iceberg's Spark
actions (``org.apache.iceberg.spark.actions.SparkActions``, over py4j), so each is one call with counts back.

Orphan files are found against a listing of the table's location made with boto3 (``compareToFileList``): Iceberg
1.7.1's own listing goes through Hadoop's file system, which has no ``s3://`` scheme outside EMR, and its
``remove_orphan_files`` procedure refuses an ``older_than`` under a day (``../shared/notes/iceberg-facts.md``).

``table`` is always ``<database>.<table>`` (``spark_jobs.compaction.work.table_name``), in the Iceberg catalog
(``catalog_name``); each call reloads the table, so commits another writer made since (the archiver's, through
pyiceberg) are seen.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kafkalake.aws import list_modified, list_objects
from kafkalake.iceberg import PLAN_PROPERTY
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake.layout import TablePrefix
from kafkalake.s3_location import parse_s3_uri, s3_uri


def catalog_name(table: str) -> str:
    """The Spark name of the Glue table ``table`` (``database.table``) in the Iceberg catalog."""
    return f"{ICEBERG_CATALOG}.{table}"


def load(spark: SparkSession, table: str) -> Any:
    """The table as Iceberg's Java ``Table``, its latest metadata (Spark's catalog caches tables: refreshed first)."""
    name = catalog_name(table)
    spark.sql(f"REFRESH TABLE {name}")
    found = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)  # type: ignore[union-attr]
    found.refresh()
    return found


def current_snapshot(spark: SparkSession, table: str) -> int | None:
    """The table's current snapshot id (None for a table without one)."""
    snapshot = load(spark, table).currentSnapshot()
    return None if snapshot is None else int(snapshot.snapshotId())


def unreceipted_plans(spark: SparkSession, s3: Any, bucket: str, table: str, prefix: TablePrefix) -> list[str]:
    """The archiver plans (``kafkalake.iceberg.PLAN_PROPERTY``) of the table's snapshots other than the current one
    that have no receipt among the topic's (``prefix``) yet: a redo of one may still come, and it looks for its plan in
    the table's history, so no snapshot may expire while one is listed (the compactor and the erasure job wait)."""
    current = current_snapshot(spark, table)
    snapshots = spark.table(f"{catalog_name(table)}.snapshots")
    rows = snapshots.select("snapshot_id", F.col("summary")[PLAN_PROPERTY].alias("plan")).collect()
    plans = {row["plan"] for row in rows if row["plan"] and row["snapshot_id"] != current}
    receipts = list_objects(s3, bucket, prefix.receipts_prefix(), ".json")
    return sorted(plans - {prefix.plan_of_receipt(key) for key in receipts})


def _actions(spark: SparkSession) -> Any:
    return spark._jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)  # type: ignore[union-attr]


def each(iterable: Any) -> Iterator[Any]:
    """The items of a Java ``Iterable`` (py4j iterates only Java collections)."""
    items = iterable.iterator()
    while items.hasNext():
        yield items.next()


def _millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


@dataclass(frozen=True)
class Expired:
    """What an expiry deleted: data files, manifests and manifest lists no retained snapshot references."""

    data_files: int
    manifests: int
    manifest_lists: int


def expire_snapshots(spark: SparkSession, table: str, older_than: datetime) -> Expired:
    """Expire every snapshot older than ``older_than`` but the current one, deleting the files only they reference."""
    result = _actions(spark).expireSnapshots(load(spark, table)).expireOlderThan(_millis(older_than)).retainLast(1)
    done = result.execute()
    return Expired(
        int(done.deletedDataFilesCount()), int(done.deletedManifestsCount()), int(done.deletedManifestListsCount())
    )


def remove_orphans(
    spark: SparkSession,
    s3: Any,
    bucket: str,
    table: str,
    older_than: datetime,
    *,
    table_created: datetime,
    only: Collection[str] | None = None,
) -> list[str]:
    """Delete the objects under the table's location (listed with ``s3``; only those of ``only``, URIs, when given)
    that no metadata of the table reaches, last modified before ``older_than`` and not before ``table_created``
    (an older object under its location, a Hive table's before it, was never the table's); their URIs. A file
    written for a commit not made yet is one too: ``older_than`` must precede every such write still in flight,
    unless ``only`` names files nothing writes again."""
    loaded = load(spark, table)
    location = parse_s3_uri(loaded.location())
    if location.bucket != bucket:
        raise ValueError(f"{table} is at {loaded.location()}, not in the lake's bucket {bucket}")
    listed = {s3_uri(bucket, key): at for key, at in list_modified(s3, bucket, location.key.rstrip("/") + "/").items()}
    candidates = orphan_candidates(listed, table_created=table_created, only=only)
    if not candidates:
        return []
    files = spark.createDataFrame(candidates, "file_path string, last_modified timestamp")
    action = _actions(spark).deleteOrphanFiles(loaded).olderThan(_millis(older_than)).compareToFileList(files._jdf)
    return [str(uri) for uri in each(action.execute().orphanFileLocations())]


def orphan_candidates(
    listed: dict[str, datetime], *, table_created: datetime, only: Collection[str] | None = None
) -> list[tuple[str, datetime]]:
    """The objects (URI → last modified) Iceberg's orphan action may weigh: not older than the table (an older object
    under its location, a Hive table's before it, was never the table's) and, given ``only``, among those. The
    action itself keeps every file the table references and every one newer than its bound. S3's listings give whole
    seconds, so the table's creation is taken to its second: an object written in the second the table was made
    counts (``test_iceberg_erasure``'s orphan, listed a fraction of a second before Glue's creation time, did not)."""
    since = table_created.replace(microsecond=0)
    return sorted((uri, at) for uri, at in listed.items() if at >= since and (only is None or uri in only))


def deleted_entries(spark: SparkSession, table: str) -> int:
    """Entries of the current snapshot's manifests that record a removed file (status 2, DELETED): a manifest keeps
    them, with the file's column metrics, until it is rewritten."""
    spark.sql(f"REFRESH TABLE {catalog_name(table)}")
    return spark.table(f"{catalog_name(table)}.entries").where("status = 2").count()


def rewrite_manifests(spark: SparkSession, table: str) -> int:
    """Rewrite the current snapshot's manifests (only live entries are carried over), in one commit; manifests
    replaced."""
    done = _actions(spark).rewriteManifests(load(spark, table)).execute()
    return sum(1 for _ in each(done.rewrittenManifests()))
