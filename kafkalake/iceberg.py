"""Iceberg tables (``table_format: iceberg``): what every component agrees on about them.

A topic's Iceberg table lives in the Glue Data Catalog under the same database and name a Hive table would, at the
same location (``s3://<bucket>/data/<topic path>``, ``kafkalake.layout``): the archiver's data files under it in the
Hive-style layout it writes for every topic (the keys stay deterministic, a redo rewrites the same objects), and
Iceberg's own ``metadata/`` and ``data/`` folders (rewrites' output) beside them. The table, not the folder, says
which files are live: readers read a snapshot, so a whole-table read never counts a file twice.

Exactly once: the archiver commits each plan's files in one Iceberg commit whose snapshot summary holds the plan's
id and offset ranges (``PLAN_PROPERTY``, ``OFFSETS_PROPERTY``), as the Iceberg Kafka Connect sink does. Before
committing it looks for the plan in the table's history, so a redo after a crash never appends twice; the commit
itself is optimistic (Glue's ``VersionId``), and pyiceberg's own retry is off (``TABLE_PROPERTIES``) because a
retry re-applies the append on the new base without that look: the archiver retries itself, looking again.

Personal data: manifests keep per-file column bounds (min/max values) unless told not to, so by default no column
keeps bounds (``write.metadata.metrics.default=counts``), and only the columns that hold no personal value do
(``BOUNDED_COLUMNS``). Deletes rewrite data files (copy-on-write), so an erased row lives in no delete file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from kafkalake.endpoints import Endpoints
from kafkalake.layout import Partition, TablePrefix

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

PLAN_PROPERTY: Final = "kafkalake.plan"
"""The snapshot summary key of the archiver plan whose files the snapshot appended (the plan's receipt name)."""
OFFSETS_PROPERTY: Final = "kafkalake.offsets"
"""The snapshot summary key of the plan's offset ranges: ``{"<kafka topic>": {"<partition>": [start, end]}}``."""
PARTITIONS_PROPERTY: Final = "kafkalake.partitions"
"""The snapshot summary key of the hours, per schema version, the plan's files hold rows of: a JSON list of
``kafkalake.layout.Partition.values()``. The maintainer's completeness events come from it (``committed_data``)."""
NEWEST_KAFKA_TIME_PROPERTY: Final = "kafkalake.newest-kafka-time"
"""The snapshot summary key of the newest Kafka time among the plan's rows (ISO 8601, UTC; from the files' footers),
absent when the files have no statistics for it. The maintainer's freshness metric comes from it."""
SCHEMA_VERSION_COLUMN: Final = "schema_version"
"""The registry version of a row's schema: a path segment of a Hive table, a column of an Iceberg table."""
TIME_COLUMN: Final = "_business_time"
"""The column the table is partitioned by, by hour (hidden partitioning: ``hour(_business_time)``)."""
PARTITION_FIELD: Final = "_business_time_hour"
METADATA_LOCATION_PARAMETER: Final = "metadata_location"
"""The Glue table parameter naming an Iceberg table's current metadata file (set by every commit)."""
BOUNDED_COLUMNS: Final = ("_kafka_partition", "_kafka_offset", "_kafka_timestamp", TIME_COLUMN, SCHEMA_VERSION_COLUMN)
"""The columns whose min/max bounds the manifests keep (for pruning): none of them holds a personal value."""
FORMAT_VERSION: Final = "2"
"""Athena reads and writes Iceberg format v2, not v3 (``../shared/notes/iceberg-facts.md``); a table is never
upgraded."""
TABLE_PROPERTIES: Final = {
    "format-version": FORMAT_VERSION,
    "write.metadata.metrics.default": "counts",
    **{f"write.metadata.metrics.column.{name}": "full" for name in BOUNDED_COLUMNS},
    "write.delete.mode": "copy-on-write",
    "write.update.mode": "copy-on-write",
    "write.merge.mode": "copy-on-write",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    "commit.retry.num-retries": "0",
}
"""Every table's properties: format v2, bounds only where no personal value is, deletes by rewriting files, old
metadata files pruned, and no blind commit retry (see the module's docstring)."""


SNAPSHOT_RETENTION: Final = timedelta(hours=6)
"""The compactor expires a table's snapshots older than this (keeping the current one). A row deleted by a commit
stays readable through older snapshots until they expire, so this bounds how long an erased row outlives its
delete commit: at most this, plus the compactor's schedule (hourly) and its run (``compactor_timeout_minutes``, 2 h by
default), which is 9 h, well under the shortest erasure deadline (``erasure_within_days`` is at least 1). It also
keeps the snapshot of an archiver plan findable (``committed_plans``) for a redo of that plan after a crash between
its table commit and its receipt, which the next archiver run (``archiver_schedule_minutes`` later) carries out: an
archiver stalled longer than this with such a plan stored would append it again."""
ORPHAN_AGE: Final = timedelta(days=1)
"""The compactor deletes files under a table's location that the table does not reference only once they are older
than this: every data file is written before the commit that adds it (an archiver plan, a rewrite, an erasure's
delete), and removing it in between would commit a file that is gone. A plan or a rewrite in flight is far shorter
(the archiver's budget is 15 minutes, the compactor's timeout 2 h); a day is also the least Iceberg's own
``remove_orphan_files`` procedure accepts, for the same reason. A plan that failed before its commit is redone by
the next run, which rewrites its files."""


CHANGES_LEAD: Final = timedelta(hours=2)
"""How long before an upsert table's creation its change objects may have been written: its first plan writes them
before the commit that makes the table, within one archiver run (``archiver_timeout_minutes``, 60 by default). No
commit references an upsert table's change objects (``spark_jobs.archiver.upsert``), so the compactor removes them as
orphans, counting from this long before the table was made (an append table's orphans count from its creation). A
Hive table's files left under the same location in those two hours, by a topic switched to ``mode: upsert``, go
with them (docs/current-state.md)."""


def table_location(bucket: str, prefix: TablePrefix) -> str:
    """A topic's Iceberg table's location: its data prefix (``kafkalake.layout``), without the trailing slash (Iceberg
    adds ``/metadata/`` and ``/data/`` to it)."""
    return f"s3://{bucket}/{prefix.data_prefix().rstrip('/')}"


def offsets_summary(kafka_topic: str, ranges: Mapping[int, tuple[int, int]]) -> str:
    """``OFFSETS_PROPERTY``'s value for a plan's ranges."""
    return json.dumps({kafka_topic: {str(p): [start, end] for p, (start, end) in sorted(ranges.items())}})


def plan_summary(
    plan_id: str,
    kafka_topic: str,
    ranges: Mapping[int, tuple[int, int]],
    partitions: Iterable[Partition],
    newest_kafka_time: datetime | None,
) -> dict[str, str]:
    """The snapshot summary properties of an archiver plan's commit: its id, offset ranges, hours and newest time."""
    summary = {
        PLAN_PROPERTY: plan_id,
        OFFSETS_PROPERTY: offsets_summary(kafka_topic, ranges),
        PARTITIONS_PROPERTY: json.dumps([p.values() for p in sorted(set(partitions))]),
    }
    if newest_kafka_time is not None:
        summary[NEWEST_KAFKA_TIME_PROPERTY] = newest_kafka_time.isoformat()
    return summary


@dataclass(frozen=True)
class CommittedData:
    """What a table's archiver snapshots say the table holds: the hours (per schema version) with rows, and the
    newest Kafka time among them."""

    partitions: frozenset[Partition]
    newest_kafka_time: datetime | None


def committed_data(summaries: Iterable[Mapping[str, str]]) -> CommittedData:
    """``CommittedData`` from snapshot summaries (any order; snapshots no archiver plan made add nothing)."""
    partitions: set[Partition] = set()
    times: list[datetime] = []
    for summary in summaries:
        partitions.update(Partition.from_values(v) for v in json.loads(summary.get(PARTITIONS_PROPERTY, "[]")))
        if NEWEST_KAFKA_TIME_PROPERTY in summary:
            times.append(datetime.fromisoformat(summary[NEWEST_KAFKA_TIME_PROPERTY]))
    return CommittedData(frozenset(partitions), max(times, default=None))


def current_summaries(metadata: Mapping[str, Any]) -> list[dict[str, str]]:
    """The summaries of a table's current snapshot and its ancestors still in the metadata (Iceberg's table metadata
    file as JSON: ``current-snapshot-id``, ``snapshots`` with ``parent-snapshot-id`` and ``summary``). A snapshot
    off the current line (rolled back) does not count: its rows are not readable."""
    by_id = {s["snapshot-id"]: s for s in metadata.get("snapshots", [])}
    found: list[dict[str, str]] = []
    snapshot_id = metadata.get("current-snapshot-id")
    while snapshot_id is not None and snapshot_id in by_id and len(found) < len(by_id):
        snapshot = by_id[snapshot_id]
        found.append(dict(snapshot.get("summary", {})))
        snapshot_id = snapshot.get("parent-snapshot-id")
    return found


def committed_plans(summaries: Iterable[Mapping[str, str]]) -> dict[str, dict[int, tuple[int, int]]]:
    """Plan id → offset ranges, from snapshot summaries (any order), of every snapshot an archiver plan made."""
    found: dict[str, dict[int, tuple[int, int]]] = {}
    for summary in summaries:
        plan = summary.get(PLAN_PROPERTY)
        if plan is None:
            continue
        ranges: dict[int, tuple[int, int]] = {}
        for per_partition in json.loads(summary.get(OFFSETS_PROPERTY, "{}")).values():
            ranges |= {int(p): (int(start), int(end)) for p, (start, end) in per_partition.items()}
        found[plan] = ranges
    return found


def catalog_properties(endpoints: Endpoints) -> dict[str, Any]:
    """pyiceberg's Glue catalog settings; with the local endpoint (dev tooling) for Glue and S3 alike."""
    settings: dict[str, Any] = {"type": "glue", "glue.region": endpoints.region, "s3.region": endpoints.region}
    if endpoints.aws_endpoint_url:
        settings |= {"glue.endpoint": endpoints.aws_endpoint_url, "s3.endpoint": endpoints.aws_endpoint_url}
    return settings


def table_catalog(endpoints: Endpoints) -> Catalog:
    """The Glue Data Catalog as pyiceberg's catalog (imported here, not at the module's import: the Lambdas, which
    never open a table, do not ship pyiceberg)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("glue", **catalog_properties(endpoints))
