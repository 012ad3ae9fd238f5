"""What is in the lake, for people: every table's schema versions, partitions, freshness, files and quarantine.

Read from the same places a query engine and the compactor use: Glue partitions (and the locations they hold),
S3 listings, compaction manifests and Parquet footers. ``render_html`` writes one self-contained page (inline CSS
and SVG, no scripts or downloads) with a chart of files per partition before and after compaction.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from kafkalake.aws import list_objects, read_json
from kafkalake.catalog import Topic
from kafkalake.footer import read_footer
from kafkalake.glue import COMPLETE_PARAMETER, table_partitions
from kafkalake.layout import Partition, TablePrefix, is_compaction_output, parse_s3_uri


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


def table_inventory(s3: Any, glue: Any, bucket: str, topic: Topic) -> TableInventory:
    raw, compacted = table_objects(s3, bucket, topic.prefix)
    quarantine = list_objects(s3, bucket, topic.quarantine_prefix(), ".parquet")
    partitions, columns_by_version = [], {}
    files = {**raw, **compacted}
    for glue_partition in sorted(table_partitions(glue, topic.database, topic.table) or [], key=lambda p: p["Values"]):
        values = tuple(glue_partition["Values"])
        partition = Partition.from_values(list(values))
        location = parse_s3_uri(glue_partition["StorageDescriptor"]["Location"]).as_prefix()
        current = {k: s for k, s in files.items() if k.startswith(location)}
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
    quarantined = sum(read_footer(s3, bucket, key).num_rows for key in quarantine)
    return TableInventory(topic.database, topic.table, topic.kafka_topic, added, partitions, quarantined)


def take_inventory(s3: Any, glue: Any, bucket: str, topics: list[Topic]) -> list[TableInventory]:
    return [table_inventory(s3, glue, bucket, topic) for topic in topics]


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
        ]
        for item in inventory
    ]


BAR_WIDTH, GAP, CHART_HEIGHT = 9, 8, 120


def chart_svg(item: TableInventory) -> str:
    """Files per partition: before compaction (grey) next to what readers open now (blue)."""
    tallest = max([1, *(max(p.files_before, p.files) for p in item.partitions)])
    step = 2 * BAR_WIDTH + GAP
    width = max(200, 40 + step * len(item.partitions))
    bars = []
    for index, part in enumerate(item.partitions):
        x = 36 + index * step
        for offset, count, kind in ((0, part.files_before, "before"), (BAR_WIDTH, part.files, "now")):
            height = max(1.0, CHART_HEIGHT * count / tallest)
            bars.append(
                f'<rect class="bar {kind}" x="{x + offset}" y="{10 + CHART_HEIGHT - height:.1f}" '
                f'width="{BAR_WIDTH - 1}" height="{height:.1f}" data-partition="{html.escape(part.label)}" '
                f'data-files="{count}"><title>{html.escape(part.label)}: {count} files {kind}</title></rect>'
            )
    axis = (
        f'<line x1="34" y1="{10 + CHART_HEIGHT}" x2="{width}" y2="{10 + CHART_HEIGHT}" stroke="#999"/>'
        f'<text x="30" y="16" text-anchor="end">{tallest}</text>'
        f'<text x="30" y="{10 + CHART_HEIGHT}" text-anchor="end">0</text>'
    )
    label = f"files per partition of {item.database}.{item.table}"
    return (
        f'<svg class="chart" role="img" aria-label="{html.escape(label)}" width="{width}" '
        f'height="{CHART_HEIGHT + 30}" viewBox="0 0 {width} {CHART_HEIGHT + 30}">{axis}{"".join(bars)}</svg>'
    )


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin-bottom: 2rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.bar.before { fill: #b0b0b0; } .bar.now { fill: #2b6cb0; }
.chart text { font-size: 10px; fill: #555; }
.legend span { display: inline-block; width: 0.8rem; height: 0.8rem; margin: 0 0.3rem 0 1rem; }
"""


def render_html(inventory: list[TableInventory], title: str) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        '<tr class="table-row">' + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in rows(inventory)
    )
    charts = "".join(
        f'<section class="table-chart"><h3>{html.escape(item.database)}.{html.escape(item.table)}</h3>'
        f"{chart_svg(item)}</section>"
        for item in inventory
    )
    legend = (
        '<p class="legend">files per partition:<span style="background:#b0b0b0"></span>before compaction'
        '<span style="background:#2b6cb0"></span>now (what readers open)</p>'
    )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f'<table id="inventory"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        f"<h2>Files per partition</h2>{legend}{charts}</body></html>\n"
    )
