"""What the ``kafkalake`` commands print, for people: rich tables built from the results of the dev tooling and the
jobs, the inventory page, and a console wide enough to stay readable when piped."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from kafkalake.personal import name_suggestions

if TYPE_CHECKING:
    from kafkalake.topic_catalog import Topic
    from kafkalake_dev.checks.audit import Lake, PartitionAudit
    from kafkalake_dev.checks.interop import InteropReport, Read
    from kafkalake_dev.checks.inventory import TableInventory
    from kafkalake_dev.demo import DemoReport
    from lambdas.reconciler.logic import TableReconciliation
    from spark_jobs.compaction.work import PartitionResult

DEMO_COLUMNS = (
    "table",
    "versions",
    "partitions Glue / data",
    "compacted",
    "files before → now",
    "rows read",
    "rows expected",
    "erased",
    "dups",
    "quarantined / poison",
    "tombstones (kept)",
    "ok",
)
ARCHIVE_COLUMNS = ("topic", "status", "plans", "read", "written", "files", "quarantined", "tombstones", "lag")
AUDIT_COLUMNS = ("partition", "offsets", "committed", "read", "stored", "quarantined", "tombstones", "found", "status")
COMPACTION_COLUMNS = ("table", "partition", "action", "files before → after", "MiB before → after", "rows", "why")


def wide_console() -> Console:
    """Rich output that stays readable when piped (rich assumes 80 columns without a terminal)."""
    return Console(width=max(160, shutil.get_terminal_size((160, 40)).columns))


def table(title: str, columns: Iterable[str], rows: Iterable[Sequence[str]], *, fold: bool = True) -> Table:
    """A rich table of ``rows`` (long cells folded onto more lines when ``fold``)."""
    found = Table(title=title)
    for column in columns:
        found.add_column(column, overflow="fold" if fold else "ellipsis")
    for row in rows:
        found.add_row(*row)
    return found


def archive_summary(lines: list[dict[str, Any]], bucket: str) -> Table:
    """The archiver's per-topic summary (its JSON lines, ``TopicResult.as_dict``)."""
    phases = " / ".join(lines[0]["timings"]) if lines else "phases"
    timings = f"{phases} s (task-seconds for read_decode and write)"
    columns = (*ARCHIVE_COLUMNS, "seconds", timings, "error or why skipped")
    rows = []
    for line in lines:
        reasons = sorted(line["quarantine_by_reason"].items())
        rows.append(
            (
                line["kafka_topic"],
                line["status"],
                *(str(line[k]) for k in ("plans", "read", "written", "objects")),
                " ".join([str(line["quarantined"]), *(f"{k}={v}" for k, v in reasons)]),
                str(line["tombstones"]),
                str(sum(line["lag"].values())),
                f"{line['seconds']:.1f}",
                " / ".join(f"{v:.1f}" for v in line["timings"].values()),
                line["error"] or line["skipped"] or "",
            )
        )
    return table(f"archived to s3://{bucket}/", columns, rows)


def demo_results(report: DemoReport) -> Table:
    """Per table: what a reader finds through Glue against what the workload produced."""
    rows = []
    for result in report.tables:
        inventory = result.inventory
        rows.append(
            (
                f"{inventory.database}.{inventory.table}",
                ", ".join(str(v) for v in inventory.schema_versions),
                f"{len(result.partitions_in_glue)} / {len(result.partitions_with_data)}",
                str(inventory.compacted),
                f"{inventory.files_before} → {inventory.files}",
                str(sum(result.queried.rows.values())),
                str(sum(result.expected.values())),
                str(len(result.erased)),
                str(result.queried.duplicates),
                f"{inventory.quarantined_rows} / {result.produced.counts['poison']}",
                f"{result.produced.counts['tombstones']} ({result.queried.tombstones} kept)",
                "yes" if result.matches and result.quarantine_matches else "NO",
            )
        )
    return table(f"Queried through the Glue catalog ({report.env})", DEMO_COLUMNS, rows)


def erasure_lines(report: DemoReport) -> Iterator[str]:
    """The demo's erasure receipts: per request, rows removed per table, partitions rewritten, objects and versions
    deleted (hashed subjects only; no identifier is ever in a receipt)."""
    if report.erasure is None:
        return
    for request_id, receipt in sorted(report.erasure.receipts.items()):
        mark = " (the demo's request)" if request_id == report.erasure.request_id else ""
        yield f"erasure receipt {request_id}{mark}: finished {receipt['finished_at']}"
        for name, done in sorted(receipt["tables"].items()):
            yield (
                f"  {name:<40} {done['rows_removed']} rows removed from {len(done['partitions'])} partitions, "
                f"{done['quarantine_rows_removed']} quarantined records"
            )
        replaced, versions = len(receipt["objects_deleted"]), receipt["versions_deleted"]
        yield f"  {replaced} objects replaced, {versions} object versions deleted"


def maintainer_lines(report: DemoReport) -> Iterator[str]:
    """One line per maintainer run of the demo: its non-zero counts."""
    for run, counts in enumerate(report.maintainer_runs, 1):
        line = ", ".join(f"{k}={v}" for k, v in sorted(counts["counts"].items()) if v)
        yield f"maintainer run {run}: {line or 'nothing to do'}"


def reconcile_lines(results: list[TableReconciliation]) -> Iterator[str]:
    """Per table: what the reconciler added, and the Glue partitions whose location holds no object."""
    for done in results:
        added, empty = len(done.added), len(done.empty_locations)
        state = done.failed or done.skipped or f"{added} partitions added, {empty} with no objects"
        yield f"  {done.table:<45} {'FAILED ' if done.failed else ''}{state}"
        for values in done.added:
            yield f"    added {'/'.join(values)} (its S3 events were lost)"
        for values in done.empty_locations:
            yield f"    EMPTY {'/'.join(values)}: the Glue partition's location holds no object"


def inventory_table(inventories: list[TableInventory], title: str) -> Table:
    from kafkalake_dev.checks.inventory import COLUMNS, rows

    return table(title, COLUMNS, rows(inventories))


def write_inventory_page(inventories: list[TableInventory], title: str, path: Path, drift: Sequence[str] = ()) -> None:
    from kafkalake_dev.checks.inventory_page import render_html

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(inventories, title, drift))


def audit_summary(topic: Topic, lake: Lake, results: list[PartitionAudit]) -> Table:
    """Per Kafka partition: the offsets accounted for, and whether any are missing or counted twice."""
    rows = []
    for r in results:
        span = f"{r.first}-{r.end - 1}" if r.first is not None and r.end is not None else "-"
        status = "ok" if not r.problems else f"{len(r.problems)} problems"
        values = (r.committed, r.read, r.stored, r.quarantined, r.dropped_tombstones, r.found)
        rows.append((str(r.kafka_partition), span, *(str(v) for v in values), status))
    title = f"offset audit of {topic.kafka_topic} ({len(lake.receipts)} receipts)"
    return table(title, AUDIT_COLUMNS, rows, fold=False)


def compaction_summary(results: list[PartitionResult], title: str) -> Table:
    """The partitions a compactor run compacted or failed (skipped ones left out)."""
    from spark_jobs.compaction.work import Action

    rows = [
        (
            result.table,
            "/".join(result.partition),
            result.action,
            f"{result.files_before} → {result.files_after}",
            f"{result.bytes_before / 2**20:.1f} → {result.bytes_after / 2**20:.1f}",
            str(result.rows),
            result.reason,
        )
        for result in results
        if result.action != Action.SKIPPED
    ]
    return table(title, COMPACTION_COLUMNS, rows, fold=False)


def personal_data_lines(topic: Topic) -> list[str]:
    """What ``catalog validate`` says of a topic's personal data: every personal field with its action and where it
    was declared, the quarantine, and fields whose names suggest personal data (reported, never applied)."""
    sources = sorted(topic.personal_field_sources().items())
    lines = [f"      personal {path}: {action} ({source})" for path, (action, source) in sources]
    if lines:
        lines.append(f"      quarantine: {topic.quarantine}")
    for path, part in name_suggestions(topic.field_paths(), topic.personal_fields):
        lines.append(
            f"      suggestion: {path} looks personal (*{part}*), not protected: tag it in the schema or add it to "
            f"pii: in {topic.source.name}"
        )
    return lines


def interop_results(report: InteropReport) -> tuple[Table, Table]:
    """The interop check's counts per table: Trino's before, during (each distinct count with how many samples gave
    it) and after compaction against the workload's plan; then, after erasure, Trino's and an Iceberg table's other
    readers' against the plan less the erased records, beside the rows the erasure receipts removed."""
    connectors = "Hive and Iceberg connectors on the local Glue and S3"
    compaction = Table(title=f"Trino {report.trino_version} ({connectors}) against the plan, around compaction")
    readers = list(dict.fromkeys(name for counted in report.counted for name in counted.readers))
    numbers = {
        "planned",
        "before compaction",
        "after compaction",
        "planned after erasure",
        "Trino",
        "removed (receipts)",
    }
    numbers.update(readers)
    erasure = Table(title="After the erasure, against the plan less the erased records: Trino and the Iceberg readers")
    for found, columns in (
        (compaction, ("table", "count", "planned", "before compaction", "during compaction", "after compaction")),
        (erasure, ("table", "count", "planned after erasure", "Trino", *readers, "removed (receipts)")),
    ):
        for column in columns:
            found.add_column(column, justify="right" if column in numbers else "left", overflow="fold")
    compaction.add_column("compacted")
    for found in (compaction, erasure):
        found.add_column("match")
    shown = ""
    for counted in report.counted:
        check = counted.check
        name = check.table if check.table != shown else ""
        compacted = report.compacted.get(check.table, "") if name else ""
        compaction.add_row(
            name,
            check.label,
            str(check.planned),
            number(counted.before),
            samples(counted.during),
            number(counted.after),
            compacted,
            "yes" if counted.compaction_matches else "NO",
        )
        erasure.add_row(
            name,
            check.label,
            str(check.planned_after_erasure),
            number(counted.erased),
            *(read_cell(counted.readers.get(reader)) for reader in readers),
            "" if counted.removed is None else str(counted.removed),
            "yes" if counted.erasure_matches else "NO",
        )
        shown = check.table
    return compaction, erasure


def read_cell(read: Read | None) -> str:
    """A reader's count, with its duplicates when it has any; empty for a table the reader does not read."""
    if read is None:
        return ""
    return f"{read.rows} ({read.duplicates} duplicates)" if read.duplicates else str(read.rows)


def number(counted: int | None) -> str:
    return "error" if counted is None else str(counted)


def samples(counts: list[int | None]) -> str:
    """Each distinct count of ``counts`` with how many times it was taken (``5000 (14 samples)``), smallest
    first."""
    if not counts:
        return "no sample"
    tally = Counter(counts)
    ordered = sorted(tally, key=lambda n: (n is None, n or 0))
    return ", ".join(f"{number(n)} ({tally[n]} sample{'s' if tally[n] > 1 else ''})" for n in ordered)
