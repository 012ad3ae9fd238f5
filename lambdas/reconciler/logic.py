"""S3↔Glue reconciliation: the partitions a table has on S3 and not in Glue are added (S3 notifications can be
lost: a message that expired in the DLQ, a changed notification configuration, an object restored by hand), and
Glue partitions whose location holds no object are reported.

S3 is listed with a delimiter, level by level (schema_version=, dt=, hour=), never object by object; the table's
compaction output (``_compacted/``, beside the partitions) is not a partition and is not descended into. An Iceberg
table has no Glue partitions to reconcile: it is skipped, with why.

Plain values and the data access in (``lambdas.reconciler.dal``: every S3 and Glue call), results out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date

from kafkalake.glue import partition_input
from kafkalake.layout import (
    COMPACTED_DIR,
    PARTITION_KEYS,
    LayoutError,
    Partition,
    partition_segment_value,
)
from kafkalake.s3_location import parse_s3_uri, s3_uri
from kafkalake.topic_spec import TableFormat
from lambdas.reconciler.dal import GluePartitions, LakeFolders
from lambdas.tables import LakeTable

ICEBERG_SKIPPED = (
    "an Iceberg table: the archiver commits its files with their offsets, and its snapshots, not Glue partitions, "
    "say which are live (the offset audit finds a plan that was not committed)"
)


@dataclass
class TableReconciliation:
    table: str
    added: list[tuple[str, ...]] = field(default_factory=list)
    """Partitions found on S3 and created in Glue."""
    empty_locations: list[tuple[str, ...]] = field(default_factory=list)
    """Glue partitions whose location holds no object."""
    skipped: str | None = None
    """Why the table was not reconciled (for example: not in Glue yet; the maintainer creates it)."""
    failed: str | None = None
    """What went wrong (access denied, throttling that outlasted the retries); the other tables went on."""


def s3_partitions(lake: LakeFolders, data_prefix: str) -> set[Partition]:
    """Every partition folder of a table on S3, level by level; folders of another shape are left out."""
    found = set()
    for version in lake.folders(data_prefix):
        if version == f"{COMPACTED_DIR}/":
            continue
        for day in lake.folders(data_prefix + version):
            for hour in lake.folders(data_prefix + version + day):
                try:
                    values = [
                        partition_segment_value(name, segment)
                        for name, segment in zip(PARTITION_KEYS, (version, day, hour), strict=True)
                    ]
                    found.add(Partition(int(values[0]), date.fromisoformat(values[1]), int(values[2])))
                except (LayoutError, ValueError):
                    continue
    return found


def reconcile_table(
    lake: LakeFolders, glue: GluePartitions, *, database: str, table: str, data_prefix: str
) -> TableReconciliation:
    """Add the partitions S3 has and Glue lacks; report Glue partitions with an empty location."""
    result = TableReconciliation(f"{database}.{table}")
    existing = glue.partitions(database, table)
    if existing is None:
        result.skipped = "no table in Glue yet (the maintainer creates it from the first event)"
        return result
    in_glue = {tuple(p["Values"]): p["StorageDescriptor"]["Location"] for p in existing}
    on_s3 = s3_partitions(lake, data_prefix)
    missing = sorted(p for p in on_s3 if tuple(p.values()) not in in_glue)
    if missing:
        table_description = glue.table(database, table)
        inputs = [partition_input(table_description, s3_uri(lake.bucket, data_prefix + p.path()), p) for p in missing]
        result.added = sorted(glue.create(database, table, inputs).done)
    raw_folders = {s3_uri(lake.bucket, data_prefix + p.path()) for p in on_s3}
    for values, location in sorted(in_glue.items()):
        if not _holds_objects(lake, location, raw_folders):
            result.empty_locations.append(values)
    return result


def _holds_objects(lake: LakeFolders, location: str, raw_folders: set[str]) -> bool:
    """A raw partition folder holds objects exactly when the level-by-level listing found it (a delimiter listing
    shows only folders with objects); any other location (a compaction run directory) takes one listing call."""
    where = parse_s3_uri(location)
    return s3_uri(where.bucket, where.as_prefix()) in raw_folders or lake.holds_objects(where)


def reconcile_tables(lake: LakeFolders, glue: GluePartitions, tables: Iterable[LakeTable]) -> list[TableReconciliation]:
    """``reconcile_table`` for each table of the catalog; one table's failure is recorded in its result and never
    stops the others."""
    results = []
    for table in tables:
        if table.table_format == TableFormat.ICEBERG:
            results.append(TableReconciliation(table.name, skipped=ICEBERG_SKIPPED))
            continue
        try:
            results.append(
                reconcile_table(
                    lake, glue, database=table.database, table=table.table, data_prefix=table.prefix.data_prefix()
                )
            )
        except Exception as exc:  # noqa: BLE001 - reported in the result; the other tables go on
            results.append(TableReconciliation(table.name, failed=f"{type(exc).__name__}: {exc}"))
    return results
