"""Every demo table read as its users read it, before compaction, after the swap and after the clean-up: SDK for
pandas (whole table, a ``partition_filter`` on ``dt``/``hour``, one on ``schema_version``) and Spark SQL over the
Glue definitions count exactly what the workload planned. A whole-table SDK for pandas read without a filter lists
the table's location: exact before compaction and after the clean-up, and between the two it counts each swapped
partition twice (measured here: no layout avoids it, see ``kafkalake.layout``). The Iceberg table is read through
Spark's and pyiceberg's Iceberg catalogs instead, exactly at every one of these moments (its snapshots)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import awswrangler as wr
import pytest
from awswrangler.exceptions import InvalidSchemaConvergence
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import SNAPSHOT_RETENTION, table_catalog
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.checks.interop import Check, Read, checks_for
from kafkalake_dev.checks.inventory import table_objects
from kafkalake_dev.checks.readers import (
    iceberg_spark_read,
    pyiceberg_read,
    spark_read,
    wrangler_read,
    wrangler_session,
)
from kafkalake_dev.demo import run_demo
from kafkalake_dev.local.runner import run_in_process
from kafkalake_dev.local.sandbox import isolated_env, with_bucket
from kafkalake_dev.local.workload import Produced
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Knobs

pytestmark = [pytest.mark.stack, pytest.mark.spark]
RECORDS = 600
Counts = dict[tuple[str, str, str], Read]
"""(table, check, reader) → what it read."""


def read_all(endpoints: Endpoints, spark: SparkSession, checks: list[Check]) -> Counts:
    """Each check through each reader of its table: a Hive table's through Glue's partitions (and SDK for pandas
    listing the location), an Iceberg table's current snapshot through Spark's and pyiceberg's Iceberg catalogs."""
    glue, tables = make_client(endpoints, "glue"), table_catalog(endpoints)
    counts: Counts = {}
    with wrangler_session(endpoints) as session:
        for check in checks:
            if check.iceberg:
                counts[(check.table, check.label, "spark sql, iceberg")] = iceberg_spark_read(spark, check)
                counts[(check.table, check.label, "pyiceberg")] = pyiceberg_read(tables, check)
                continue
            counts[(check.table, check.label, "sdk for pandas")] = wrangler_read(session, check)
            counts[(check.table, check.label, "spark sql")] = spark_read(spark, glue, check)
            if not check.partition:
                listed = wrangler_read(session, check, through_partitions=False)
                counts[(check.table, check.label, "sdk for pandas, no filter")] = listed
    return counts


def exact(checks: list[Check], counts: Counts, *, skip: str = "") -> list[tuple[str, str, str, Read, int]]:
    """The reads that are not the plan (rows, no duplicates); ``skip`` leaves one reader out."""
    planned = {(c.table, c.label): c.planned for c in checks}
    return [
        (*key, read, planned[key[:2]])
        for key, read in counts.items()
        if key[2] != skip and read != Read(planned[key[:2]], 0)
    ]


def test_every_reader_counts_every_demo_table_exactly(
    spark: SparkSession, local_stack: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, catalog_dir, environments = isolated_env(tmp_path)
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(environments))
    catalog = load_topic_catalog(catalog_dir)
    endpoints = with_bucket(local_stack, settings.bucket)
    topics: list[Topic] = catalog.for_env(settings.name)
    checks: list[Check] = []
    before: Counts = {}

    def read_before(produced: dict[str, Produced]) -> None:
        checks.extend(c for t in topics for c in checks_for(t, produced[t.kafka_topic]))
        before.update(read_all(endpoints, spark, checks))

    demo = run_demo(
        endpoints,
        settings,
        catalog,
        records=RECORDS,
        say=print,
        producing=lambda _t: lambda _n: None,
        before_compaction=read_before,
        erase=False,
        submit=run_in_process,  # the jobs' packaging is the end-to-end test's; here the readers are the subject
    )
    two_versions = sorted({c.table for c in checks if c.label == "schema_version = 2" and not c.iceberg})
    assert len(two_versions) == 2  # card_authorized (Avro) and order_placed (Protobuf); customers is an Iceberg table
    assert exact(checks, before) == []
    for name in two_versions:
        database, table = name.split(".")
        with wrangler_session(endpoints) as session, pytest.raises(InvalidSchemaConvergence):
            # the SDK's defaults compare every file's schema: the one option the readers pass (WRANGLER_OPTIONS)
            wr.s3.read_parquet_table(
                table=table, database=database, partition_filter=lambda _: True, boto3_session=session
            )

    swapped = read_all(endpoints, spark, checks)
    assert exact(checks, swapped, skip="sdk for pandas, no filter") == []
    twice = {
        f"{t.topic.database}.{t.topic.table}": sum(r.rows for r in t.compaction if r.action == "compacted")
        for t in demo.tables
    }
    assert sum(twice.values()) > 0, "nothing was compacted"
    for check in (c for c in checks if not c.iceberg):
        if not check.partition:  # the inputs are still there: the no-filter read lists them beside the output
            listed = swapped[(check.table, check.label, "sdk for pandas, no filter")]
            assert listed == Read(check.planned + twice[check.table], twice[check.table]), check.table

    # past the grace period: the clean-up deletes the inputs; past the snapshots' retention: an Iceberg table's expire
    later = datetime.now(UTC) + max(timedelta(hours=2), SNAPSHOT_RETENTION + timedelta(hours=1))
    knobs = Knobs(min_input_files=10**6, grace_period=timedelta(minutes=60))  # clean up, compact nothing new
    s3 = make_client(endpoints, "s3")
    raw_before = {t.name: len(table_objects(s3, settings.bucket, t.prefix)[0]) for t in topics}
    results = Compactor(spark, endpoints, topics, knobs, now=lambda: later, say=lambda _: None).run()
    assert "failed" not in {r.action for r in results} and "compacted" not in {r.action for r in results}
    raw_after = {t.name: len(table_objects(s3, settings.bucket, t.prefix)[0]) for t in topics}
    assert all(raw_after[name] < raw_before[name] for name in raw_after), (raw_before, raw_after)
    cleaned = read_all(endpoints, spark, checks)
    assert exact(checks, cleaned) == []
