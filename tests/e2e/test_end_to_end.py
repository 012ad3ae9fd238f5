"""The demo's flow end to end on the local stack, in an environment of its own, on a smaller workload: every table
reads back what was produced less what was quarantined, dropped or erased (the by_key topic's tombstoned keys, and
one person's request across two tables) and the Debezium topic's upsert table exactly the state its change stream
leaves, with a receipt per erasure request, and a second run changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.glue import table_partitions
from kafkalake.layout import Partition, erasure_lease_key, erasure_prefix
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.topic_spec import TableFormat, TableMode
from kafkalake_dev.checks.inventory_page import render_html
from kafkalake_dev.demo import MIN_INPUT_FILES, DemoReport, TableResult, run_demo
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.runner import Submit, run_in_process, run_job
from kafkalake_dev.local.sandbox import isolated_env
from tests.browser import rendered

pytestmark = [pytest.mark.stack, pytest.mark.spark]
RECORDS = 600
WORKLOAD_AGE = timedelta(hours=3)
"""How far before the demo's own the workload's hours lie: every one of them is then closed by age
(``spark_jobs.compaction.selection.closed_until``, 2 h) at both runs. With the demo's own, an Iceberg table's
last hours close on the hour, and a test that straddles one sees the re-run compact an hour the first left open."""


def snapshot(endpoints: Endpoints, report: DemoReport) -> dict[str, Any]:
    """Every object (key → ETag) in the bucket and every Glue partition (values → location and parameters); the
    runs' leases are left out: each run takes and releases them, which is all they record."""
    s3, glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
    leases = {
        k for t in report.tables for k in (t.topic.prefix.archive_lease_key(), t.topic.prefix.compaction_lease_key())
    } | {erasure_lease_key(report.env)}
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=report.bucket)
    objects = {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", []) if o["Key"] not in leases}
    partitions = {
        (t.topic.table, tuple(p["Values"])): (p["StorageDescriptor"]["Location"], p.get("Parameters"))
        for t in report.tables
        for p in table_partitions(glue, t.topic.database, t.topic.table) or []
    }
    return {"objects": objects, "partitions": partitions}


def test_the_pipeline_end_to_end(local_stack: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings, catalog_dir, environments = isolated_env(tmp_path)
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(environments))
    catalog = load_topic_catalog(catalog_dir)

    def run(submit: Submit) -> DemoReport:
        return run_demo(
            local_stack,
            settings,
            catalog,
            records=RECORDS,
            say=print,
            producing=lambda _topic: lambda _done: None,
            now=lambda: datetime.now(UTC) - WORKLOAD_AGE,
            submit=submit,
        )

    first = run(run_job)  # the jobs' specifications with spark-submit, as EMR Serverless runs them
    assert len(first.tables) == len(catalog.for_env(settings.name)) == 8
    formats = {t.topic.spec.value_format.value for t in first.tables}
    assert formats == {"avro", "protobuf", "json_schema", "json"}, "the demo has a topic of every format"
    assert sum(t.produced.counts["late"] for t in first.tables) > 0, "the workload has no late events"
    assert any(t.produced.counts["schema_version_2"] for t in first.tables), "no topic with two schema versions"
    s3 = make_client(local_stack, "s3")
    for table in first.tables:
        name = table.topic.kafka_topic
        counts = table.produced.counts
        upsert = table.topic.spec.mode == TableMode.UPSERT
        if upsert:  # the current row per key, as computed from the stream
            assert_state(table)
        else:
            good = sum(table.expected.values())
            assert good == RECORDS - counts["poison"] - counts["tombstones"] - len(table.erased) > 0
        # rows per table and partition, read through Glue = produced - quarantined - tombstones - erased
        assert table.queried.rows == table.expected, name
        assert table.queried.duplicates == 0, name
        kept = counts["tombstones"] if table.topic.spec.tombstones == "keep" else 0
        assert table.queried.tombstones == kept, name
        iceberg = table.topic.spec.table_format == TableFormat.ICEBERG
        # every partition with data is in Glue (an Iceberg table's hours, in the table's own partitions)
        if iceberg:
            hours = {(dt, hour) for _, dt, hour in table.partitions_with_data}
            assert hours and hours <= {tuple(p.values[1:]) for p in table.inventory.partitions}, name
        else:
            assert table.partitions_with_data and table.partitions_with_data <= table.partitions_in_glue, name
        # quarantine holds exactly the poison records
        assert counts["poison"] > 0 and table.inventory.quarantined_rows == counts["poison"], name
        quarantined = list_objects(s3, settings.bucket, table.topic.quarantine_prefix(), ".parquet")
        assert quarantined, name
        if table.topic.personal_fields:  # the demo's topics with personal fields keep raw records only restricted
            assert all(key.startswith("restricted/quarantine/") for key in quarantined), name
        if iceberg:  # one rewrite of the table's closed hours, readers on snapshots throughout
            [rewrite] = table.compaction
            assert rewrite.action == "compacted" and rewrite.files_after < rewrite.files_before, (name, rewrite)
            inventory = table.inventory  # what the demo prints: the rewritten hours, the archiver's files before
            assert inventory.compacted > 0 and inventory.files < inventory.files_before, (name, inventory)
            assert_iceberg_maintained(first, table, complete_hours=not upsert)
            continue
        # completed partitions are compacted: every closed partition with enough files now points at _compacted/
        closed = {tuple(r.partition): r for r in table.compaction}
        complete = {p.values for p in table.inventory.partitions if p.complete}
        assert complete and complete <= set(closed), name
        for partition in table.inventory.partitions:
            if partition.values in closed and partition.files_before >= MIN_INPUT_FILES:
                assert partition.compacted and partition.files == 1, (name, partition)
                output = f"s3://{settings.bucket}/{table.topic.prefix.compacted_prefix()}"
                assert partition.location.startswith(output), (name, partition)
        assert table.inventory.compacted > 0, name
    assert_erasure(s3, settings.bucket, first)
    assert {line["topic"] for line in first.archived} == {t.topic.name for t in first.tables}
    assert all(line["status"] == "ok" and line["balanced"] for line in first.archived)

    page = tmp_path / "inventory.html"
    page.write_text(render_html([t.inventory for t in first.tables], "end-to-end"))
    seen = rendered(page)
    assert [row[1] for row in seen["rows"]] == [t.topic.table for t in first.tables]
    assert len(seen["charts"]) == 8
    for chart, table in zip(seen["charts"], first.tables, strict=True):
        assert len(chart["bars"]) == 2 * len(table.inventory.partitions)
        assert all(bar["height"] > 0 and bar["width"] > 0 for bar in chart["bars"])

    endpoints = local_endpoints(settings.bucket)
    before = snapshot(endpoints, first)
    second = run(run_in_process)  # what the jobs do on a re-run; their packaging was the first run's
    assert all(t.produced.skipped for t in second.tables)
    assert all(line["status"] == "ok" and line["plans"] == 0 and line["read"] == 0 for line in second.archived), (
        "the archiver found work on a re-run"
    )
    assert all(r.action == "skipped" for t in second.tables for r in t.compaction)
    assert all(run["counts"].get("partitions_added", 0) == 0 for run in second.maintainer_runs)
    assert [(t.queried.rows, t.queried.tombstones) for t in second.tables] == [
        (t.queried.rows, t.queried.tombstones) for t in first.tables
    ]
    assert second.erasure is not None and not second.erasure.recorded, "the demo's request was recorded twice"
    assert second.erasure.receipts == first.erasure.receipts  # type: ignore[union-attr]
    assert snapshot(endpoints, second) == before, "a second run changed the lake or the catalog"


def assert_state(table: TableResult) -> None:
    """An upsert table holds exactly the stream's state: its keys, each row's compared columns and hour; its
    stream had every kind of change."""
    counts = table.produced.counts
    assert all(counts[kind] > 0 for kind in ("reads", "inserts", "updates", "deletes", "tombstones")), counts
    assert table.produced.state and table.queried.state == table.produced.state, table.topic.name
    assert sum(table.expected.values()) == len(table.produced.state), table.topic.name


def assert_iceberg_maintained(report: DemoReport, table: TableResult, *, complete_hours: bool = True) -> None:
    """The maintainer took an Iceberg table's freshness and complete hours from its snapshots: an age for it, and
    (``complete_hours``: an append table, whose hours fill and close) each complete hour announced once, an hour with
    rows whose next hour has rows too, and shown complete by the inventory."""
    qualified = f"{table.topic.database}.{table.topic.table}"
    assert any(qualified in run["data_age_seconds"] for run in report.maintainer_runs), report.maintainer_runs
    if not complete_hours:  # an upsert table's hours lose rows to later changes: its rows say nothing of them
        return
    announced = [
        tuple(event["partition"].values())
        for run in report.maintainer_runs
        for event in run["events"]
        if event["type"] == "PartitionComplete" and event["table"] == table.topic.table
    ]
    assert announced and len(announced) == len(set(announced)), announced
    hours = {values[1:] for values in table.partitions_with_data}
    for version, dt, hour in announced:
        following = Partition.from_values([version, dt, hour]).end
        assert (version, dt, hour) in table.partitions_with_data, (version, dt, hour)
        assert (following.strftime("%Y-%m-%d"), following.strftime("%H")) in hours, (version, dt, hour)
    complete = {p.values[1:] for p in table.inventory.partitions if p.complete}
    assert complete == {(dt, hour) for _, dt, hour in announced}, "the inventory's complete hours are those announced"


def assert_erasure(s3: Any, bucket: str, report: DemoReport) -> None:
    """One receipt for the demo's request, one row removed from each table with subject fields (ticket-opened's
    JSON Schema table among them); the tombstone
    requests' receipts remove exactly the by_key table's tombstoned rows; on the versioned bucket, the receipts count
    the object versions deleted; no subject in clear under erasure/."""
    erasure = report.erasure
    assert erasure is not None and erasure.recorded
    tables = {f"{t.topic.database}.{t.topic.table}": t for t in report.tables}
    with_subjects = {n for n, t in tables.items() if t.topic.spec.subject_fields}
    assert len(with_subjects) == 4, "the demo's request spans four tables (a Protobuf and a JSON Schema one among them)"
    receipt = erasure.receipts[erasure.request_id]
    assert {n: t["rows_removed"] for n, t in receipt["tables"].items()} == dict.fromkeys(with_subjects, 1)
    [keyed] = [n for n, t in tables.items() if t.topic.spec.erasure == "by_key"]
    tombstoned = tables[keyed].produced.tombstoned
    assert tombstoned, "the workload's tombstones delete no earlier key"
    by_tombstones = [r for i, r in erasure.receipts.items() if i != erasure.request_id]
    assert by_tombstones and all(set(r["tables"]) == {keyed} for r in by_tombstones)
    assert sum(r["tables"][keyed]["rows_removed"] for r in by_tombstones) == len(tombstoned)
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled", "the template's bucket is versioned"
    assert receipt["versions_deleted"] > 0 and sum(r["versions_deleted"] for r in by_tombstones) > 0, (
        "the receipts count the object versions the erasure deleted"
    )
    erased = tables[keyed].erased
    assert tombstoned < erased and len(erased - tombstoned) == 1, "the by_key table loses its tombstoned keys' rows"
    [person] = erased - tombstoned
    [identifier] = {tables[n].produced.subjects[person] for n in with_subjects}
    keys = [f"{tables[keyed].topic.name}-{i}" for i in tombstoned]
    for name in list_objects(s3, bucket, erasure_prefix(report.env)):
        body = s3.get_object(Bucket=bucket, Key=name)["Body"].read()  # JSON, and the subject indexes' Parquet
        assert not [c for c in (identifier, *keys) if c.encode() in body], f"{name} holds an identifier in clear"
