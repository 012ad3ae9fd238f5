"""Iceberg tables against Hive tables (``python -m bench iceberg``), each in the same run as its baseline:

- archiver: one topic of BENCH_ICEBERG_RECORDS (default 400,000) Avro records in 3 partitions, archived in plans of
  a quarter of it (four plans, so four table commits) into a Hive table and into an Iceberg table, alternated
  BENCH_PAIRS (default 3) times (each pair sees the same load of a shared machine): records/s after the Spark start
  and CPU seconds per million records, Iceberg ÷ Hive per pair, their median and spread (``bench.common.between``).
  The Iceberg run's extra work is its commits: the footers pyiceberg reads for each file's statistics, the manifests
  and metadata it writes, Glue's GetTable and UpdateTable.

Each run archives into a table of its own (``bench.archiver_run``: a fresh environment per run).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from bench.archiver import archive, forget_offsets, produce
from bench.archiver_run import TABLE_FORMAT
from bench.common import between, rate_after_start, say, write_result
from kafkalake.endpoints import Endpoints
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints

RECORDS = int(os.environ.get("BENCH_ICEBERG_RECORDS", "400000"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))


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


def main() -> None:
    endpoints = local_endpoints()
    with stack.running():
        write_result("iceberg", {"archiver": archiver_pairs(endpoints)})
