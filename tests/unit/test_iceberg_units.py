"""The pure parts of Iceberg tables: the plan, offsets, hours and newest time in a snapshot summary, the current
line of snapshots, the audit that reads them, and an hour's files before and after a rewrite in the inventory."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

from kafkalake.iceberg import (
    NEWEST_KAFKA_TIME_PROPERTY,
    OFFSETS_PROPERTY,
    PARTITIONS_PROPERTY,
    PLAN_PROPERTY,
    TABLE_PROPERTIES,
    CommittedData,
    committed_data,
    committed_plans,
    current_summaries,
    offsets_summary,
    plan_summary,
)
from kafkalake.layout import Partition
from kafkalake_dev.checks.iceberg_audit import audit_table
from kafkalake_dev.checks.inventory import iceberg_hour


def plan(plan_id: str, ranges: dict[int, tuple[int, int]]) -> dict[str, str]:
    return {PLAN_PROPERTY: plan_id, OFFSETS_PROPERTY: offsets_summary("t", ranges), "added-records": "1"}


def test_a_plans_offsets_round_trip_through_its_snapshot_summary() -> None:
    summaries = [plan("p1", {0: (0, 10), 1: (5, 7)}), {"operation": "replace"}, plan("p2", {0: (10, 12)})]
    assert committed_plans(summaries) == {"p1": {0: (0, 10), 1: (5, 7)}, "p2": {0: (10, 12)}}


def test_tables_keep_bounds_only_of_columns_without_personal_values_and_stay_on_format_v2() -> None:
    assert TABLE_PROPERTIES["format-version"] == "2"
    assert TABLE_PROPERTIES["write.metadata.metrics.default"] == "counts"
    full = {k.removeprefix("write.metadata.metrics.column.") for k, v in TABLE_PROPERTIES.items() if v == "full"}
    assert full == {"_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_business_time", "schema_version"}
    assert TABLE_PROPERTIES["write.delete.mode"] == "copy-on-write"
    assert TABLE_PROPERTIES["commit.retry.num-retries"] == "0"


def test_a_clean_table_has_no_problem() -> None:
    summaries = [plan("p1", {0: (0, 3)}), plan("p2", {0: (3, 5)})]
    rows = [(0, o) for o in range(5)]
    assert audit_table(summaries, rows, {0: 5}) == []


def test_gaps_overlaps_duplicates_stray_rows_and_a_committed_offset_elsewhere_are_found() -> None:
    summaries = [plan("p1", {0: (0, 3), 1: (0, 2)}), plan("p2", {0: (5, 8), 1: (1, 4)})]
    rows = [(0, 0), (0, 0), (0, 9), (1, 1)]
    found = {(p.kafka_partition, p.start, p.end, p.kind) for p in audit_table(summaries, rows, {0: 8, 1: 6})}
    assert found == {
        (0, 3, 5, "gap"),
        (1, 1, 2, "overlap"),
        (0, 0, 1, "duplicate"),
        (0, 9, 10, "unaccounted"),
        (1, 4, 6, "missing"),
    }
    behind = audit_table([plan("p1", {0: (0, 3)})], [], {0: 2})
    assert [(p.kind, p.start, p.end) for p in behind] == [("uncommitted", 2, 3)]


def test_plans_whose_snapshots_expired_are_accounted_for_by_their_receipts() -> None:
    """The compactor and the erasure job expire snapshots; a plan's receipt outlives its snapshot."""
    current = [plan("p2", {0: (3, 5)})]
    rows = [(0, o) for o in range(5)]
    assert {(p.kind, p.start) for p in audit_table(current, rows, {0: 5})} == {("unaccounted", o) for o in range(3)}
    assert audit_table(current, rows, {0: 5}, {"p1": {0: (0, 3)}, "p2": {0: (3, 5)}}) == []


def test_committed_data_holds_the_plans_hours_and_newest_time_and_nothing_of_other_snapshots() -> None:
    day = date(2026, 11, 21)
    first = plan_summary("a", "t", {0: (0, 9)}, [Partition(1, day, 5)] * 3, datetime(2026, 11, 21, 5, 59, tzinfo=UTC))
    second = plan_summary("b", "t", {0: (10, 19)}, [Partition(2, day, 6), Partition(1, day, 6)], None)
    rewrite = {"operation": "replace", "added-data-files": "1"}
    assert json.loads(first[PARTITIONS_PROPERTY]) == [["1", "2026-11-21", "05"]], "each hour once"
    assert NEWEST_KAFKA_TIME_PROPERTY not in second, "no statistics, no time"
    found = committed_data([rewrite, second, first])
    assert found.partitions == {Partition(1, day, 5), Partition(1, day, 6), Partition(2, day, 6)}
    assert found.newest_kafka_time == datetime(2026, 11, 21, 5, 59, tzinfo=UTC)
    assert committed_data([rewrite]) == CommittedData(frozenset(), None)


def test_current_summaries_follow_the_current_line_only() -> None:
    snapshots = [
        {"snapshot-id": 1, "summary": {"n": "1"}},
        {"snapshot-id": 2, "parent-snapshot-id": 1, "summary": {"n": "2"}},
        {"snapshot-id": 3, "parent-snapshot-id": 1, "summary": {"n": "3"}},  # rolled back
        {"snapshot-id": 4, "parent-snapshot-id": 2, "summary": {"n": "4"}},
    ]
    assert [s["n"] for s in current_summaries({"current-snapshot-id": 4, "snapshots": snapshots})] == ["4", "2", "1"]
    expired_parent = [{"snapshot-id": 9, "parent-snapshot-id": 8, "summary": {"n": "9"}}]
    assert [s["n"] for s in current_summaries({"current-snapshot-id": 9, "snapshots": expired_parent})] == ["9"]
    assert current_summaries({"current-snapshot-id": -1, "snapshots": []}) == [], "a table without snapshots"
    assert current_summaries({"format-version": 2}) == []


def test_an_hours_rewrite_shows_the_files_the_archiver_wrote_before_it() -> None:
    closed, open_ = (datetime(2026, 11, 24, h, tzinfo=UTC) for h in (1, 2))
    archived = {f"data/t/hour={h:%H}/t+{p}+0-9.parquet": h for h in (closed, open_) for p in range(3)}
    archived["data/t/hour=01/t+0+10-19.parquet"] = closed  # a later plan's file of the same hour
    rewritten = ["data/t/data/_business_time_hour=2026-11-24-01/00000-1-a.parquet"]  # Iceberg's name, no receipt
    assert iceberg_hour(rewritten, archived, closed) == (True, 4)
    untouched = [k for k, h in archived.items() if h == open_]
    assert iceberg_hour(untouched, archived, open_) == (False, 3)
    assert iceberg_hour(rewritten, {}, closed) == (True, 1)  # no receipt: the live files, never fewer than now
