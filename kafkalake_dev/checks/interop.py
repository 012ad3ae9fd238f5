"""The interop check (``make interop``): Athena's engine, Trino, counts every demo table before, during and after
compaction, and after erasure.

The demo's pipeline runs in a throw-away environment of its own (``kafkalake_dev.demo.run_interop``; so "before
compaction" is never a table an earlier run compacted): provision → workload → archiver → maintainer; then Trino
(``kafkalake_dev.local.trino``: the Hive connector for Hive tables, the Iceberg connector for Iceberg tables, over
the local Glue and S3) counts every table with the counts this module plans; then compactor → maintainer again,
while a thread keeps counting (``sampled_during``: every count it takes must equal the plan), and Trino counts
again; then the demo's erasure → maintainer again, and Trino counts once more, against the plan less the records
the erasure requests cover. Per table it runs ``count(*)``, a count filtered on the busiest ``dt``/``hour`` and one
filtered on the newest ``schema_version``, and compares each with what the workload planned. Filtered counts leave
kept tombstones out (``_tombstone``): the plan knows their number, not their partition; the whole-table count
includes them.

After erasure two more expectations hold: the erasure receipts' rows removed from a table are the plan's whole-table
count less its count after erasure, and an Iceberg table's other readers (pyiceberg's scan, Spark SQL through
``glue_catalog``) count that same number, with no duplicate.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from kafkalake.iceberg import TIME_COLUMN
from kafkalake.layout import Partition
from kafkalake.lease import in_background
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.local.trino import ICEBERG_CATALOG, TrinoError
from kafkalake_dev.local.workload import Produced

TOMBSTONE_COLUMN = "_tombstone"
"""The delete-log flag of topics with ``tombstones: keep`` (``spark_jobs.archiver.writer.TOMBSTONE_COLUMN``)."""
SAMPLE_PAUSE_SECONDS = 0.5
"""The pause between two rounds of counts during compaction: the compactor shares the machine with Trino."""


@dataclass(frozen=True)
class Read:
    """What one reader (``kafkalake_dev.checks.readers``) answered for a check."""

    rows: int
    duplicates: int
    """Rows beyond the first for any (Kafka partition, offset)."""


@dataclass(frozen=True)
class Check:
    """One count a reader may ask for, and what the workload planned it to be."""

    table: str
    """``database.table``."""
    label: str
    sql: str
    """Trino's query."""
    planned: int
    planned_after_erasure: int
    """The same count once the demo's erasure has removed the records its requests cover."""
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
    """A check's counts through Trino before, during and after compaction and after erasure, with what the erasure
    receipts and the Iceberg table's other readers say after erasure; None where a query failed."""

    check: Check
    before: int | None = None
    during: list[int | None] = field(default_factory=list)
    """Every count taken while the compaction step ran."""
    after: int | None = None
    erased: int | None = None
    """Trino's count after the erasure step."""
    removed: int | None = None
    """The whole-table check's rows the erasure receipts say were removed from the table (None for filtered ones)."""
    readers: dict[str, Read] = field(default_factory=dict)
    """An Iceberg table's other readers after erasure (pyiceberg, Spark SQL), by name."""
    errors: list[str] = field(default_factory=list)

    @property
    def compaction_matches(self) -> bool:
        """The counts before and after compaction equal the plan, and so does every count taken during it, of which
        there is at least one."""
        during = bool(self.during) and all(n == self.check.planned for n in self.during)
        return self.before == self.check.planned == self.after and during

    @property
    def erasure_matches(self) -> bool:
        """Trino's count after erasure is the plan less the erased records, as the receipts (whole table) and the
        other readers say too, none of them counting a row twice."""
        expected = self.check.planned_after_erasure
        receipts = self.removed is None or self.check.planned - self.removed == expected
        readers = all(r.rows == expected and r.duplicates == 0 for r in self.readers.values())
        return self.erased == expected and receipts and readers

    @property
    def matches(self) -> bool:
        return self.compaction_matches and self.erasure_matches


def qualified(topic: Topic) -> str:
    return f"{topic.database}.{topic.table}"


def checks_for(topic: Topic, produced: Produced, erased: set[int] | None = None) -> list[Check]:
    """Whole table, the busiest hour, the newest schema version: each with the rows the workload planned, and those
    left once the records ``erased`` (by their index in the workload; none by default) are gone."""
    name = qualified(topic)
    iceberg = topic.spec.table_format == TableFormat.ICEBERG
    source = (
        f'{ICEBERG_CATALOG}."{topic.database}"."{topic.table}"' if iceberg else f'"{topic.database}"."{topic.table}"'
    )
    keeps_tombstones = topic.spec.tombstones == "keep"  # as rows of the table (an upsert table keeps none)
    data_rows = f' AND NOT coalesce("{TOMBSTONE_COLUMN}", false)' if keeps_tombstones else ""
    per_hour, per_version = rows_per_hour_and_version(produced.expected)
    left_per_hour, left_per_version = rows_per_hour_and_version(produced.without(erased or set()))
    (dt, hour), hour_rows = max(sorted(per_hour.items()), key=lambda item: item[1])
    version = max(per_version)
    tombstones = produced.counts["tombstones"] if keeps_tombstones else 0
    hour_filter = business_hour_filter(dt, hour) if iceberg else f"dt = '{dt}' AND hour = '{hour}'"
    version_filter = f"schema_version = {version}"
    whole, left = per_version.total() + tombstones, left_per_version.total() + tombstones
    return [
        Check(name, "count(*)", count_sql(source), whole, left, iceberg=iceberg),
        Check(
            name,
            hour_filter,
            count_sql(source, hour_filter + data_rows),
            hour_rows,
            left_per_hour[(dt, hour)],
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
            left_per_version[version],
            (("schema_version", str(version)),),
            data_rows=keeps_tombstones,
            iceberg=iceberg,
            where=version_filter,
        ),
    ]


def rows_per_hour_and_version(rows: Counter[Partition]) -> tuple[Counter[tuple[str, str]], Counter[int]]:
    """Rows per (``dt``, ``hour``) and per schema version, summed over the plan's partitions."""
    per_hour: Counter[tuple[str, str]] = Counter()
    per_version: Counter[int] = Counter()
    for partition, n in rows.items():
        _, dt, hour = partition.values()
        per_hour[(dt, hour)] += n
        per_version[partition.schema_version] += n
    return per_hour, per_version


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


def removed_rows(receipts: dict[str, dict[str, Any]]) -> Counter[str]:
    """``database.table`` → the rows every erasure receipt (request id → receipt) says it removed from the table."""
    removed: Counter[str] = Counter()
    for receipt in receipts.values():
        for name, done in receipt["tables"].items():
            removed[name] += done["rows_removed"]
    return removed


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


class CountingClient(Protocol):
    """What counts a check: ``TrinoClient``, or a test's stand-in."""

    def count(self, sql: str) -> int: ...


def count(client: CountingClient, counted: Counted) -> int | None:
    """The check's count; None, its error recorded once, when Trino fails the query or does not answer (a count
    during compaction must not end the sampling thread)."""
    try:
        return client.count(counted.check.sql)
    except (TrinoError, OSError) as exc:
        if str(exc) not in counted.errors:
            counted.errors.append(str(exc))
        return None


def count_after_erasure(
    client: CountingClient,
    counted: list[Counted],
    removed: Counter[str],
    readers: Mapping[str, Callable[[Check], Read]],
) -> None:
    """Every check's count after the erasure; a whole-table check's rows removed by the receipts (``removed``:
    ``removed_rows``); an Iceberg table's checks through each of ``readers`` too."""
    for each in counted:
        each.erased = count(client, each)
        if not each.check.partition:
            each.removed = removed[each.check.table]
        if each.check.iceberg:
            each.readers = {name: read(each.check) for name, read in readers.items()}


@contextmanager
def sampled_during(
    client: CountingClient, counted: list[Counted], pause: float = SAMPLE_PAUSE_SECONDS
) -> Iterator[None]:
    """Count every check again and again, in rounds ``pause`` seconds apart, on a thread of its own while the
    ``with`` block runs (each count started before the block ends is one of ``Counted.during``)."""
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for each in counted:
                if done.is_set():
                    return
                each.during.append(count(client, each))
            done.wait(pause)

    with in_background(sample, done, "interop-during-compaction"):
        yield
