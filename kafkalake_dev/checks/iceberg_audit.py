"""The offset audit of an Iceberg topic, from its table's snapshot summaries: every offset from the first archived to
the committed one accounted for exactly once.

Per Kafka partition, the plans the table's snapshots name (``kafkalake.iceberg.PLAN_PROPERTY`` and
``OFFSETS_PROPERTY``, each written in the commit that appended the plan's files), with those whose snapshots have
expired since (the compactor and the erasure job expire snapshots; a plan's receipt outlives them, and no snapshot
expires before its plan's receipt is stored), must tile the offsets without a gap or an overlap and end at the
group's committed offset; every row the current snapshot holds must lie in a committed
plan's range, and no (partition, offset) may appear twice. Rows are read from the table's current snapshot (its
offset columns only), so rewrites and deletes are seen as every reader sees them.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import committed_plans, table_catalog
from kafkalake.topic_catalog import Topic
from kafkalake_dev.checks.audit import Problem
from kafkalake_dev.checks.inventory import stored_receipts

OFFSET_COLUMNS = ("_kafka_partition", "_kafka_offset")


def audit_table(
    summaries: Iterable[Mapping[str, str]],
    rows: Iterable[tuple[int, int]],
    committed: Mapping[int, int | None],
    receipted: Mapping[str, Mapping[int, tuple[int, int]]] | None = None,
) -> list[Problem]:
    """Problems found in a table whose snapshots have ``summaries`` (any order), whose current snapshot holds
    ``rows`` ((Kafka partition, offset) each), and whose group committed ``committed``; ``receipted``: plan id →
    ranges of the plans' receipts, for plans whose snapshots expired."""
    ranges: dict[int, list[tuple[int, int, str]]] = {}
    for plan, per_partition in {**(receipted or {}), **committed_plans(summaries)}.items():
        for partition, (start, end) in per_partition.items():
            ranges.setdefault(partition, []).append((start, end, plan))
    problems = []
    for partition in sorted({*ranges, *(p for p, o in committed.items() if o)}):
        problems += _tiling(partition, sorted(ranges.get(partition, [])), committed.get(partition))
    counted = Counter(rows)
    for (partition, offset), times in sorted(counted.items()):
        if times > 1:
            problems.append(Problem(partition, offset, offset + 1, "duplicate", f"{times} rows in the table"))
        if not any(start <= offset < end for start, end, _ in ranges.get(partition, [])):
            problems.append(Problem(partition, offset, offset + 1, "unaccounted", "no committed plan holds the offset"))
    return problems


def _tiling(partition: int, spans: list[tuple[int, int, str]], committed: int | None) -> list[Problem]:
    problems = []
    for (_, end, plan), (start, next_end, next_plan) in itertools.pairwise(spans):
        if start > end:
            problems.append(Problem(partition, end, start, "gap", f"between plans {plan} and {next_plan}"))
        elif start < end:
            problems.append(Problem(partition, start, min(end, next_end), "overlap", f"plans {plan} and {next_plan}"))
    reached = max((end for _, end, _ in spans), default=0)
    if committed is not None and reached != committed:
        kind = "uncommitted" if reached > committed else "missing"
        low, high = sorted((reached, committed))
        problems.append(
            Problem(partition, low, high, kind, f"the table's plans reach {reached}, the group {committed}")
        )
    return problems


def audit_topic(endpoints: Endpoints, topic: Topic, committed: Mapping[int, int | None]) -> list[Problem]:
    """``audit_table`` of the topic's Iceberg table, read through the Glue catalog."""
    table = table_catalog(endpoints).load_table((topic.database, topic.table))
    summaries = [dict(s.summary.additional_properties) for s in table.snapshots() if s.summary]
    offsets = table.scan(selected_fields=OFFSET_COLUMNS).to_arrow()
    rows = zip(*(offsets.column(c).to_pylist() for c in OFFSET_COLUMNS), strict=True)
    return audit_table(
        summaries, rows, committed, receipted_plans(make_client(endpoints, "s3"), endpoints.bucket, topic)
    )


def receipted_plans(s3: Any, bucket: str, topic: Topic) -> dict[str, dict[int, tuple[int, int]]]:
    """Plan id (the receipt's name) → offset ranges, of every receipt of the topic."""
    return {
        topic.prefix.plan_of_receipt(key): {p: (a.start, a.end) for p, a in receipt.partitions.items()}
        for key, receipt in stored_receipts(s3, bucket, topic.prefix).items()
    }
