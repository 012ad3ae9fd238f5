"""The interop check (``make interop``): Athena's engine, Trino, counts every demo table before and after compaction.

The demo's pipeline runs in a throw-away environment of its own (``kafkalake_dev.demo.run_interop``; so "before
compaction" is never a table an earlier run compacted): provision → workload → archiver → maintainer; then Trino
(``kafkalake_dev.local.trino``, the Hive connector over the local Glue and S3) counts every table with the counts
this module plans; then compactor → maintainer again, and Trino counts again. Per table it runs ``count(*)``, a
count filtered on the busiest ``dt``/``hour`` and one filtered on the newest ``schema_version``, and compares each
with what the workload planned. Filtered counts leave kept tombstones
out (``_tombstone``): the plan knows their number, not their partition; the whole-table count includes them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kafkalake.iceberg import TIME_COLUMN
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.local.trino import ICEBERG_CATALOG, TrinoClient, TrinoError
from kafkalake_dev.local.workload import Produced

TOMBSTONE_COLUMN = "_tombstone"
"""The delete-log flag of topics with ``tombstones: keep`` (``spark_jobs.archiver.writer.TOMBSTONE_COLUMN``)."""


@dataclass(frozen=True)
class Check:
    """One count a reader may ask for, and what the workload planned it to be."""

    table: str
    """``database.table``."""
    label: str
    sql: str
    """Trino's query."""
    planned: int
    partition: tuple[tuple[str, str], ...] = ()
    """The partition values the count is filtered on (column, value); none for the whole table."""
    data_rows: bool = False
    """Kept tombstones left out (filtered counts: the plan knows their number, not their partition)."""
    iceberg: bool = False
    """The table is an Iceberg table (read through the Iceberg catalogs, not Glue's partitions)."""
    where: str = ""
    """The filter as SQL Trino and Spark both read (kept tombstones not left out): an Iceberg table's readers filter
    with it, as it has no ``dt``/``hour`` columns to filter ``partition`` on."""


@dataclass
class Counted:
    """A check's counts through Trino before and after compaction; None where the query failed."""

    check: Check
    before: int | None = None
    after: int | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return self.before == self.check.planned == self.after


def qualified(topic: Topic) -> str:
    return f"{topic.database}.{topic.table}"


def checks_for(topic: Topic, produced: Produced) -> list[Check]:
    """Whole table, the busiest hour, the newest schema version: each with the rows the workload planned."""
    name = qualified(topic)
    iceberg = topic.spec.table_format == TableFormat.ICEBERG
    source = (
        f'{ICEBERG_CATALOG}."{topic.database}"."{topic.table}"' if iceberg else f'"{topic.database}"."{topic.table}"'
    )
    keeps_tombstones = topic.spec.tombstones == "keep"
    data_rows = f' AND NOT coalesce("{TOMBSTONE_COLUMN}", false)' if keeps_tombstones else ""
    per_hour: Counter[tuple[str, str]] = Counter()
    per_version: Counter[int] = Counter()
    for partition, rows in produced.expected.items():
        _, dt, hour = partition.values()
        per_hour[(dt, hour)] += rows
        per_version[partition.schema_version] += rows
    (dt, hour), hour_rows = max(sorted(per_hour.items()), key=lambda item: item[1])
    version = max(per_version)
    tombstones = produced.counts["tombstones"] if keeps_tombstones else 0
    hour_filter = business_hour_filter(dt, hour) if iceberg else f"dt = '{dt}' AND hour = '{hour}'"
    version_filter = f"schema_version = {version}"
    return [
        Check(name, "count(*)", count_sql(source), per_version.total() + tombstones, iceberg=iceberg),
        Check(
            name,
            hour_filter,
            count_sql(source, hour_filter + data_rows),
            hour_rows,
            (("dt", dt), ("hour", hour)),
            data_rows=keeps_tombstones,
            iceberg=iceberg,
            where=hour_filter,
        ),
        Check(
            name,
            version_filter,
            count_sql(source, version_filter + data_rows),
            per_version[version],
            (("schema_version", str(version)),),
            data_rows=keeps_tombstones,
            iceberg=iceberg,
            where=version_filter,
        ),
    ]


def business_hour_filter(dt: str, hour: str) -> str:
    """An Iceberg table's rows of one business hour: a range on the column its hidden partitioning is made from (the
    table has no ``dt``/``hour`` columns), so the reader prunes to that hour's files as a Hive reader does."""
    start = datetime.fromisoformat(f"{dt}T{hour}:00:00+00:00")
    end = start + timedelta(hours=1)
    return " AND ".join(
        f"{TIME_COLUMN} {op} TIMESTAMP '{moment:%Y-%m-%d %H:%M:%S} UTC'" for op, moment in ((">=", start), ("<", end))
    )


def count_sql(source: str, where: str = "") -> str:
    """``count(*)`` of ``source``, filtered by ``where`` when given."""
    query = f"SELECT count(*) FROM {source}"  # noqa: S608 - names from the topic catalog, values from the plan
    return f"{query} WHERE {where}" if where else query


@dataclass
class InteropReport:
    trino_version: str
    counted: list[Counted] = field(default_factory=list)
    compacted: dict[str, str] = field(default_factory=dict)
    """``database.table`` → what the compactor's run compacted: partitions compacted of those in Glue, or an Iceberg
    table's data files rewritten."""

    @property
    def matches(self) -> bool:
        return bool(self.counted) and all(c.matches for c in self.counted)


def count(client: TrinoClient, counted: Counted) -> int | None:
    try:
        return client.count(counted.check.sql)
    except TrinoError as exc:
        counted.errors.append(str(exc))
        return None
