"""The Iceberg compaction's pure parts: which hours are closed and the rewrite's filter on them, the orphan
candidates of a listing, and the retention against the erasure deadline."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

from kafkalake.environments import EnvironmentConfig
from kafkalake.iceberg import ORPHAN_AGE, SNAPSHOT_RETENTION
from kafkalake.layout import Partition
from kafkalake.topic_spec import TopicSpec
from spark_jobs.compaction.selection import closed_until
from spark_jobs.compaction.table_maintenance import closed_hours_filter, timestamp
from spark_jobs.compaction.work import Knobs
from spark_jobs.iceberg_maintenance import orphan_candidates

KNOBS = Knobs(safety_delay=timedelta(hours=2))


def test_the_closed_hours_are_those_the_hive_compactor_takes_by_age() -> None:
    assert closed_until(KNOBS, datetime(2026, 11, 20, 10, 30, tzinfo=UTC)) == datetime(2026, 11, 20, 8, tzinfo=UTC)
    assert closed_until(KNOBS, datetime(2026, 11, 20, 10, tzinfo=UTC)) == datetime(2026, 11, 20, 8, tzinfo=UTC)
    assert closed_until(KNOBS, datetime(2026, 11, 20, 9, 59, 59, tzinfo=UTC)) == datetime(2026, 11, 20, 7, tzinfo=UTC)
    paris = timezone(timedelta(hours=1))
    assert closed_until(KNOBS, datetime(2026, 11, 20, 11, 30, tzinfo=paris)) == datetime(2026, 11, 20, 8, tzinfo=UTC)
    for minutes in range(0, 24 * 60, 7):  # the same answer as "ended at least the safety delay ago", every hour
        now = datetime(2026, 11, 20, tzinfo=UTC) + timedelta(minutes=minutes)
        for hour in range(24):
            partition = Partition(1, date(2026, 11, 20), hour)
            assert (partition.end <= closed_until(KNOBS, now)) == (partition.end + KNOBS.safety_delay <= now)


def test_the_rewrite_takes_rows_before_the_first_open_hour_in_utc_whatever_the_session_zone() -> None:
    until = closed_until(KNOBS, datetime(2026, 11, 20, 10, 30, tzinfo=UTC))
    assert closed_hours_filter(until) == "_business_time < TIMESTAMP '2026-11-20 08:00:00.000000+00:00'"
    paris = datetime(2026, 11, 20, 9, 0, 0, 250, tzinfo=timezone(timedelta(hours=1)))
    assert timestamp(paris) == "TIMESTAMP '2026-11-20 08:00:00.000250+00:00'"


def test_orphan_candidates_are_the_tables_own_objects_and_only_those_asked_for() -> None:
    """Iceberg's action keeps what the table references and what is newer than its bound; what it is given must not
    hold an object older than the table (a Hive table's before it, under the same location)."""
    created = datetime(2026, 11, 1, tzinfo=UTC)
    failed = "s3://b/data/t/data/_business_time_hour=1/00000-0-x.parquet"
    replaced = "s3://b/data/t/schema_version=1/dt=2026-11-02/hour=06/t+0+0-9.parquet"
    hive = "s3://b/data/t/schema_version=1/dt=2026-10-01/hour=06/t+0+0-9.parquet"
    listed = {failed: created + timedelta(days=3), replaced: created, hive: created - timedelta(seconds=1)}
    assert orphan_candidates(listed, table_created=created) == [(failed, listed[failed]), (replaced, created)]
    assert orphan_candidates(listed, table_created=created, only={replaced, hive}) == [(replaced, created)]
    same_second = {failed: created}  # listed in whole seconds: written after the table, within its second
    assert orphan_candidates(same_second, table_created=created + timedelta(milliseconds=400)) == [(failed, created)]


def test_the_retention_keeps_the_shortest_erasure_deadline_and_orphans_wait_a_day() -> None:
    shortest = TopicSpec.model_json_schema()["properties"]["erasure_within_days"]["minimum"]
    run = timedelta(minutes=EnvironmentConfig.model_fields["compactor_timeout_minutes"].default)
    assert SNAPSHOT_RETENTION + timedelta(hours=1) + run < timedelta(days=shortest)  # hourly runs, each that long
    assert timedelta(days=1) <= ORPHAN_AGE
    assert (Knobs().snapshot_retention, Knobs().orphan_age) == (SNAPSHOT_RETENTION, ORPHAN_AGE)
