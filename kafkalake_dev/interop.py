"""The interop check (``make interop``): Athena's engine, Trino, counts every demo table before and after compaction.

The demo's pipeline runs in a throw-away environment of its own (so "before compaction" is never a table an earlier
run compacted): provision → workload → archiver → maintainer; then Trino (``kafkalake_dev.trino``, the Hive
connector over the local Glue and S3) counts every table; then compactor → maintainer again, and Trino counts
again. Per table it runs ``count(*)``, a count filtered on the busiest ``dt``/``hour`` and one filtered on the
newest ``schema_version``, and compares each with what the workload planned. Filtered counts leave kept tombstones
out (``_tombstone``): the plan knows their number, not their partition; the whole-table count includes them.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev import stack
from kafkalake_dev.cli_options import on_local_stack
from kafkalake_dev.render import wide_console
from kafkalake_dev.sandbox import isolated_env
from kafkalake_dev.trino import TrinoClient, TrinoError, server_version, trino_service
from kafkalake_dev.workload import Produced

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.table import Table

    from kafkalake.endpoints import Endpoints
    from kafkalake.environments import EnvironmentConfig

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
    source = f'"{topic.database}"."{topic.table}"'
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
    hour_filter, version_filter = f"dt = '{dt}' AND hour = '{hour}'", f"schema_version = {version}"
    return [
        Check(name, "count(*)", count_sql(source), per_version.total() + tombstones),
        Check(
            name,
            hour_filter,
            count_sql(source, hour_filter + data_rows),
            hour_rows,
            (("dt", dt), ("hour", hour)),
            data_rows=keeps_tombstones,
        ),
        Check(
            name,
            version_filter,
            count_sql(source, version_filter + data_rows),
            per_version[version],
            (("schema_version", str(version)),),
            data_rows=keeps_tombstones,
        ),
    ]


def count_sql(source: str, where: str = "") -> str:
    """``count(*)`` of ``source``, filtered by ``where`` when given."""
    query = f"SELECT count(*) FROM {source}"  # noqa: S608 - names from the topic catalog, values from the plan
    return f"{query} WHERE {where}" if where else query


@dataclass
class InteropReport:
    trino_version: str
    counted: list[Counted] = field(default_factory=list)
    compacted: dict[str, tuple[int, int]] = field(default_factory=dict)
    """``database.table`` → (partitions compacted, partitions in Glue) after the compactor's run."""

    @property
    def matches(self) -> bool:
        return bool(self.counted) and all(c.matches for c in self.counted)


def count(client: TrinoClient, counted: Counted) -> int | None:
    try:
        return client.count(counted.check.sql)
    except TrinoError as exc:
        counted.errors.append(str(exc))
        return None


def run_interop(
    endpoints: Endpoints,
    settings: EnvironmentConfig,
    catalog_root: Path,
    *,
    records: int,
    say: Callable[[str], None],
) -> InteropReport:
    """The demo's pipeline in ``settings``' environment, with every table counted through Trino before and after
    compaction. Trino runs for the duration of the call only (unless another one already answers on its port)."""
    from kafkalake_dev.demo import run_demo

    catalog = load_topic_catalog(catalog_root)
    client = TrinoClient()
    server = trino_service(endpoints)
    server.start()
    try:
        report = InteropReport(trino_version=server_version() or "unknown")

        def count_before(produced: dict[str, Produced]) -> None:
            say(f"interop: Trino {report.trino_version}: counting every table before compaction")
            for topic in catalog.for_env(settings.name):
                report.counted += [Counted(c) for c in checks_for(topic, produced[topic.kafka_topic])]
            for counted in report.counted:
                counted.before = count(client, counted)

        demo = run_demo(
            endpoints,
            settings,
            catalog,
            records=records,
            say=say,
            producing=lambda _topic: lambda _done: None,
            before_compaction=count_before,
            erase=False,
        )
        say(f"interop: Trino {report.trino_version}: counting every table after compaction and maintenance")
        for counted in report.counted:
            counted.after = count(client, counted)
        for table in demo.tables:
            report.compacted[qualified(table.topic)] = (table.inventory.compacted, len(table.inventory.partitions))
    finally:
        server.stop()
    return report


def results_table(report: InteropReport) -> Table:
    from rich.table import Table

    table = Table(title=f"Trino {report.trino_version} (Hive connector on the local Glue and S3) against the plan")
    numbers = ("planned", "before compaction", "after compaction")
    for column in ("table", "count", *numbers, "compacted after", "match"):
        table.add_column(column, justify="right" if column in numbers else "left")
    shown = ""
    for counted in report.counted:
        name = counted.check.table
        compacted = report.compacted.get(name)
        table.add_row(
            name if name != shown else "",
            counted.check.label,
            str(counted.check.planned),
            "error" if counted.before is None else str(counted.before),
            "error" if counted.after is None else str(counted.after),
            f"{compacted[0]}/{compacted[1]} partitions" if compacted and name != shown else "",
            "yes" if counted.matches else "NO",
        )
        shown = name
    return table


def interop(
    ctx: typer.Context,
    records: Annotated[int, typer.Option(help="Records per topic.")] = 5000,
    template: Annotated[str, typer.Option(help="Environment whose catalog and settings the check copies.")] = "staging",
) -> None:
    """Trino (Athena's engine) counts every demo table before and after compaction, against the workload's plan."""
    console = wide_console()
    stack.up()
    with tempfile.TemporaryDirectory(prefix="kafkalake-interop-") as folder:
        settings, catalog_root, _ = isolated_env(Path(folder), template)
        console.print(f"interop: environment {settings.name} (a copy of {template}), {records} records per topic")
        report = run_interop(on_local_stack(ctx), settings, catalog_root, records=records, say=console.print)
    console.print(results_table(report))
    for counted in report.counted:
        for error in counted.errors:
            console.print(f"{counted.check.table}: {error}")
    console.print(f"interop {'done: every count matches the plan' if report.matches else 'FAILED'}")
    if not report.matches:
        raise typer.Exit(1)
