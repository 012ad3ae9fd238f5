"""What is in the lake, for people: every table's owner, schema versions, partitions, freshness, drift, files and
quarantine.

Read from the same places a query engine and the compactor use: Glue partitions (and the locations they hold),
S3 listings, compaction manifests and Parquet footers; an Iceberg table's from its own metadata; the drift status from
``kafkalake.drift``. The page is
``kafkalake_dev.checks.inventory_page``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from kafkalake.archive_receipts import ArchiveReceipt
from kafkalake.aws import list_objects, read_json
from kafkalake.drift import Drift
from kafkalake.footer import newest_time, read_footer
from kafkalake.glue import COMPLETE_PARAMETER, table_partitions
from kafkalake.iceberg import PARTITION_FIELD
from kafkalake.layout import (
    PARTITION_PATH_RE,
    LayoutError,
    Partition,
    TablePrefix,
    is_compaction_output,
    parse_data_key,
)
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableFormat


@dataclass(frozen=True)
class PartitionFiles:
    values: tuple[str, ...]
    location: str
    complete: bool
    compacted: bool
    files_before: int
    """Raw files the archiver wrote (the inputs of the latest compaction, once compacted)."""
    files: int
    """Files at the location Glue holds: what a reader opens."""
    bytes: int

    @property
    def label(self) -> str:
        version, dt, hour = self.values
        return f"v{version} {dt} {hour}h"


@dataclass
class TableInventory:
    database: str
    table: str
    kafka_topic: str
    columns_added: dict[int, list[str]]
    """Schema version → the columns that version added (the first version: all its columns)."""
    partitions: list[PartitionFiles] = field(default_factory=list)
    quarantined_rows: int = 0
    owner: str = ""
    newest_kafka_time: datetime | None = None
    """The newest Kafka time of the data Glue holds (footer statistics of the newest objects)."""
    drift: str = ""
    """How the topic's catalog entry compares with the cluster (``Drift.status``); empty when not compared."""
    table_format: str = TableFormat.HIVE.value
    taken_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def freshness(self) -> str:
        """The age of the newest data queryable through Glue, with its Kafka time."""
        if self.newest_kafka_time is None:
            return "-"
        minutes = (self.taken_at - self.newest_kafka_time).total_seconds() / 60
        age = f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
        return f"{age} (Kafka time {self.newest_kafka_time:%Y-%m-%d %H:%M} UTC)"

    @property
    def schema_versions(self) -> list[int]:
        return sorted(self.columns_added)

    @property
    def latest_complete_hour(self) -> str | None:
        complete = [(p.values[1], p.values[2]) for p in self.partitions if p.complete]
        return f"{max(complete)[0]} {max(complete)[1]}:00" if complete else None

    @property
    def files(self) -> int:
        return sum(p.files for p in self.partitions)

    @property
    def files_before(self) -> int:
        return sum(p.files_before for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def compacted(self) -> int:
        return sum(p.compacted for p in self.partitions)


def table_objects(s3: Any, bucket: str, prefix: TablePrefix) -> tuple[dict[str, int], dict[str, int]]:
    """A table's live Parquet objects, key → size: the raw files, and the compaction output (under the table's
    location, and under the legacy root for partitions compacted before it moved)."""
    listed = list_objects(s3, bucket, prefix.data_prefix(), ".parquet")
    raw = {k: size for k, size in listed.items() if not is_compaction_output(k)}
    legacy = list_objects(s3, bucket, prefix.legacy_compacted_prefix(), ".parquet")
    return raw, {**{k: size for k, size in listed.items() if k not in raw}, **legacy}


def newest_kafka_time(s3: Any, bucket: str, keys: list[str]) -> datetime | None:
    """The newest Kafka time in ``keys``: per Kafka partition the raw object with the highest offsets (Kafka times
    grow with offsets), and every compacted object, by their footers' statistics."""
    newest: dict[int, tuple[int, str]] = {}
    compacted = []
    for key in keys:
        try:
            parsed = parse_data_key(key)
        except LayoutError:
            compacted.append(key)
            continue
        if parsed.last_offset >= newest.get(parsed.kafka_partition, (-1, ""))[0]:
            newest[parsed.kafka_partition] = (parsed.last_offset, key)
    times = [newest_time(read_footer(s3, bucket, k)) for k in [*(k for _, k in newest.values()), *compacted]]
    return max((t for t in times if t is not None), default=None)


def table_inventory(s3: Any, glue: Any, bucket: str, topic: Topic) -> TableInventory:
    raw, compacted = table_objects(s3, bucket, topic.prefix)
    partitions, columns_by_version, held = [], {}, list[str]()
    files = {**raw, **compacted}
    for glue_partition in sorted(table_partitions(glue, topic.database, topic.table) or [], key=lambda p: p["Values"]):
        values = tuple(glue_partition["Values"])
        partition = Partition.from_values(list(values))
        location = parse_s3_uri(glue_partition["StorageDescriptor"]["Location"]).as_prefix()
        current = {k: s for k, s in files.items() if k.startswith(location)}
        held += current
        is_compacted = is_compaction_output(location)
        manifest = read_json(s3, bucket, topic.prefix.compaction_manifest_key(partition)) if is_compacted else None
        raw_here = [k for k in raw if k.startswith(topic.prefix.data_prefix() + partition.path())]
        partitions.append(
            PartitionFiles(
                values=values,
                location=glue_partition["StorageDescriptor"]["Location"],
                complete=glue_partition.get("Parameters", {}).get(COMPLETE_PARAMETER) == "true",
                compacted=is_compacted,
                files_before=len(manifest["inputs"]) if manifest else len(raw_here),
                files=len(current),
                bytes=sum(current.values()),
            )
        )
        version = int(values[0])
        if version not in columns_by_version and current:
            schema = read_footer(s3, bucket, min(current)).schema.to_arrow_schema()
            columns_by_version[version] = list(schema.names)
    added, seen = {}, set[str]()
    for version in sorted(columns_by_version):
        added[version] = [c for c in columns_by_version[version] if c not in seen]
        seen |= set(columns_by_version[version])
    return TableInventory(
        topic.database,
        topic.table,
        topic.kafka_topic,
        added,
        partitions,
        quarantined_rows(s3, bucket, topic),
        owner=topic.spec.owner,
        newest_kafka_time=newest_kafka_time(s3, bucket, held),
    )


def quarantined_rows(s3: Any, bucket: str, topic: Topic) -> int:
    """Rows in the topic's quarantine objects (their footers), whatever its table's format."""
    keys = [key for where in topic.quarantine_prefixes() for key in list_objects(s3, bucket, where, ".parquet")]
    return sum(read_footer(s3, bucket, key).num_rows for key in keys)


def stored_receipts(s3: Any, bucket: str, prefix: TablePrefix) -> dict[str, ArchiveReceipt]:
    """Every archiver receipt of the table (one per carried-out plan), by its key."""
    found = {}
    for key in sorted(list_objects(s3, bucket, prefix.receipts_prefix(), ".json")):
        document = read_json(s3, bucket, key)
        if document is not None:  # None: deleted between the listing and the read
            found[key] = ArchiveReceipt.from_dict(document)
    return found


def iceberg_hour(live: list[str], archived: Mapping[str, datetime], hour: datetime) -> tuple[bool, int]:
    """Whether a rewrite (the compactor's, or an erasure's) replaced the archiver's files of ``hour`` (its start),
    and the files before it, as the Hive inventory counts them: the files the archiver wrote into the hour
    (``archived``: each data object the receipts list, key → its hour) once the hour holds a file no receipt names,
    else the ``live`` ones (the keys of the current snapshot's files)."""
    rewritten = any(key not in archived for key in live)
    written = sum(1 for at in archived.values() if at == hour)
    return rewritten, (written or len(live)) if rewritten else len(live)


def iceberg_inventory(s3: Any, bucket: str, tables: Catalog, topic: Topic) -> TableInventory:
    """An Iceberg table's current snapshot: its hour partitions' live files, bytes and rows (the table's own
    metadata, ``inspect``), its columns, and the newest Kafka time the manifests' bounds give; its quarantine. An hour
    is complete once the maintainer announced it (its completeness claim). Its files before are the archiver's,
    from its receipts (``iceberg_hour``): the table's history, where the rewrite is, expires."""
    quarantined = quarantined_rows(s3, bucket, topic)
    found = TableInventory(topic.database, topic.table, topic.kafka_topic, {}, [], quarantined, owner=topic.spec.owner)
    found.table_format = TableFormat.ICEBERG.value
    try:
        table = tables.load_table((topic.database, topic.table))
    except NoSuchTableError:
        return found
    versions = len(topic.schemas)
    claims = topic.prefix.completeness_claims_prefix()
    announced = {  # the hours the maintainer announced complete, from its snapshots (any schema version)
        tuple(Partition.from_path(match.group(1)).values()[1:])
        for key in list_objects(s3, bucket, claims)
        if (match := PARTITION_PATH_RE.search(key.removeprefix(claims))) is not None
    }
    archived = {
        stored.key: parse_data_key(stored.key).partition.start
        for receipt in stored_receipts(s3, bucket, topic.prefix).values()
        for stored in receipt.data
    }
    found.columns_added = {versions: [f.name for f in table.schema().fields]} if table.current_snapshot() else {}
    files = [f for f in table.inspect.files().to_pylist() if f["content"] == 0]  # data files (no delete files)
    by_hour: dict[int, list[dict[str, Any]]] = {}
    for file in files:
        by_hour.setdefault(file["partition"][PARTITION_FIELD], []).append(file)
    for number, here in sorted(by_hour.items()):
        hour = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(hours=number)
        dt_hour = (f"{hour:%Y-%m-%d}", f"{hour:%H}")
        live = [parse_s3_uri(f["file_path"]).key for f in here]
        rewritten, before = iceberg_hour(live, archived, hour)
        found.partitions.append(
            PartitionFiles(
                values=(str(versions), *dt_hour),
                location=table.location(),
                complete=dt_hour in announced,
                compacted=rewritten,
                files_before=before,
                files=len(live),
                bytes=sum(f["file_size_in_bytes"] for f in here),
            )
        )
    bounds = [f["readable_metrics"]["_kafka_timestamp"]["upper_bound"] for f in files]
    found.newest_kafka_time = max((b for b in bounds if b is not None), default=None)
    return found


def take_inventory(
    s3: Any,
    glue: Any,
    bucket: str,
    topics: list[Topic],
    *,
    drift: Drift | None = None,
    tables: Catalog | None = None,
) -> list[TableInventory]:
    """Every table of ``topics``; with ``drift``, each one's drift status; Iceberg tables through ``tables`` (the
    Glue Data Catalog as pyiceberg's; without it they are listed with their format only)."""
    found = [
        table_inventory(s3, glue, bucket, topic)
        if topic.spec.table_format == TableFormat.HIVE
        else iceberg_inventory(s3, bucket, tables, topic)
        if tables is not None
        else TableInventory(topic.database, topic.table, topic.kafka_topic, {}, table_format=TableFormat.ICEBERG.value)
        for topic in topics
    ]
    for item in found:
        item.drift = drift.status(item.kafka_topic) if drift else ""
    return found


COLUMNS = (
    "database",
    "table",
    "topic",
    "schema versions",
    "columns added per version",
    "partitions",
    "latest complete hour",
    "files before → now",
    "bytes",
    "rows quarantined",
    "owner",
    "freshness",
    "drift",
    "format",
)


def rows(inventory: list[TableInventory]) -> list[list[str]]:
    """One row of strings per table, in the order of ``COLUMNS`` (the terminal and the page show the same)."""
    return [
        [
            item.database,
            item.table,
            item.kafka_topic,
            ", ".join(str(v) for v in item.schema_versions) or "-",
            "; ".join(
                f"v{v}: {', '.join(c for c in cols if not c.startswith('_')) or '(metadata only)'}"
                if v == item.schema_versions[0]
                else f"v{v}: +{', '.join(cols) or 'nothing'}"
                for v, cols in sorted(item.columns_added.items())
            )
            or "-",
            f"{len(item.partitions)} ({item.compacted} compacted)",
            item.latest_complete_hour or "-",
            f"{item.files_before} → {item.files}",
            f"{item.bytes:,}",
            str(item.quarantined_rows),
            item.owner or "-",
            item.freshness,
            item.drift or "-",
            item.table_format,
        ]
        for item in inventory
    ]
