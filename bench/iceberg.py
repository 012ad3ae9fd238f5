"""Iceberg tables against Hive tables (``python -m bench iceberg``), each in the same run as its baseline:

- archiver: one topic of BENCH_ICEBERG_RECORDS (default 400,000) Avro records in 3 partitions, archived in plans of
  a quarter of it (four plans, so four table commits) into a Hive table and into an Iceberg table, alternated
  BENCH_PAIRS (default 3) times (each pair sees the same load of a shared machine): records/s after the Spark start
  and CPU seconds per million records, Iceberg ÷ Hive per pair, their median and spread (``bench.common.between``).
  The Iceberg run's extra work is its commits: the footers pyiceberg reads for each file's statistics, the manifests
  and metadata it writes, Glue's GetTable and UpdateTable.

- compaction: one closed hour of BENCH_ICEBERG_COMPACT_FILES (default 120) archiver-shaped files of about
  BENCH_ICEBERG_COMPACT_MB (default 90) MB in all (``bench.compactor``'s, with their business time), once as a Hive
  partition the maintainer marked complete and once appended to an Iceberg table, compacted by the compactor with
  the same knobs: the Hive write-verify-swap (its clean-up after the grace period not included) against Iceberg's
  rewrite, snapshot expiry and orphan removal; wall seconds, Iceberg ÷ Hive per alternated pair, median and spread.

Each run archives or compacts into a table of its own (a fresh environment per run).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import uuid
from typing import Any

import numpy as np

from bench.archiver import archive, forget_offsets, produce
from bench.archiver_run import TABLE_FORMAT
from bench.common import between, pair_ratios, rate_after_start, say, spread, timed, write_result
from bench.compactor import BUCKET, PARTITION, bench_topic, put_partition, register, rows_per_file
from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import table_catalog, table_location
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.spark import local_session
from spark_jobs.archiver.table_commit import append_plan
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Knobs

RECORDS = int(os.environ.get("BENCH_ICEBERG_RECORDS", "400000"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))
COMPACT_FILES = int(os.environ.get("BENCH_ICEBERG_COMPACT_FILES", "120"))
COMPACT_MB = int(os.environ.get("BENCH_ICEBERG_COMPACT_MB", "90"))


def archiver_pairs(endpoints: Endpoints) -> dict[str, Any]:
    """The Iceberg archiver against the Hive archiver on the same records, in alternated pairs."""
    topic = f"bench.iceberg.{uuid.uuid4().hex[:8]}"
    value_bytes = produce(endpoints, topic, RECORDS)
    per_plan = RECORDS // 4
    runs: dict[TableFormat, list[dict[str, Any]]] = {TableFormat.ICEBERG: [], TableFormat.HIVE: []}
    for number in range(1, PAIRS + 1):
        for table_format, found in runs.items():
            forget_offsets(endpoints, topic)
            found.append(archive([topic], per_plan, env={TABLE_FORMAT: table_format.value}))
            say(f"iceberg pair {number}/{PAIRS}, {table_format}: {rate_after_start(found[-1]):,.0f} records/s")
    return {
        "records": RECORDS,
        "avg_value_bytes": value_bytes,
        "records_per_plan": per_plan,
        "iceberg_runs": runs[TableFormat.ICEBERG],
        "hive_runs": runs[TableFormat.HIVE],
        "iceberg_to_hive": between(runs[TableFormat.ICEBERG], runs[TableFormat.HIVE]),
    }


def compaction_input(endpoints: Endpoints, table_format: TableFormat) -> tuple[Topic, int]:
    """A fresh topic's closed hour of small files, as ``table_format`` keeps it; the topic and its rows."""
    topic = bench_topic(f"iceberg_{table_format.value}")
    topic = dataclasses.replace(topic, spec=topic.spec.model_copy(update={"table_format": table_format}))
    rows_each = rows_per_file(np.random.default_rng(7), COMPACT_MB * 1024 * 1024 / COMPACT_FILES)
    s3 = make_client(endpoints, "s3")
    put_partition(s3, endpoints.bucket, topic, PARTITION, files=COMPACT_FILES, rows=rows_each, business_time=True)
    if table_format == TableFormat.HIVE:
        register(endpoints, topic, [PARTITION])
        return topic, rows_each * COMPACT_FILES
    make_client(endpoints, "glue").create_database(DatabaseInput={"Name": topic.database})
    files = [f"s3://{endpoints.bucket}/{k}" for k in list_objects(s3, endpoints.bucket, topic.prefix.data_prefix())]
    location = table_location(endpoints.bucket, topic.prefix)
    append_plan(
        table_catalog(endpoints),
        (topic.database, topic.table),
        location=location,
        plan_id="bench",
        kafka_topic=topic.kafka_topic,
        ranges={},
        files=files,
        say=lambda _: None,
    )
    return topic, rows_each * COMPACT_FILES


def compaction_pairs(endpoints: Endpoints) -> dict[str, Any]:
    """The compactor on an Iceberg table against the compactor on a Hive partition, the same files, in pairs."""
    spark = local_session(endpoints, "kafkalake-bench-iceberg")
    seconds: dict[TableFormat, list[float]] = {TableFormat.ICEBERG: [], TableFormat.HIVE: []}
    try:
        for number in range(1, PAIRS + 1):
            for table_format, found in seconds.items():
                topic, rows = compaction_input(endpoints, table_format)
                compactor = Compactor(spark, endpoints, [topic], Knobs(), say=lambda _: None)
                took, [result] = timed(compactor.run)
                if result.action != "compacted" or result.rows != rows:
                    raise RuntimeError(f"{table_format} compaction did not compact all {rows} rows: {result}")
                found.append(took)
                say(f"iceberg compaction pair {number}/{PAIRS}, {table_format}: {took:.1f} s")
    finally:
        spark.stop()
    ratios = pair_ratios(seconds[TableFormat.ICEBERG], seconds[TableFormat.HIVE])
    return {
        "input_files": COMPACT_FILES,
        "input_mb": COMPACT_MB,
        "iceberg_seconds": seconds[TableFormat.ICEBERG],
        "hive_seconds": seconds[TableFormat.HIVE],
        "iceberg_to_hive_seconds": statistics.median(ratios),
        "iceberg_to_hive_seconds_pairs": ratios,
        "iceberg_to_hive_seconds_spread": spread(ratios),
    }


def main() -> None:
    with stack.running():
        endpoints = with_bucket(local_endpoints(), BUCKET)
        write_result(
            "iceberg", {"archiver": archiver_pairs(local_endpoints()), "compaction": compaction_pairs(endpoints)}
        )
